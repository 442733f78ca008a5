"""`egress-proxy usage` (runtime/usage.py): each sandbox's `llm:` spending and what is
left, read from a real redis-server; with the memory backend, the running proxy's admin
API's answer (`GET /usage`, D570) laid out as the same lines."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_egress.proxy.clauses.budget import BudgetKey, Rate
from sandbox_egress.proxy.state.redis import RedisState
from sandbox_egress.proxy.state.settings import StateConfig
from sandbox_egress.runtime import approvalscli, usage
from sandbox_egress.runtime.cli import main
from testbed.redisserver import RedisServer, start_redis

CONFIG = """\
network:
  allowlist:
    - domain: "*.openai.com"
      llm:
        api: openai
        budget: {{tokens: "20k/day", cost: "5USD/day"}}
        prices: {{"*": {{input: 1, output: 1}}}}
    - domain: api.anthropic.com
      llm: {{api: anthropic}}
{state}"""


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = start_redis(tmp_path_factory.mktemp("redis"))
    try:
        yield server
    finally:
        server.stop()


def test_usage_reads_each_sandboxs_spending(
    redis: RedisServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "egress.yaml"
    config.write_text(CONFIG.format(state=f'state: {{backend: redis, url: "{redis.url}"}}'))

    async def spend() -> None:
        store = RedisState(StateConfig("redis", redis.url))
        tokens, cost = Rate(20_000, 86400), Rate(5_000_000_000, 86400)
        for sandbox, used in (("sb-a", 1200), ("client-10.0.0.2", 50_000)):
            charges = (("llm_tokens", tokens, used), ("llm_cost", cost, used * 1000))
            await store.charge(BudgetKey(sandbox, "*.openai.com"), charges)
        await store.close()

    asyncio.run(spend())
    assert main(["usage", "--config", str(config)]) == 0
    lines = capsys.readouterr().out.splitlines()
    # the tokens refill 0.23 a second, the cost 58 nano-USD: the cost compared to 1e-4 USD;
    # the first sandbox spent past its budget (0 left, the spending shown whole)
    columns = [line.split("\t") for line in lines]
    assert [c[:3] for c in columns] == [
        ["client-10.0.0.2", "*.openai.com", "tokens 50000 of 20000/day (0 left)"],
        ["sb-a", "*.openai.com", "tokens 1200 of 20000/day (18800 left)"],
    ]
    costs = [
        re.fullmatch(r"cost (\S+) USD of 5.000000 USD/day \((\S+) USD left\)", c[3])
        for c in columns
    ]
    assert [(float(m[1]), float(m[2])) for m in costs if m] == [
        pytest.approx((0.05, 4.95), abs=1e-4),
        pytest.approx((0.0012, 4.9988), abs=1e-4),
    ]
    assert main(["usage", "--config", str(config), "--sandbox", "sb-a"]) == 0
    assert [x.split("\t")[:3] for x in capsys.readouterr().out.splitlines()] == [
        ["sb-a", "*.openai.com", "tokens 1200 of 20000/day (18800 left)"]
    ]


def test_the_memory_backend_needs_the_running_proxys_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """D570: the memory backend asks the running proxy, with its admin token."""
    monkeypatch.delenv(approvalscli.TOKEN_ENV, raising=False)
    config = tmp_path / "egress.yaml"
    config.write_text(CONFIG.format(state=""))
    assert main(["usage", "--config", str(config)]) == 2
    assert "usage (state.backend: memory) needs --admin-token-file FILE" in capsys.readouterr().err
    missing = tmp_path / "nothing"
    assert main(["usage", "--config", str(config), "--admin-token-file", str(missing)]) == 2
    assert capsys.readouterr().err == f"egress-proxy: cannot read {missing}\n"


def test_the_admin_apis_answer_is_printed_as_the_redis_lines() -> None:
    """The JSON of GET /usage, laid out exactly as the Redis path lays out its levels."""
    document = {
        "usage": [
            {
                "sandbox": "sb-a",
                "entry": "*.openai.com",
                "budgets": [
                    {"kind": "llm_tokens", "amount": 20000, "window_s": 86400, "level": 18800.4},
                    {"kind": "llm_cost", "amount": 5 * 10**9, "window_s": 86400, "level": 4.9e9},
                ],
            },
            {
                "sandbox": "client-10.0.0.2",
                "entry": "api.anthropic.com",
                "budgets": [{"kind": "llm_tokens", "amount": 500, "window_s": 3600, "level": -7}],
            },
        ]
    }
    assert usage.lines(document) == [
        "sb-a\t*.openai.com\ttokens 1200 of 20000/day (18800 left)"
        "\tcost 0.100000 USD of 5.000000 USD/day (4.900000 USD left)",
        "client-10.0.0.2\tapi.anthropic.com\ttokens 507 of 500/hour (0 left)",
    ]
    tokens, cost = Rate(20000, 86400), Rate(5 * 10**9, 86400)
    assert usage.lines(document)[0] == usage.line(
        "sb-a", "*.openai.com", [("llm_tokens", tokens, 18800.4), ("llm_cost", cost, 4.9e9)]
    )
    assert usage.lines({"usage": []}) == []


@pytest.mark.parametrize(
    "document",
    [
        None,
        [],
        {},
        {"usage": {}},
        {"usage": [[]]},
        {"usage": [{"sandbox": "a", "entry": "b"}]},
        {"usage": [{"sandbox": 1, "entry": "b", "budgets": []}]},
        {"usage": [{"sandbox": "a", "entry": "b", "budgets": [{"kind": "llm_tokens"}]}]},
        {"usage": [{"sandbox": "a", "entry": "b", "budgets": [
            {"kind": "llm_tokens", "amount": 1.5, "window_s": 60, "level": 1}]}]},
        {"usage": [{"sandbox": "a", "entry": "b", "budgets": [
            {"kind": "llm_tokens", "amount": 1, "window_s": 0, "level": 1}]}]},
        {"usage": [{"sandbox": "a", "entry": "b", "budgets": [
            {"kind": "llm_tokens", "amount": 1, "window_s": 60, "level": True}]}]},
    ],
)  # fmt: skip
def test_an_answer_not_of_that_shape_is_refused(document: object) -> None:
    with pytest.raises(ValueError):
        usage.lines(document)
