"""An independent attack on the MCP gate's `filter_tools_list` (pure core): answers an
MCP client reads as its tools list while the filter read them as something else.

* ids the clients coerce: the TypeScript SDK matches a response by `Number(id)`, the
  Python SDK by `coerce_request_id`, so `"2"`, `2.0`, `"2.0"` or `" 2"` answer request 2;
  a JSON answer held for a POST's `tools/list` is filtered by shape, whatever its id (D422);
* duplicate keys: parsers disagree on which copy wins (a Go struct merges the copies), so
  an answer with a key twice is never forwarded (D423);
* labels: an answer is read as JSON only under one `Content-Type: application/json`, as
  events otherwise, refused when named both ways or in a charset other than UTF-8
  (D420, D421; end to end in tests/e2e/test_mcp_attack_e2e.py).
"""

from __future__ import annotations

import json

import pytest

from sandbox_egress.proxy.mcp.sse import EventStream
from sandbox_egress.proxy.mcp.tools_list import (
    AMBIGUOUS_LABEL,
    JSON_LABEL,
    OTHER_LABEL,
    SSE_LABEL,
    ToolsFilter,
    Unreadable,
    answer_label,
    json_transform,
)
from tests.proxy.test_mcp import POLICY

FILTER = ToolsFilter((POLICY,), frozenset({2}))
LISTED = '[{"name":"search_repositories"},{"name":"delete_repo"}]'


@pytest.mark.parametrize("ident", ['"2"', "2.0", '"2.0"', '" 2"', '"0x2"', "2e0", "true", "null"])
def test_an_answer_to_the_tools_list_by_a_coerced_id_is_filtered(ident: str) -> None:
    body = f'{{"jsonrpc":"2.0","id":{ident},"result":{{"tools":{LISTED}}}}}'.encode()
    transform = json_transform(FILTER, 1 << 20)
    out = transform(body) + transform(b"")
    assert json.loads(out)["result"]["tools"] == [{"name": "search_repositories"}]


DUPLICATES = [
    '{"jsonrpc":"2.0","id":2,"result":{"tools":LISTED},"result":{"x":1}}',
    '{"jsonrpc":"2.0","id":2,"result":{"tools":LISTED,"tools":[]}}',
    '{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"delete_repo","name":"search_repositories"}]}}',
    '{"jsonrpc":"2.0","id":2,"id":3,"result":{"tools":LISTED}}',
]


@pytest.mark.parametrize("text", [d.replace("LISTED", LISTED) for d in DUPLICATES])
def test_an_answer_with_a_key_twice_is_never_forwarded(text: str) -> None:
    transform = json_transform(FILTER, 1 << 20)
    with pytest.raises(Unreadable):
        transform(text.encode()) + transform(b"")
    stream = EventStream(ToolsFilter((POLICY,), None).rewrite, 1 << 20)
    with pytest.raises(Unreadable):
        stream.feed(b"data: " + text.encode() + b"\n\n")


LABELS = [
    # (Content-Type fields, how a client may read the answer)
    (["application/json"], JSON_LABEL),
    (["Application/JSON; charset=UTF-8"], JSON_LABEL),
    (["text/event-stream"], SSE_LABEL),
    (['text/event-stream;charset="utf-8"'], SSE_LABEL),
    (["text/event-stream", "text/event-stream"], OTHER_LABEL),  # read as events
    ([], OTHER_LABEL),
    (["text/plain"], OTHER_LABEL),
    (["text/event-stream, application/json"], AMBIGUOUS_LABEL),  # JSON to one, events to another
    (["application/json", "application/json"], AMBIGUOUS_LABEL),
    (["application/json", "text/event-stream"], AMBIGUOUS_LABEL),
    (["text/event-stream; charset=utf-16"], AMBIGUOUS_LABEL),  # httpx decodes by it
    (["application/json; charset=utf-16"], AMBIGUOUS_LABEL),
    (["text/event-stream; CHARSET = cp500"], AMBIGUOUS_LABEL),
    (["text/event-stream; charset*=utf-8''utf-16"], AMBIGUOUS_LABEL),
    (["text/event-stream; charset=utf-8; charset=utf-7"], AMBIGUOUS_LABEL),
]


@pytest.mark.parametrize(("fields", "label"), LABELS)
def test_an_answer_is_json_only_when_labelled_json_alone(fields: list[str], label: str) -> None:
    assert answer_label(fields) == label
