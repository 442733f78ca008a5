"""End to end, model APIs judged and metered (docs/configuration.md#model-apis, issue 46):
the official `openai` and `anthropic` SDKs and raw clients, streamed and not, through a
real proxy process to the test model server (testbed/model_server.py) in the upstream
namespace; the model, the output cap and the key checked at the upstream; usage read
into the audit line and the metrics; budgets exact under concurrency with `--workers 2`
and with two proxies on one Redis; `egress-proxy usage` reading that Redis."""

from __future__ import annotations

import contextlib
import json
import ssl
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from testbed import procs
from testbed.harness import Harness, JsonLines
from testbed.netns import UPSTREAM_IP, Topology
from testbed.redisserver import RedisServer
from testbed.testca import Pki
from tests.e2e.conftest import EGRESS_PROXY, SECRET_ENV, PrivateProxy

pytestmark = pytest.mark.netns

PORT = 9443
KEY = "sk-egress-placeholder-openai"
CONFIG = """\
network:
  allowlist:
    - domain: api.allowed.test            # openai (nothing listens on 9399)
      ports: [{port}, 9399]
      secrets: [{{placeholder: "{key}", value: "${{{secret}}}", require: true}}]
      llm:
        api: openai
        models: ["gpt-5-mini", "gpt-4.1*"]
        max_output_tokens: 100
        budget: {{tokens: "{tokens}", cost: "1USD/day"}}
        prices:
          "gpt-5*": {{input: 0.25, output: 2.0}}
          "gpt-4.1*": {{input: 2.0, output: 8.0}}
    - domain: other.allowed.test          # anthropic
      ports: [{port}]
      llm: {{api: anthropic, models: ["claude-*"], max_output_tokens: 64}}
    - domain: x.wild.test                 # gemini
      ports: [{port}]
      llm: {{api: gemini, models: ["gemini-2.5-*"], max_output_tokens: 32}}
    - domain: 198.18.1.0/24               # opens the upstreams' range (198.18/15 is reserved)
{state}"""


def config(tokens: str = "1M/day", state: str = "") -> str:
    return CONFIG.format(port=PORT, key=KEY, secret=SECRET_ENV, tokens=tokens, state=state)


@pytest.fixture(scope="module")
def model_log(topology: Topology, pki: Pki, e2e_dir: Path) -> Iterator[JsonLines]:
    log, ready = e2e_dir / "model.jsonl", e2e_dir / "model.ready"
    log.touch()
    argv = topology.exec_prefix(topology.ns_upstream) + [
        sys.executable, "-m", "testbed.model_server", "--log", str(log), "--ready", str(ready),
        "--listen-tls", f"{UPSTREAM_IP}:{PORT}", "--cert", str(pki.server_cert),
        "--key", str(pki.server_key),
    ]  # fmt: skip
    child = procs.start("model-server", argv, e2e_dir)
    try:
        procs.wait_until("model server ready", ready.exists, timeout=15, child=child)
        yield JsonLines(log)
    finally:
        child.stop()


def http_client(view: Harness, http2: bool = False) -> httpx2.Client:
    proxy = f"http://{view.proxy_host}:{view.proxy_port}"
    trust = ssl.create_default_context(cafile=str(view.proxy_ca))
    return httpx2.Client(proxy=proxy, verify=trust, timeout=30, http2=http2)


def openai_client(view: Harness, usage: str = "10,5", http2: bool = False) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"https://api.allowed.test:{PORT}/v1",
        api_key=KEY,
        http_client=http_client(view, http2),
        default_headers={"X-Test-Usage": usage},
        max_retries=0,
    )


def audits(view: Harness, mark: int, count: int) -> list[dict[str, Any]]:
    lines = [a for a in view.audit_log.wait_count(mark, count, timeout=10) if "llm_model" in a]
    assert len(lines) == count, lines
    return lines


HI = [{"role": "user", "content": "hi"}]


def test_the_openai_sdk_streamed_and_not(
    private_proxy: Callable[..., PrivateProxy], model_log: JsonLines, harness: Harness
) -> None:
    p = private_proxy("llm-openai", config())
    client, seen, mark = (
        openai_client(p.view, "1000,200"),
        model_log.mark(),
        p.view.audit_log.mark(),
    )
    said = client.chat.completions.create(model="gpt-5-mini", messages=HI, max_tokens=4096)
    assert said.usage is not None and said.usage.total_tokens == 1200
    chunks = list(client.chat.completions.create(model="gpt-4.1-mini", messages=HI, stream=True))
    # the client did not ask for usage: it gets no usage chunk, and every chunk has a choice
    assert all(c.choices for c in chunks) and all(c.usage is None for c in chunks)
    assert (
        "".join(c.choices[0].delta.content or "" for c in chunks).strip()
        == "the quick brown fox jumps"
    )
    asked = list(
        client.chat.completions.create(
            model="gpt-5-mini", messages=HI, stream=True, stream_options={"include_usage": True}
        )
    )
    assert asked[-1].usage is not None and asked[-1].usage.prompt_tokens == 1000
    upstream = [r for r in model_log.since(seen) if r["event"] == "request"]
    assert [r["body"]["model"] for r in upstream] == ["gpt-5-mini", "gpt-4.1-mini", "gpt-5-mini"]
    assert upstream[0]["body"]["max_tokens"] == 100  # capped
    assert upstream[1]["body"]["max_completion_tokens"] == 100  # set
    assert upstream[1]["body"]["stream_options"] == {"include_usage": True}  # asked by the proxy
    assert {r["authorization"] for r in upstream} == {f"Bearer {harness.secrets[0]}"}
    lines = audits(p.view, mark, 3)
    assert [(a["llm_model"], a["llm_input_tokens"], a["llm_output_tokens"]) for a in lines] == [
        ("gpt-5-mini", 1000, 200),
        ("gpt-4.1-mini", 1000, 200),
        ("gpt-5-mini", 1000, 200),
    ]
    # 1000 in and 200 out: 0.00065 USD at gpt-5*'s prices, 0.0036 at gpt-4.1*'s
    assert [a["llm_cost_usd"] for a in lines] == [0.00065, 0.0036, 0.00065]
    samples = p.process.scrape()
    tokens = "egress_llm_tokens_total"
    assert (
        samples[(tokens, (("api", "openai"), ("direction", "input"), ("glob", "gpt-5-mini")))]
        == 2000
    )
    assert (
        samples[(tokens, (("api", "openai"), ("direction", "output"), ("glob", "gpt-4.1*")))] == 200
    )
    assert not any("gpt-4.1-mini" in str(labels) for _, labels in samples)  # never the raw model


def test_the_openai_sdk_over_http2(
    private_proxy: Callable[..., PrivateProxy], model_log: JsonLines
) -> None:
    """HTTP/2 from the sandbox (the upstream speaks HTTP/1.1): the body held and capped,
    the usage chunk the proxy asked for removed from the stream."""
    p = private_proxy("llm-h2", config())
    client, seen, mark = (
        openai_client(p.view, "40,2", http2=True),
        model_log.mark(),
        p.view.audit_log.mark(),
    )
    chunks = list(client.chat.completions.create(model="gpt-5-mini", messages=HI, stream=True))
    assert all(c.choices for c in chunks)
    said = client.chat.completions.create(model="gpt-5-mini", messages=HI, max_tokens=999)
    assert said.usage is not None and said.usage.completion_tokens == 2
    upstream = [r["body"] for r in model_log.since(seen) if r["event"] == "request"]
    assert [b.get("max_completion_tokens", b.get("max_tokens")) for b in upstream] == [100, 100]
    lines = audits(p.view, mark, 2)
    assert [(a["llm_input_tokens"], a["llm_output_tokens"]) for a in lines] == [(40, 2)] * 2


def test_the_anthropic_sdk_streamed_and_not(
    private_proxy: Callable[..., PrivateProxy], model_log: JsonLines
) -> None:
    p = private_proxy("llm-anthropic", config())
    client = anthropic.Anthropic(
        base_url=f"https://other.allowed.test:{PORT}", api_key="sk-ant-sandbox",
        http_client=http_client(p.view), default_headers={"X-Test-Usage": "321,45"}, max_retries=0,
    )  # fmt: skip
    seen, mark = model_log.mark(), p.view.audit_log.mark()
    said = client.messages.create(model="claude-sonnet-4-5", max_tokens=4096, messages=HI)
    assert (said.usage.input_tokens, said.usage.output_tokens) == (321, 45)
    with client.messages.stream(model="claude-haiku-4-5", max_tokens=10, messages=HI) as stream:
        text = "".join(stream.text_stream)
    assert text.strip() == "the quick brown fox jumps"
    with pytest.raises(anthropic.PermissionDeniedError) as refused:
        client.messages.create(model="gpt-5-mini", max_tokens=10, messages=HI)
    assert refused.value.response.headers["x-egress-denied"] == "llm_model_denied"
    upstream = [r["body"] for r in model_log.since(seen) if r["event"] == "request"]
    assert [(b["model"], b["max_tokens"]) for b in upstream] == [
        ("claude-sonnet-4-5", 64),
        ("claude-haiku-4-5", 10),
    ]
    lines = audits(p.view, mark, 2)
    assert [(a["llm_input_tokens"], a["llm_output_tokens"]) for a in lines] == [(321, 45)] * 2
    assert all("llm_cost_usd" not in a for a in lines)  # no prices


def raw(view: Harness, host: str, path: str, body: bytes, usage: str = "10,5", **extra: str):  # type: ignore[no-untyped-def]
    headers = [("Content-Type", "application/json"), ("X-Test-Usage", usage), *extra.items()]
    if host == "api.allowed.test":  # the placeholder the entry requires, swapped for the key
        headers.append(("Authorization", f"Bearer {KEY}"))
    return view.https(f"{host}:{PORT}", path, headers, method="POST", body=body)


def test_raw_gemini_and_refusals(
    private_proxy: Callable[..., PrivateProxy], model_log: JsonLines
) -> None:
    from testbed.expect import assert_refused

    p = private_proxy("llm-raw", config())
    seen, mark = model_log.mark(), p.view.audit_log.mark()
    path = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    streamed = raw(p.view, "x.wild.test", path, b'{"contents": []}', "70,30")
    assert streamed.status == 200 and streamed.body.count(b"data: ") == 5
    plain = raw(
        p.view, "x.wild.test", "/v1beta/models/gemini-2.5-pro:generateContent", b"{}", "7,3"
    )
    assert json.loads(plain.body)["usageMetadata"]["candidatesTokenCount"] == 3
    denied = raw(p.view, "x.wild.test", "/v1beta/models/gemini-1.5-pro:generateContent", b"{}")
    assert_refused(denied, "llm_model_denied")
    twice = b'{"model": "gpt-5-mini", "model": "o3", "messages": []}'
    assert_refused(
        raw(p.view, "api.allowed.test", "/v1/chat/completions", twice), "llm_bad_request", 400
    )
    assert_refused(
        raw(p.view, "api.allowed.test", "//v1/chat//completions", b'{"model": "o3"}'),
        "llm_model_denied",
    )
    large = json.dumps({"model": "gpt-5-mini", "input": "x" * (1024 * 1024)}).encode()
    too_large = raw(p.view, "api.allowed.test", "/v1/embeddings", large)
    assert_refused(too_large, "llm_bad_request", 400)  # past the held-body bound (D463)
    upstream = [r for r in model_log.since(seen) if r["event"] == "request"]
    assert [r["path"].split(":")[0] for r in upstream] == [
        "/v1beta/models/gemini-2.5-flash",
        "/v1beta/models/gemini-2.5-pro",
    ]
    assert upstream[0]["body"] == {"contents": [], "generationConfig": {"maxOutputTokens": 32}}
    lines = audits(p.view, mark, 2)
    assert [(a["llm_input_tokens"], a["llm_output_tokens"]) for a in lines] == [(70, 30), (7, 3)]


def test_a_cut_off_stream_is_charged_an_estimate(
    private_proxy: Callable[..., PrivateProxy], model_log: JsonLines
) -> None:
    p = private_proxy("llm-cut", config())
    seen, mark = model_log.mark(), p.view.audit_log.mark()
    body = json.dumps({"model": "gpt-5-mini", "messages": HI, "stream": True}).encode()
    cut = {"X-Test-Cut": "3"}  # the role chunk and two words, then the connection closes
    with contextlib.suppress(ConnectionError, OSError, ValueError):
        raw(p.view, "api.allowed.test", "/v1/chat/completions", body, "500,500", **cut)
    line = audits(p.view, mark, 1)[0]
    [sent] = [r for r in model_log.since(seen) if r["event"] == "request"]
    assert line["llm_estimated"] is True
    assert line["llm_input_tokens"] == -(-sent["body_len"] // 4)  # a token per 4 bytes
    assert 0 < line["llm_output_tokens"] < 500
    samples = p.process.scrape()
    assert samples[("egress_llm_estimated_total", (("api", "openai"), ("glob", "gpt-5-mini")))] == 1


def test_an_api_error_and_an_unreachable_upstream_cost_nothing(
    private_proxy: Callable[..., PrivateProxy], model_log: JsonLines
) -> None:
    p = private_proxy("llm-errors", config())
    mark = p.view.audit_log.mark()
    body = json.dumps({"model": "gpt-5-mini", "messages": HI}).encode()
    path = "/v1/chat/completions"
    limited = raw(p.view, "api.allowed.test", path, body, **{"X-Test-Status": "429"})
    assert limited.status == 429 and limited.header("X-Egress-Denied") is None  # the API's
    headers = [("Content-Type", "application/json"), ("Authorization", f"Bearer {KEY}")]
    gone = p.view.https("api.allowed.test:9399", path, headers, method="POST", body=body)
    assert gone.status == 502 and gone.header("X-Egress-Denied") == "upstream_refused"
    lines = audits(p.view, mark, 2)
    assert [(a["status"], a["llm_input_tokens"], a["llm_output_tokens"]) for a in lines] == [
        (429, 0, 0),
        (502, 0, 0),
    ]
    assert all("llm_estimated" not in a for a in lines)


def calls(view: Harness, count: int, usage: str, parallel: int = 1) -> list[int]:
    body = json.dumps({"model": "gpt-5-mini", "messages": HI, "max_tokens": 5}).encode()

    def one(_: int) -> int:
        return raw(view, "api.allowed.test", "/v1/chat/completions", body, usage).status

    with ThreadPoolExecutor(parallel) as pool:
        return list(pool.map(one, range(count)))


def test_the_budget_stops_the_next_call_with_retry_after(
    private_proxy: Callable[..., PrivateProxy], model_log: JsonLines
) -> None:
    from testbed.expect import assert_refused

    p = private_proxy("llm-budget", config(tokens="1000/day"))
    seen = model_log.mark()
    assert calls(p.view, 4, "200,100") == [200] * 4  # 0, 300, 600, 900 spent: below 1000
    refused = raw(p.view, "api.allowed.test", "/v1/chat/completions", b'{"model": "gpt-5-mini"}')
    assert_refused(refused, "llm_budget_exceeded", 429)
    # 200 tokens over at 1000 a day: 201 * 86.4 s until a whole token is back
    assert abs(int(refused.header("Retry-After") or 0) - 17367) <= 2
    assert len([r for r in model_log.since(seen) if r["event"] == "request"]) == 4


def exact(first: Harness, second: Harness) -> None:
    """1001 tokens a day: ten concurrent calls of 100 leave exactly one token (the 11th is
    admitted), its charge takes the spending past the budget (the 12th is refused). A lost
    charge would admit the 12th; one counted twice would refuse the 11th."""
    with ThreadPoolExecutor(2) as pool:
        done = list(pool.map(lambda v: calls(v, 5, "60,40", parallel=5), [first, second]))
    assert done == [[200] * 5, [200] * 5]
    mark = second.audit_log.mark()
    assert calls(second, 1, "60,40") == [200]
    second.audit_log.wait_count(mark, 1)  # settled: its charge went out before its audit line
    assert calls(first, 1, "60,40") == [429]


def test_exact_across_two_workers(
    private_proxy: Callable[..., PrivateProxy], model_log: JsonLines
) -> None:
    p = private_proxy("llm-workers", config(tokens="1001/day"), "--workers", "2")
    exact(p.view, p.view)


def test_exact_across_two_proxies_on_one_redis_and_usage(
    private_proxy: Callable[..., PrivateProxy],
    model_log: JsonLines,
    redis: RedisServer,
    harness: Harness,
    tmp_path: Path,
) -> None:
    state = f'state: {{backend: redis, url: "{redis.url}", key_prefix: llm-e2e}}\n'
    first = private_proxy("llm-redis-a", config(tokens="1001/day", state=state))
    second = private_proxy("llm-redis-b", config(tokens="1001/day", state=state))
    exact(first.view, second.view)
    file = tmp_path / "egress.yaml"
    file.write_text(config(tokens="1001/day", state=state))
    env = {"PATH": "/usr/bin:/bin", SECRET_ENV: harness.secrets[0]}
    done = subprocess.run(
        [str(EGRESS_PROXY), "usage", "--config", str(file)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    client = f"client-{harness.client_ip}"
    [line] = done.stdout.splitlines()
    assert line.startswith(f"{client}\tapi.allowed.test\ttokens 1100 of 1001/day (0 left)\tcost ")
    assert harness.secrets[0] not in done.stdout + done.stderr
    other = subprocess.run(
        [str(EGRESS_PROXY), "usage", "--config", str(file), "--sandbox", "nobody"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert (other.returncode, other.stdout) == (0, "")
