"""The event filter against the Python SDK client's own event-stream parser (httpx2's
`_SSEParser`): whatever the line endings, comments, fields, multi-line data and chunk
splits (at any byte), the events the client parses out of the filtered stream list no
refused tool, and every tools list still arrives (the filter drops nothing else).
"""

from __future__ import annotations

import codecs
import json

from httpx2._sse import _SSEParser
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox_egress.proxy.mcp.sse import EventStream
from sandbox_egress.proxy.mcp.tools_list import ToolsFilter, Unreadable
from tests.proxy.test_mcp import POLICY

FILTER = ToolsFilter((POLICY,), None)
ENDS = st.sampled_from([b"\n", b"\r", b"\r\n"])
NOISE = st.sampled_from([b"event: message", b": comment", b"id: 7", b"retry: 10", b":", b"x"])


@st.composite
def streams(draw: st.DrawFn) -> tuple[bytes, int]:
    """(an event stream, how many tools lists it carries)."""
    out, lists = bytearray(), 0
    for ident in range(draw(st.integers(1, 4))):
        tools = [{"name": n} for n in draw(st.permutations(["delete_repo", "search_repositories"]))]
        answer = {"jsonrpc": "2.0", "id": ident, "result": {"tools": tools}}
        text = json.dumps(answer, indent=draw(st.sampled_from([None, 1])))
        lines = [
            b"data:" + draw(st.sampled_from([b" ", b""])) + t.encode() for t in text.split("\n")
        ]
        for _ in range(draw(st.integers(0, 2))):
            lines.insert(draw(st.integers(0, len(lines))), draw(NOISE))
        for line in lines:
            out += line + draw(ENDS)
        blank = draw(ENDS)
        out += b"\r\n" if out.endswith(b"\r") and blank == b"\n" else blank  # not one CRLF
        lists += 1
    return bytes(out), lists


def client_lists(stream: bytes) -> list[list[str]]:
    parser, decoder = _SSEParser(), codecs.getincrementaldecoder("utf-8")(errors="replace")
    events = list(parser.decode(decoder.decode(stream, final=True))) + list(parser.flush())
    found = []
    for event in events:
        message = json.loads(event.data)
        tools = message.get("result", {}).get("tools") if isinstance(message, dict) else None
        if isinstance(tools, list):
            found.append([t["name"] for t in tools])
    return found


@settings(max_examples=300, deadline=None)
@given(streams(), st.lists(st.integers(0, 4096), max_size=12))
def test_the_client_parses_no_refused_tool_out_of_the_filtered_stream(
    generated: tuple[bytes, int], cuts: list[int]
) -> None:
    raw, lists = generated
    points = sorted({c % (len(raw) + 1) for c in cuts})
    pieces = [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)], strict=True)]
    stream, out = EventStream(FILTER.rewrite, 1 << 20), bytearray()
    try:
        for piece in pieces:
            if piece:
                out += stream.feed(piece)
        out += stream.feed(b"")
    except Unreadable:
        raise AssertionError("a well-formed stream was not readable") from None
    assert client_lists(bytes(out)) == [["search_repositories"]] * lists
