"""MCP messages judged per message (proxy/mcp/): a table of named POSTs against
one policy, each with the reason it must get (None: admitted), and the refusal body the
official SDK reads. Streams (tools/list filtering, SSE) are in test_mcp_stream.py,
generated input in test_mcp_properties.py, the configuration in test_mcp_config.py."""

from __future__ import annotations

import json

import pytest

from sandbox_egress.proxy.config.loader import parse
from sandbox_egress.proxy.decision import Reason
from sandbox_egress.proxy.mcp import McpPolicy
from sandbox_egress.proxy.mcp.judge import judge_post, refusal_body

JSON = ["application/json"]
MCP_BLOCK = {
    "endpoint": ["/mcp"],
    "tools": [
        {"name": "search_repositories"},
        {
            "name": "create_issue",
            "arguments": {
                "owner": {"equals": "acme"},
                "repo": {"in": ["web", "api"]},
                "title": {"matches": "[^\\n]{1,200}"},
                "meta.labels.first": {"equals": "bug"},
            },
        },
        {"name": "set_limit", "arguments": {"limit": {"in": [10, 20]}, "draft": {"equals": False}}},
    ],
    "filter_tools_list": True,
    "max_body": "4KiB",
}


def policy_of(block: dict[str, object]) -> McpPolicy:
    config = parse(
        {"network": {"allowlist": [{"domain": "mcp.example", "mcp": block}]}}, "env.yaml", {}
    )
    policy = config.allowlist[0].mcp
    assert policy is not None
    return policy


POLICY = policy_of(MCP_BLOCK)


def call(name: str, arguments: object, ident: object = 1) -> dict[str, object]:
    params = {"name": name, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": params}


def rpc(method: str, ident: object = 1, **params: object) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": ident, "method": method, "params": params}


ISSUE = {"owner": "acme", "repo": "web", "title": "Crash", "meta": {"labels": {"first": "bug"}}}
NOTE = {"jsonrpc": "2.0", "method": "notifications/initialized"}
DEEP: object = []
for _ in range(70):
    DEEP = [DEEP]


def raw(document: object) -> bytes:
    return json.dumps(document).encode()


CASES = [
    # (id, content types, body bytes, extra headers, reason)
    ("initialize", JSON, raw(rpc("initialize", protocolVersion="2025-06-18")), {}, None),
    ("notification", JSON, raw(NOTE), {}, None),
    ("tools-list", JSON, raw(rpc("tools/list")), {}, None),
    ("allowed-tool-no-clauses", JSON, raw(call("search_repositories", {"q": "x"})), {}, None),
    ("allowed-tool-clauses-hold", JSON, raw(call("create_issue", ISSUE)), {}, None),
    ("extra-arguments-free", JSON, raw(call("create_issue", {**ISSUE, "body": "x"})), {}, None),
    ("charset-utf8", ["application/json; charset=UTF-8"], raw(rpc("ping")), {}, None),
    ("quoted-charset", ['application/json;charset="utf-8"'], raw(rpc("ping")), {}, None),
    ("string-id", JSON, raw(rpc("ping", "a-1")), {}, None),
    ("client-response", JSON, raw({"jsonrpc": "2.0", "id": 4, "result": {}}), {}, None),
    ("batch-allowed", JSON, raw([rpc("ping", 1), call("search_repositories", {}, 2)]), {}, None),
    ("headers-agree", JSON, raw(call("create_issue", ISSUE)),
     {"mcp-method": ["tools/call"], "mcp-name": ["create_issue"]}, None),
    ("name-header-base64", JSON, raw(call("create_issue", ISSUE)),
     {"mcp-name": ["=?base64?Y3JlYXRlX2lzc3Vl?="]}, None),
    ("numbers-equal", JSON, raw(call("set_limit", {"limit": 10.0, "draft": False})), {}, None),
    # method / tool / argument refusals
    ("method-denied", JSON, raw(rpc("resources/read", uri="file:///etc")), {},
     Reason.MCP_METHOD_DENIED),
    ("method-case", JSON, raw(rpc("Tools/List")), {}, Reason.MCP_METHOD_DENIED),
    ("notification-denied", JSON, raw({"jsonrpc": "2.0", "method": "notifications/x"}), {},
     Reason.MCP_METHOD_DENIED),
    ("tool-denied", JSON, raw(call("delete_repo", {"repo": "web"})), {}, Reason.MCP_TOOL_DENIED),
    ("tool-name-case", JSON, raw(call("Search_Repositories", {})), {}, Reason.MCP_TOOL_DENIED),
    ("argument-missing", JSON, raw(call("create_issue", {**ISSUE, "owner": None} | {})), {},
     Reason.MCP_ARGUMENT_DENIED),
    ("argument-absent", JSON, raw(call("create_issue", {k: v for k, v in ISSUE.items()
     if k != "repo"})), {}, Reason.MCP_ARGUMENT_DENIED),
    ("arguments-absent", JSON, raw(rpc("tools/call", name="create_issue")), {},
     Reason.MCP_ARGUMENT_DENIED),
    ("equals-wrong", JSON, raw(call("create_issue", {**ISSUE, "owner": "evil"})), {},
     Reason.MCP_ARGUMENT_DENIED),
    ("in-wrong", JSON, raw(call("create_issue", {**ISSUE, "repo": "secrets"})), {},
     Reason.MCP_ARGUMENT_DENIED),
    ("matches-is-full", JSON, raw(call("create_issue", {**ISSUE, "title": "a\nb"})), {},
     Reason.MCP_ARGUMENT_DENIED),
    ("matches-not-string", JSON, raw(call("create_issue", {**ISSUE, "title": 7})), {},
     Reason.MCP_ARGUMENT_DENIED),
    ("matches-too-long", JSON, raw(call("create_issue", {**ISSUE, "title": "x" * 201})), {},
     Reason.MCP_ARGUMENT_DENIED),
    ("equals-type-strict", JSON, raw(call("create_issue", {**ISSUE, "owner": ["acme"]})), {},
     Reason.MCP_ARGUMENT_DENIED),
    ("bool-is-not-number", JSON, raw(call("set_limit", {"limit": 10, "draft": 0})), {},
     Reason.MCP_ARGUMENT_DENIED),
    ("in-bool-not-int", JSON, raw(call("set_limit", {"limit": True, "draft": False})), {},
     Reason.MCP_ARGUMENT_DENIED),
    ("dotted-missing", JSON, raw(call("create_issue", {**ISSUE, "meta": {"labels": []}})), {},
     Reason.MCP_ARGUMENT_DENIED),
    ("dotted-wrong", JSON, raw(call("create_issue", {**ISSUE, "meta": {"labels": {"first": "x"}}})),
     {}, Reason.MCP_ARGUMENT_DENIED),
    ("lone-surrogate", JSON, b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":'
     b'"create_issue","arguments":{"owner":"acme","repo":"web","title":"\\ud800",'
     b'"meta":{"labels":{"first":"bug"}}}}}', {}, Reason.MCP_ARGUMENT_DENIED),
    ("batch-refused-whole", JSON, raw([rpc("ping", 1), call("delete_repo", {}, 2)]), {},
     Reason.MCP_TOOL_DENIED),
    ("batch-first-refusal-named", JSON, raw([call("create_issue", {}, 1), rpc("x", 2)]), {},
     Reason.MCP_ARGUMENT_DENIED),
    # strict parsing
    ("text-plain", ["text/plain"], raw(rpc("ping")), {}, Reason.MCP_BAD_REQUEST),
    ("no-content-type", [], raw(rpc("ping")), {}, Reason.MCP_BAD_REQUEST),
    ("two-content-types", JSON * 2, raw(rpc("ping")), {}, Reason.MCP_BAD_REQUEST),
    ("other-charset", ["application/json; charset=latin-1"], raw(rpc("ping")), {},
     Reason.MCP_BAD_REQUEST),
    ("other-parameter", ["application/json; x=1"], raw(rpc("ping")), {}, Reason.MCP_BAD_REQUEST),
    ("json-suffix", ["application/json-seq"], raw(rpc("ping")), {}, Reason.MCP_BAD_REQUEST),
    ("oversize", JSON, raw(call("search_repositories", {"q": "x" * 5000})), {},
     Reason.MCP_BAD_REQUEST),
    ("duplicate-top-key", JSON, b'{"jsonrpc":"2.0","id":1,"method":"ping","method":"x"}', {},
     Reason.MCP_BAD_REQUEST),
    ("duplicate-nested-key", JSON, b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":'
     b'{"name":"search_repositories","arguments":{"q":{"a":1,"a":2}}}}', {},
     Reason.MCP_BAD_REQUEST),
    ("duplicate-tool-name", JSON, b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":'
     b'{"name":"search_repositories","name":"delete_repo"}}', {}, Reason.MCP_BAD_REQUEST),
    ("bad-utf8", JSON, b'{"jsonrpc":"2.0","id":1,"method":"ping\xff"}', {},
     Reason.MCP_BAD_REQUEST),
    ("bom", JSON, b"\xef\xbb\xbf" + raw(rpc("ping")), {}, Reason.MCP_BAD_REQUEST),
    ("nan", JSON, b'{"jsonrpc":"2.0","id":NaN,"method":"ping"}', {}, Reason.MCP_BAD_REQUEST),
    ("not-json", JSON, b"ping", {}, Reason.MCP_BAD_REQUEST),
    ("two-documents", JSON, raw(rpc("ping")) * 2, {}, Reason.MCP_BAD_REQUEST),
    ("empty-body", JSON, b"", {}, Reason.MCP_BAD_REQUEST),
    ("empty-batch", JSON, b"[]", {}, Reason.MCP_BAD_REQUEST),
    ("not-jsonrpc-2", JSON, raw({"jsonrpc": "1.0", "id": 1, "method": "ping"}), {},
     Reason.MCP_BAD_REQUEST),
    ("method-not-string", JSON, raw({"jsonrpc": "2.0", "id": 1, "method": 7}), {},
     Reason.MCP_BAD_REQUEST),
    ("params-array", JSON, raw({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": []}), {},
     Reason.MCP_BAD_REQUEST),
    ("id-float", JSON, raw({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}), {},
     Reason.MCP_BAD_REQUEST),
    ("id-bool", JSON, raw({"jsonrpc": "2.0", "id": True, "method": "ping"}), {},
     Reason.MCP_BAD_REQUEST),
    ("batch-with-scalar", JSON, raw([rpc("ping"), 3]), {}, Reason.MCP_BAD_REQUEST),
    ("nested-batch", JSON, raw([[rpc("ping")]]), {}, Reason.MCP_BAD_REQUEST),
    ("result-and-error", JSON, raw({"jsonrpc": "2.0", "id": 1, "result": {}, "error": {}}), {},
     Reason.MCP_BAD_REQUEST),
    ("tool-name-not-string", JSON, raw(rpc("tools/call", name=["delete_repo"])), {},
     Reason.MCP_BAD_REQUEST),
    ("arguments-not-object", JSON, raw(call("search_repositories", ["x"])), {},
     Reason.MCP_BAD_REQUEST),
    ("too-deep", JSON, raw(call("search_repositories", {"q": DEEP})), {}, Reason.MCP_BAD_REQUEST),
    # mirrored headers
    ("method-header-lies", JSON, raw(call("delete_repo", {})), {"mcp-method": ["ping"]},
     Reason.MCP_BAD_REQUEST),
    ("name-header-lies", JSON, raw(call("create_issue", ISSUE)),
     {"mcp-name": ["search_repositories"]}, Reason.MCP_BAD_REQUEST),
    ("name-header-without-name", JSON, raw(rpc("ping")), {"mcp-name": ["ping"]},
     Reason.MCP_BAD_REQUEST),
    ("method-header-twice", JSON, raw(rpc("ping")), {"mcp-method": ["ping", "ping"]},
     Reason.MCP_BAD_REQUEST),
    ("header-cannot-admit", JSON, raw(call("delete_repo", {})),
     {"mcp-method": ["tools/call"], "mcp-name": ["delete_repo"]}, Reason.MCP_TOOL_DENIED),
    ("batch-method-header", JSON, raw([rpc("ping", 1), rpc("tools/list", 2)]),
     {"mcp-method": ["ping"]}, Reason.MCP_BAD_REQUEST),
    ("bad-base64-name", JSON, raw(call("create_issue", ISSUE)), {"mcp-name": ["=?base64?!!?="]},
     Reason.MCP_BAD_REQUEST),
]  # fmt: skip


@pytest.mark.parametrize(
    ("content_type", "body", "headers", "reason"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_judge(
    content_type: list[str], body: bytes, headers: dict[str, list[str]], reason: Reason | None
) -> None:
    verdict = judge_post(POLICY, content_type, headers, body)
    assert verdict.reason is reason, verdict.detail


def test_the_default_methods_exclude_resources_and_prompts() -> None:
    everything = policy_of({"endpoint": ["/mcp"]})
    assert everything.tools is None
    assert judge_post(everything, JSON, {}, raw(call("delete_repo", {}))).allowed
    refused = judge_post(everything, JSON, {}, raw(rpc("prompts/get", name="x")))
    assert refused.reason is Reason.MCP_METHOD_DENIED


def test_the_audit_names_are_names_never_values() -> None:
    verdict = judge_post(POLICY, JSON, {}, raw(call("create_issue", {**ISSUE, "owner": "evil"})))
    assert (verdict.methods, verdict.tools) == (("tools/call",), ("create_issue",))
    assert verdict.arguments == ("owner", "repo", "title", "meta")
    assert "evil" not in verdict.detail and "owner" in verdict.detail


def test_a_refusal_is_a_jsonrpc_error_with_the_request_id() -> None:
    verdict = judge_post(POLICY, JSON, {}, raw(call("delete_repo", {}, "req-7")))
    assert verdict.reason is not None
    answer = json.loads(refusal_body(verdict.reason, verdict.detail, verdict.body))
    assert answer["id"] == "req-7" and answer["jsonrpc"] == "2.0"
    assert answer["error"]["code"] == -31403
    assert answer["error"]["message"].startswith("egress_denied: mcp_tool_denied: ")
    assert answer["error"]["data"]["reason"] == "mcp_tool_denied"


def test_a_refused_batch_answers_every_request_of_it() -> None:
    batch = [rpc("ping", 1), NOTE, call("delete_repo", {}, "two")]
    verdict = judge_post(POLICY, JSON, {}, raw(batch))
    assert verdict.reason is Reason.MCP_TOOL_DENIED
    answer = json.loads(refusal_body(verdict.reason, verdict.detail, verdict.body))
    assert [a["id"] for a in answer] == [1, "two"]
    assert {a["error"]["data"]["reason"] for a in answer} == {"mcp_tool_denied"}


def test_an_unreadable_body_is_refused_with_a_null_id() -> None:
    verdict = judge_post(POLICY, ["text/plain"], {}, raw(rpc("ping", 9)))
    assert verdict.reason is Reason.MCP_BAD_REQUEST
    answer = json.loads(refusal_body(verdict.reason, verdict.detail, verdict.body))
    assert answer["id"] is None and answer["error"]["code"] == -31403
