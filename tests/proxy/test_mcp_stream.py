"""`filter_tools_list` over JSON answers and server-sent events (proxy/mcp/tools_list.py,
proxy/mcp/sse.py): only allowed tools are listed, only the answer to the tools/list
request is touched, and each event leaves the transform the moment it is complete."""

from __future__ import annotations

import json

import pytest

from sandbox_egress.proxy.mcp.judge import judge_post
from sandbox_egress.proxy.mcp.sse import EventStream
from sandbox_egress.proxy.mcp.tools_list import (
    ToolsFilter,
    Unreadable,
    json_transform,
    tools_filter,
)
from tests.proxy.test_mcp import JSON, POLICY, policy_of, raw, rpc

TOOLS = [
    {"name": n, "inputSchema": {}} for n in ("search_repositories", "delete_repo", "create_issue")
]
ALLOWED = ["search_repositories", "create_issue"]
FILTER = ToolsFilter((POLICY,), frozenset({1, "b"}))


def answer(ident: object, tools: object = TOOLS) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": ident, "result": {"tools": tools, "nextCursor": "c"}}


def names(document: dict[str, object]) -> list[str]:
    result = document["result"]
    assert isinstance(result, dict)
    return [t["name"] for t in result["tools"]]


REWRITES = [
    # (id, answer document, expected tool names per message, or None: unchanged)
    ("filtered", answer(1), [ALLOWED]),
    ("string-id", answer("b"), [ALLOWED]),
    # Clients coerce ids ("1" and 1.0 answer request 1): every id is filtered (D422).
    ("other-id-filtered", answer(2), [ALLOWED]),
    ("coerced-id-filtered", answer("1"), [ALLOWED]),
    ("bool-id-filtered", answer(True), [ALLOWED]),
    ("error-answer", {"jsonrpc": "2.0", "id": 1, "error": {"code": 1, "message": "x"}}, None),
    ("batch", [answer(1), answer(2)], [ALLOWED, ALLOWED]),
    ("nameless-tools-dropped", answer(1, [{"title": "x"}, {"name": 7}, *TOOLS]), [ALLOWED]),
    ("tools-not-list", answer(1, {"name": "delete_repo"}), None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("document", "expected"), [c[1:] for c in REWRITES], ids=[c[0] for c in REWRITES]
)
def test_rewrite(document: object, expected: list[list[str]] | None) -> None:
    rewritten = FILTER.rewrite(json.dumps(document))
    if expected is None:
        assert rewritten is None
        return
    assert rewritten is not None
    loaded = json.loads(rewritten)
    assert [names(m) for m in (loaded if isinstance(loaded, list) else [loaded])] == expected


def test_the_filter_follows_the_posted_tools_list_ids() -> None:
    body = judge_post(POLICY, JSON, {}, raw([rpc("tools/list", 5), rpc("ping", 6)])).body
    assert body is not None
    tools = tools_filter((POLICY,), body)
    assert tools is not None and tools.ids == {5}
    every = policy_of({"endpoint": ["/mcp"], "filter_tools_list": True})
    assert tools_filter((every,), body) is None  # no tools list: nothing to hide
    quiet = policy_of({"endpoint": ["/mcp"], "tools": ["a"]})
    assert tools_filter((quiet,), body) is None  # filter_tools_list off


def test_a_json_answer_is_held_to_its_end_then_rewritten() -> None:
    transform = json_transform(FILTER, 10_000)
    whole = raw(answer(1))
    assert transform(whole[:10]) == b"" and transform(whole[10:]) == b""
    assert names(json.loads(transform(b""))) == ALLOWED


@pytest.mark.parametrize("bad", [b"not json", b"\xff\xfe", b"x" * 20_001])
def test_an_unreadable_json_answer_is_never_forwarded(bad: bytes) -> None:
    transform = json_transform(FILTER, 20_000)
    with pytest.raises(Unreadable):
        transform(bad)
        transform(b"")


def event(document: object, extra: bytes = b"event: message\n") -> bytes:
    return extra + b"data: " + raw(document) + b"\n\n"


def test_events_leave_as_they_complete() -> None:
    stream = EventStream(FILTER.rewrite, 10_000)
    progress = event({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"p": 1}})
    assert stream.feed(progress[:7]) == b""
    assert stream.feed(progress[7:]) == progress  # unchanged bytes, at once
    final = event(answer(1), b"id: 9\r\nevent: message\r\n")
    out = stream.feed(final[:-1])
    assert out == b""  # the blank line has not arrived
    out = stream.feed(final[-1:])
    assert out.startswith(b"id: 9\r\nevent: message\r\n") and out.endswith(b"\n\n")
    data = b"".join(line[6:] for line in out.splitlines() if line.startswith(b"data: "))
    assert names(json.loads(data)) == ALLOWED
    assert stream.feed(b"") == b""


@pytest.mark.parametrize("separator", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
def test_line_endings(separator: bytes) -> None:
    text = raw(answer(1))
    whole = b": comment" + separator + b"data:" + text + separator + separator
    stream = EventStream(FILTER.rewrite, 10_000)
    out = b"".join(stream.feed(whole[i : i + 1]) for i in range(len(whole))) + stream.feed(b"")
    data = [line for line in out.splitlines() if line.startswith(b"data")]
    assert names(json.loads(data[0][6:])) == ALLOWED
    assert out.startswith(b": comment")


def test_multiline_data_joins_with_lf() -> None:
    text = json.dumps(answer(1), indent=1).encode()
    whole = b"".join(b"data: " + line + b"\n" for line in text.split(b"\n")) + b"\n"
    out = EventStream(FILTER.rewrite, 10_000).feed(whole)
    joined = b"\n".join(line[6:] for line in out.splitlines() if line.startswith(b"data: "))
    assert names(json.loads(joined)) == ALLOWED


def test_an_unfinished_last_event_is_judged_at_the_end() -> None:
    stream = EventStream(FILTER.rewrite, 10_000)
    assert stream.feed(b"data: " + raw(answer(1))) == b""
    out = stream.feed(b"")
    assert names(json.loads(out.splitlines()[0][6:])) == ALLOWED


def test_an_event_over_the_bound_is_never_forwarded() -> None:
    stream = EventStream(FILTER.rewrite, 100)
    with pytest.raises(Unreadable):
        stream.feed(b"data: " + b"x" * 200)


def test_a_leading_byte_order_mark_is_dropped() -> None:
    stream = EventStream(FILTER.rewrite, 10_000)
    assert stream.feed(b"\xef\xbb") == b""
    out = stream.feed(b"\xbf" + event(answer(1)))
    assert out.startswith(b"event: message\n")
