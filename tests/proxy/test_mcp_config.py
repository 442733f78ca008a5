"""An entry's `mcp:` block as `check` reads it (proxy/mcp/policy.py): every problem at its
location, and what a valid block loads into."""

from __future__ import annotations

import pytest

from sandbox_egress.proxy.config.loader import ConfigError, parse
from sandbox_egress.proxy.mcp.policy import DEFAULT_METHODS, parse_size


def problems_of(block: object, **entry: object) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse(
            {"network": {"allowlist": [{"domain": "mcp.example", "mcp": block, **entry}]}},
            "env.yaml",
            {},
        )
    return [str(p) for p in info.value.problems]


WHERE = "env.yaml: network.allowlist[0].mcp"
INVALID = [
    ("not-a-mapping", ["/mcp"], f"{WHERE}: must be a mapping"),
    ("unknown-key", {"endpoint": ["/mcp"], "tool": []}, f"{WHERE}: unknown key 'tool'"),
    ("no-endpoint", {"tools": [{"name": "a"}]}, f"{WHERE}.endpoint: must be a non-empty list"),
    ("endpoint-relative", {"endpoint": ["mcp"]}, f"{WHERE}.endpoint[0]: an endpoint is an exact"),
    ("endpoint-glob", {"endpoint": ["/mcp/*"]}, f"{WHERE}.endpoint[0]: an endpoint is an exact"),
    ("endpoint-not-canonical", {"endpoint": ["/a/../mcp"]},
     f"{WHERE}.endpoint[0]: an endpoint must be written canonically"),
    ("endpoint-encoded", {"endpoint": ["/%6dcp"]},
     f"{WHERE}.endpoint[0]: an endpoint must be written canonically"),
    ("empty-methods", {"endpoint": ["/mcp"], "methods": []}, f"{WHERE}.methods: must be a non-empty"),
    ("empty-tools", {"endpoint": ["/mcp"], "tools": []}, f"{WHERE}.tools: must be a non-empty"),
    ("tool-without-name", {"endpoint": ["/mcp"], "tools": [{"arguments": {}}]},
     f"{WHERE}.tools[0]: a tool is a mapping with a non-empty name"),
    ("tool-unknown-key", {"endpoint": ["/mcp"], "tools": [{"name": "a", "args": {}}]},
     f"{WHERE}.tools[0]: unknown key 'args'"),
    ("tool-twice", {"endpoint": ["/mcp"], "tools": [{"name": "a"}, {"name": "a"}]},
     f"{WHERE}.tools[1].name: duplicate tool 'a'"),
    ("bad-re2", {"endpoint": ["/mcp"], "tools": [{"name": "a", "arguments": {"x": {"matches": "(a"}}}]},
     f"{WHERE}.tools[0].arguments.x.matches: not a valid RE2 pattern: missing )"),
    ("lookahead-not-re2", {"endpoint": ["/mcp"],
     "tools": [{"name": "a", "arguments": {"x": {"matches": "(?=a)a"}}}]},
     f"{WHERE}.tools[0].arguments.x.matches: not a valid RE2 pattern"),
    ("two-kinds", {"endpoint": ["/mcp"],
     "tools": [{"name": "a", "arguments": {"x": {"equals": 1, "in": [1]}}}]},
     f"{WHERE}.tools[0].arguments.x: a clause is exactly one of equals, in, matches"),
    ("empty-in", {"endpoint": ["/mcp"], "tools": [{"name": "a", "arguments": {"x": {"in": []}}}]},
     f"{WHERE}.tools[0].arguments.x.in: must be a non-empty list"),
    ("equals-mapping", {"endpoint": ["/mcp"],
     "tools": [{"name": "a", "arguments": {"x": {"equals": {"k": 1}}}}]},
     f"{WHERE}.tools[0].arguments.x.equals: values are strings, numbers"),
    ("empty-path-part", {"endpoint": ["/mcp"],
     "tools": [{"name": "a", "arguments": {"x..y": {"equals": 1}}}]},
     f"{WHERE}.tools[0].arguments.x..y: an argument path is names joined by '.'"),
    ("filter-not-bool", {"endpoint": ["/mcp"], "filter_tools_list": "yes"},
     f"{WHERE}.filter_tools_list: must be true or false"),
    ("max-body-unit", {"endpoint": ["/mcp"], "max_body": "1MB"}, f"{WHERE}.max_body: must be a size"),
    ("max-body-huge", {"endpoint": ["/mcp"], "max_body": "1GiB"}, f"{WHERE}.max_body: must be a size"),
    ("max-body-zero", {"endpoint": ["/mcp"], "max_body": 0}, f"{WHERE}.max_body: must be a size"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("block", "expected"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID]
)
def test_a_problem_names_its_location(block: object, expected: str) -> None:
    problems = problems_of(block)
    assert any(p.startswith(expected) for p in problems), problems


def test_mcp_on_a_passthrough_entry_is_refused() -> None:
    problems = problems_of({"endpoint": ["/mcp"]}, passthrough=True)
    assert any("passthrough: a pass-through entry is not intercepted" in p for p in problems)


def test_every_problem_is_reported() -> None:
    problems = problems_of({"endpoint": [], "methods": [], "max_body": "x", "other": 1})
    assert len(problems) == 4, problems


def test_a_valid_block_loads() -> None:
    config = parse(
        {"network": {"allowlist": [{"domain": "mcp.example", "mcp": {
            "endpoint": ["/mcp", "/v1/mcp"], "tools": ["ping_tool", {"name": "b"}],
            "max_body": "64KiB", "filter_tools_list": True}}]}},
        "env.yaml",
        {},
    )  # fmt: skip
    policy = config.allowlist[0].mcp
    assert policy is not None
    assert policy.endpoints == {"/mcp", "/v1/mcp"}
    assert policy.methods == frozenset(DEFAULT_METHODS)
    assert policy.tools is not None and sorted(policy.tools) == ["b", "ping_tool"]
    assert (policy.max_body, policy.filter_tools_list) == (64 * 1024, True)


@pytest.mark.parametrize(
    ("text", "size"),
    [("1MiB", 1 << 20), ("512 KiB", 512 << 10), ("100", 100), (4096, 4096), ("64MiB", 64 << 20)],
)
def test_sizes(text: object, size: int) -> None:
    assert parse_size(text) == size
