"""Generated input against the MCP judge (proxy/mcp/): arbitrary bytes and arbitrary JSON
never crash it and never get past a clause that forbids them; a duplicate key nested
anywhere is refused; the SSE transform's output does not depend on how the answer was cut
into chunks."""

from __future__ import annotations

import json
import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox_egress.proxy.decision import Reason
from sandbox_egress.proxy.mcp.judge import judge_post
from sandbox_egress.proxy.mcp.sse import EventStream
from sandbox_egress.proxy.mcp.tools_list import ToolsFilter, Unreadable
from tests.proxy.test_mcp import JSON, POLICY

REFUSALS = {
    Reason.MCP_BAD_REQUEST,
    Reason.MCP_METHOD_DENIED,
    Reason.MCP_TOOL_DENIED,
    Reason.MCP_ARGUMENT_DENIED,
}
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
keys = st.sampled_from(["owner", "repo", "title", "meta", "labels", "first", "a", ""])
values = st.recursive(
    scalars | st.sampled_from(["acme", "web", "api", "bug", "x\n", 10, 20]),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=4),
    max_leaves=20,
)
TITLE = re.compile(r"[^\n]{1,200}")


def message(name: Any, arguments: Any) -> bytes:
    params = {"name": name, "arguments": arguments}
    return json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    ).encode()


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.lists(st.text(max_size=30), max_size=2))
def test_arbitrary_bytes_never_crash(body: bytes, content_type: list[str]) -> None:
    verdict = judge_post(POLICY, content_type, {}, body)
    assert verdict.reason is None or verdict.reason in REFUSALS


@settings(max_examples=300, deadline=None)
@given(values)
def test_arbitrary_json_never_crashes(document: Any) -> None:
    verdict = judge_post(POLICY, JSON, {}, json.dumps(document).encode())
    assert verdict.reason is None or verdict.reason in REFUSALS


def holds(arguments: Any) -> bool:
    """create_issue's clauses, written again without the judge's code."""
    if not isinstance(arguments, dict):
        return False
    meta = arguments.get("meta")
    labels = meta.get("labels") if isinstance(meta, dict) else None
    first = labels.get("first") if isinstance(labels, dict) else None
    title = arguments.get("title")
    return (
        type(arguments.get("owner")) is str
        and arguments["owner"] == "acme"
        and type(arguments.get("repo")) is str
        and arguments["repo"] in ("web", "api")
        and type(title) is str
        and TITLE.fullmatch(title) is not None
        and type(first) is str
        and first == "bug"
    )


arguments = st.fixed_dictionaries(
    {},
    optional={
        "owner": values,
        "repo": values,
        "title": values | st.text(max_size=210),
        "meta": st.fixed_dictionaries(
            {"labels": values | st.fixed_dictionaries({"first": values})}
        ),
    },
)


@settings(max_examples=500, deadline=None)
@given(arguments)
def test_a_clause_is_never_passed(arguments: dict[str, Any]) -> None:
    verdict = judge_post(POLICY, JSON, {}, message("create_issue", arguments))
    assert verdict.allowed is holds(arguments)
    if not verdict.allowed:
        assert verdict.reason is Reason.MCP_ARGUMENT_DENIED


@settings(max_examples=300, deadline=None)
@given(values, st.text(max_size=10))
def test_only_listed_tools_are_called(arguments: Any, name: str) -> None:
    verdict = judge_post(POLICY, JSON, {}, message(name, arguments))
    if verdict.allowed:
        assert name in ("search_repositories", "create_issue", "set_limit")


texts = st.recursive(
    scalars.map(json.dumps),
    lambda children: (
        st.lists(children, max_size=3).map(lambda xs: "[" + ",".join(xs) + "]")
        | st.dictionaries(keys, children, max_size=3).map(
            lambda d: "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in d.items()) + "}"
        )
    ),
    max_leaves=10,
)


@st.composite
def with_duplicate(draw: st.DrawFn) -> bytes:
    key = draw(keys)
    inner = "{" + f"{json.dumps(key)}:{draw(texts)},{json.dumps(key)}:{draw(texts)}" + "}"
    for wrapper in draw(st.lists(st.sampled_from(["list", "object"]), max_size=5)):
        inner = f"[{draw(texts)},{inner}]" if wrapper == "list" else '{"w":' + inner + "}"
    where = draw(st.sampled_from(["arguments", "params", "batch"]))
    if where == "arguments":
        text = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search_repositories","arguments":{"q":%s}}}'
    elif where == "params":
        text = '{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":%s}}'
    else:
        text = '[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"ping","params":{"x":%s}}]'
    return (text % inner).encode()


@settings(max_examples=300, deadline=None)
@given(with_duplicate())
def test_a_duplicate_key_anywhere_is_refused(body: bytes) -> None:
    assert judge_post(POLICY, JSON, {}, body).reason is Reason.MCP_BAD_REQUEST


FILTER = ToolsFilter((POLICY,), frozenset({1}))
events = st.lists(
    st.one_of(
        st.just(b'data: {"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"delete_repo"}]}}\n\n'),
        st.just(b"event: message\r\ndata: {}\r\n\r\n"),
        st.just(b": keep-alive\n\n"),
        st.binary(max_size=40),
    ),
    max_size=6,
).map(b"".join)


@settings(max_examples=300, deadline=None)
@given(events, st.lists(st.integers(min_value=1, max_value=50), max_size=20))
def test_sse_output_does_not_depend_on_chunks(stream: bytes, cuts: list[int]) -> None:
    def run(pieces: list[bytes]) -> bytes | None:
        transform = EventStream(FILTER.rewrite, 4096)
        try:
            return b"".join(transform.feed(p) for p in pieces if p) + transform.feed(b"")
        except Unreadable:
            return None

    pieces, at = [], 0
    for cut in cuts:
        pieces.append(stream[at : at + cut])
        at += cut
    pieces.append(stream[at:])
    whole = run([stream])
    assert run(pieces) == whole
    if whole is not None:  # no event a client reads lists a tool the policy refuses
        assert not any("delete_repo" in data for data in dispatched(whole))


def dispatched(stream: bytes) -> list[str]:
    """The data of each event an EventSource would dispatch (an independent reading)."""
    text = stream.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")
    found = []
    for block in text.removeprefix("\ufeff").split("\n\n"):
        data = [
            line[5:].removeprefix(" ") if line.startswith("data:") else ""
            for line in block.split("\n")
            if line.startswith("data:") or line == "data"
        ]
        if data:
            found.append("\n".join(data))
    return found
