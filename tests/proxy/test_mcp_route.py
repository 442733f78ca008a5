"""Which requests of an MCP entry are judged (proxy/mcp/route.py, issue 43): the endpoint
by every spelling a server routes to it, JSON-RPC bodies on other paths, WebSocket
upgrades; tools lists on event streams filtered whatever their id; an `mcp` entry never
a raw TCP relay (proxy/tenancy/ceiling.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox_egress.proxy.config.loader import parse
from sandbox_egress.proxy.decision import Reason
from sandbox_egress.proxy.hosts import canonical_host
from sandbox_egress.proxy.mcp import tools_list
from sandbox_egress.proxy.mcp.judge import judge_post
from sandbox_egress.proxy.mcp.policy import McpPolicy, parse_mcp
from sandbox_egress.proxy.mcp.route import Route, maybe_jsonrpc, mcp_route, on_endpoint
from sandbox_egress.proxy.mcp.sse import EventStream
from sandbox_egress.proxy.mcp.tools_list import streams_filter
from sandbox_egress.proxy.mcp.websocket import filter_received, judge_sent
from sandbox_egress.proxy.policy import Policy
from sandbox_egress.proxy.stages import ConnectionFacts, decide_tcp


def policy(**extra: Any) -> McpPolicy:
    problems: list[tuple[str, str]] = []
    raw = {"endpoint": ["/mcp"], "tools": ["search"], "filter_tools_list": True, **extra}
    ok, parsed = parse_mcp(raw, "mcp", lambda where, what: problems.append((where, what)))
    assert ok and parsed is not None, problems
    return parsed


POLICY = policy()
ON = ["/mcp", "/mcp/", "/MCP", "/Mcp/", "/mcp//", "/mcp/x", "/MCP/x/y", "//mcp", "/./mcp",
      "/x/../mcp", "/mcp/.", "/%6dcp", "/%6D%63%70", "/m%43p/", "/%256dcp", "/mcp;x",
      "/mcp;a=b/", "/%2Fmcp", "\\mcp", "/mcp\\x", "/MCP%2f"]  # fmt: skip
OFF = ["/", "/mcpx", "/mc", "/mcp-docs", "/api/mcp", "/x/mcp", "/mcp/../x", "/m/cp", "/%6dcq"]


@pytest.mark.parametrize("path", ON)
def test_every_spelling_of_the_endpoint_is_on_it(path: str) -> None:
    assert on_endpoint(POLICY, path)


@pytest.mark.parametrize("path", OFF)
def test_other_paths_are_not(path: str) -> None:
    assert not on_endpoint(POLICY, path)


def _spelled(char: str, how: int) -> str:
    if how == 0:
        return char
    if how == 1:
        return char.swapcase()
    encoded = "%" + format(ord(char), "02x")
    return encoded.upper() if how == 2 else encoded


@st.composite
def endpoint_spellings(draw: st.DrawFn) -> str:
    """A spelling of `/mcp` or of a path below it: case, escapes (once or twice),
    slashes, `;params`, dot segments, sub-paths (also used end to end:
    tests/e2e/test_mcp_spellings_e2e.py)."""
    lead = draw(st.sampled_from(["/", "//", "/./", "/z/../", "/%2e/", "/%2E%2E/", "/%252e/"]))
    word = "".join(_spelled(c, draw(st.integers(0, 3))) for c in "mcp")
    noise = draw(st.sampled_from(["", ";", ";p", ";a=b", ";x;y"]))
    tail = draw(st.sampled_from(["", "/", "//", "/x", "/x/y", "/.", "/%2F", "/X/..", "/x;q"]))
    return lead + word + noise + tail


@settings(max_examples=400, deadline=None)
@given(endpoint_spellings())
def test_generated_spellings_of_the_endpoint_are_judged(path: str) -> None:
    """Every generated spelling is on the endpoint, so a POST there is judged — and a
    refused tools/call refused (never reaches the upstream)."""
    assert on_endpoint(POLICY, path), path
    assert mcp_route((POLICY,), path, body=True, websocket=False) is Route.POST
    refused = judge_post(POLICY, ["application/json"], {}, CALL_DROP)
    assert refused.reason is Reason.MCP_TOOL_DENIED


CALL_DROP = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"drop"}}'


def test_the_route_of_each_kind_of_request() -> None:
    allowing = policy(websocket=True)
    assert mcp_route((POLICY,), "/mcp/", body=True, websocket=False) is Route.POST
    assert mcp_route((POLICY,), "/rpc", body=True, websocket=False) is Route.SNIFF
    assert mcp_route((POLICY,), "/mcp", body=False, websocket=False) is Route.ANSWER
    assert mcp_route((POLICY,), "/mcp", body=False, websocket=True) is Route.REFUSED
    assert mcp_route((allowing,), "/x", body=False, websocket=True) is Route.WEBSOCKET
    assert mcp_route((allowing, POLICY), "/x", body=False, websocket=True) is Route.REFUSED


@pytest.mark.parametrize(
    ("body", "judged"),
    [
        (CALL_DROP, True),
        (b'  [{"jsonrpc":"2.0","method":"ping","id":1}]', True),
        (b'{"method":"tools/call"}', True),  # no "jsonrpc": judged, and refused
        (b'{"\\u006asonrpc":"2.0","method":"x"}', True),
        (b'{"jsonrpc":"2.0","jsonrpc":"2.0","method":"x"}', True),
        (b"\xef\xbb\xbf{}", True),  # a byte-order mark: not JSON to Python, judged
        (b"{not json", True),
        (b'{\x00"\x00j\x00', True),  # UTF-16 without a mark
        (b'{"name":"ada","tags":[1,2]}', False),
        (b"[1,2,3]", False),
        (b"name=ada&method=x", False),
        (b"", False),
        (b"plain text {", False),
    ],
)
def test_which_bodies_on_other_paths_are_judged(body: bytes, judged: bool) -> None:
    assert maybe_jsonrpc(body) is judged


def test_a_websocket_key_is_parsed() -> None:
    assert not POLICY.websocket and policy(websocket=True).websocket
    problems: list[str] = []
    ok, _ = parse_mcp(
        {"endpoint": ["/mcp"], "websocket": "yes"}, "m", lambda w, m: problems.append(w)
    )
    assert not ok and problems == ["m.websocket"]


TOOLS = {"jsonrpc": "2.0", "id": 99, "result": {"tools": [{"name": "search"}, {"name": "drop"}]}}


def _names(data: bytes) -> list[str]:
    text = data.decode().split("data: ", 1)[1]
    return [t["name"] for t in json.loads(text)["result"]["tools"]]


def test_a_stream_filters_every_tools_list_whatever_its_id() -> None:
    tools = streams_filter((POLICY,))
    assert tools is not None
    stream = EventStream(tools.rewrite, POLICY.max_body)
    out = stream.feed(b"id: 1\ndata:\n\n")  # an empty priming event passes as it is
    assert out == b"id: 1\ndata:\n\n"
    out = stream.feed(b"id: 2\ndata: " + json.dumps(TOOLS).encode() + b"\n\n")
    assert _names(out) == ["search"]
    escaped = json.dumps(TOOLS).replace('"tools"', '"\\u0074ools"').encode()
    assert _names(stream.feed(b"data: " + escaped + b"\n\n")) == ["search"]
    note = b'data: {"jsonrpc":"2.0","method":"notifications/progress","params":{}}\n\n'
    assert stream.feed(note) == note


def test_a_websocket_message_is_judged_both_ways() -> None:
    allowing = policy(websocket=True)
    assert judge_sent((allowing,), CALL_DROP).reason is Reason.MCP_TOOL_DENIED
    search = CALL_DROP.replace(b"drop", b"search")
    assert judge_sent((allowing,), search).allowed
    assert judge_sent((allowing,), b'{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}').reason is (
        Reason.MCP_BAD_REQUEST
    )
    received = filter_received((allowing,), streams_filter((allowing,)), json.dumps(TOOLS).encode())
    assert received.content is not None
    assert [t["name"] for t in json.loads(received.content)["result"]["tools"]] == ["search"]
    assert filter_received((allowing,), None, b"not json").content is None


def test_an_address_entry_with_mcp_never_relays_raw_tcp() -> None:
    """Raw TCP would carry MCP messages past the judge: the ceiling refuses it (D335)."""
    entries = [{"domain": "93.184.216.0/24", "mcp": {"endpoint": ["/mcp"]}}]
    config = parse({"network": {"allowlist": entries}}, "env.yaml", {})
    facts = ConnectionFacts(target=(canonical_host("93.184.216.34"), 80))
    answer = decide_tcp(Policy(config), facts, False, ("93.184.216.34", 80))
    assert (answer.decision.reason, answer.pin) == (Reason.MCP_BAD_REQUEST, None)
    plain = parse({"network": {"allowlist": [{"domain": "93.184.216.0/24"}]}}, "env.yaml", {})
    assert decide_tcp(Policy(plain), facts, False, ("93.184.216.34", 80)).pin is not None


def test_a_stream_filter_is_made_once_per_policies_and_the_kept_ones_are_bounded() -> None:
    """`streams_filter` keeps its answer per policies tuple (by the policies' identity):
    the same answer as made anew, for filtering and non-filtering policies, never one
    of an equal-looking but other policy, and never more than STREAMS_KEPT answers."""
    tools_list._STREAMS.clear()
    filtering, plain = policy(), policy(filter_tools_list=False)
    first = streams_filter((filtering,))
    assert first == tools_list.ToolsFilter((filtering,), None)
    assert streams_filter((filtering,)) is first  # kept, not made again
    assert streams_filter((plain,)) is None and streams_filter((plain,)) is None
    assert streams_filter((plain, filtering)) == tools_list.ToolsFilter((filtering,), None)
    twin = policy()  # equal fields, another configuration's object
    assert streams_filter((twin,)) is not first and streams_filter((twin,)).policies[0] is twin  # type: ignore[union-attr]
    made = [policy() for _ in range(tools_list.STREAMS_KEPT * 2)]
    for each in made:
        assert streams_filter((each,)) == tools_list.ToolsFilter((each,), None)
        assert len(tools_list._STREAMS) <= tools_list.STREAMS_KEPT
