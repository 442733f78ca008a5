"""The three scenarios of the source pages, run for real on a `Stage`.

1. Security gate: `rm -rf` through code_execution is denied, the agent sees the
   reason, a harmless command then runs.
2. Privacy gate with recovery: reading private/ is denied, the follow-up read of
   public/summary.json succeeds.
3. Audit logging: post_tool_execution HTTP hooks on read_file|write_file reach the
   telemetry upstream through the transparent proxy, which writes Authorization
   from its own environment; hooks aimed at a name the proxy resolves to loopback
   and at a host not allowlisted are refused by the proxy, and the tool still runs.
4. An MCP server's budget (issue 48): the agent's MCP tool calls to mcp.example.test are
   judged one by one (a tool the entry does not name is refused with a JSON-RPC error,
   nothing upstream) and the entry's budget of 3 calls an hour is spent, then refused
   (429 `budget_exceeded`), all in the audit.

Each scenario narrates what happens through `say` (the demo prints it, the tests
collect it) and returns what it observed, for the tests to assert on. The secret
is never narrated: it is replaced by a placeholder wherever it would appear.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.stage import LOOPBACK_HOOK, MCP_HOST, NOT_ALLOWED, TELEMETRY, Stage

Say = Callable[[str], None]

# The gate scripts of the source pages, as they are there.
SECURITY_GATE = """\
#!/usr/bin/env python3
import sys, json
data = json.load(sys.stdin)
cmd = str(data.get("tool_call", {}).get("args", {}))
if "rm -rf" in cmd:
    print(json.dumps({"decision": "deny", "reason": "Destructive command blocked by security gate."}))
else:
    print(json.dumps({"decision": "allow"}))
"""

PRIVACY_GATE = """\
#!/usr/bin/env python3
import sys, json
data = json.load(sys.stdin)
path = str(data.get("tool_call", {}).get("args", {}).get("path", ""))
if "/private/" in path:
    resp = {"decision": "deny", "reason": "Access to confidential `/private/` records is blocked by PII compliance policy. Query approved `/public/` summary tables instead."}
else:
    resp = {"decision": "allow"}
print(json.dumps(resp))
"""


GATE_COMMAND = "@PYTHON@ @OPERATOR@/gate.py"


@dataclass
class Call:
    tool: str
    args: dict[str, Any]
    result: dict[str, Any]
    log: list[str] = field(default_factory=list)  # the runner's stderr lines


@dataclass
class Observed:
    workspace: Path
    calls: list[Call]
    upstream: list[dict[str, Any]] = field(default_factory=list)
    audit: list[dict[str, Any]] = field(default_factory=list)
    traps: list[dict[str, Any]] = field(default_factory=list)
    answers: list[list[Any]] = field(default_factory=list)  # scenario 4: the MCP calls


def _prepare(
    stage: Stage, name: str, hooks: dict[str, Any], scripts: dict[str, str]
) -> tuple[Path, Path]:
    """An operator hooks.json (mounted read-only in a real sandbox) and an empty workspace."""
    root = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=stage.base))
    operator, workspace = root / "operator", root / "workspace"
    operator.mkdir(parents=True)
    workspace.mkdir(parents=True)
    for script, text in scripts.items():
        (operator / script).write_text(text)
    text = (
        json.dumps(hooks, indent=2)
        .replace("@OPERATOR@", str(operator))
        .replace("@PYTHON@", sys.executable)
    )
    (operator / "hooks.json").write_text(text)
    return operator / "hooks.json", workspace


def _call(
    stage: Stage, say: Say, hooks: Path, workspace: Path, tool: str, args: dict[str, Any]
) -> Call:
    say(f"agent ▶ {tool} {json.dumps(args)}")
    argv = [
        "exec",
        tool,
        "--workspace",
        str(workspace),
        "--system-config",
        str(hooks),
        "--environment-id",
        "env_demo",
    ]
    result, stderr = stage.hookrunner(argv, args, workspace)
    log = [line for line in stderr.splitlines() if line.strip()]
    for line in log:
        say(f"   hook  {_mask(stage, line)}")
    shown = {k: v for k, v in result.items() if k != "output"}
    output = str(result.get("output", ""))
    say(f"   result {json.dumps(shown)} output={output.strip()[:120]!r}")
    return Call(tool, args, result, log)


def _mask(stage: Stage, text: str) -> str:
    return text.replace(
        stage.token, f"<{len(stage.token)}-character token from the proxy's environment>"
    )


@dataclass
class Gate:
    """A pre_tool_execution command gate (a source page's script) in a fresh workspace."""

    stage: Stage
    say: Say
    hooks_file: Path
    workspace: Path

    @classmethod
    def install(cls, stage: Stage, say: Say, group: str, matcher: str, script: str) -> Gate:
        hooks = {
            group: {
                "pre_tool_execution": [
                    {"matcher": matcher,
                     "hooks": [{"type": "command", "command": GATE_COMMAND, "timeout": 10}]}
                ]
            }
        }  # fmt: skip
        hooks_file, workspace = _prepare(stage, group, hooks, {"gate.py": script})
        return cls(stage, say, hooks_file, workspace)

    def call(self, tool: str, args: dict[str, Any]) -> Call:
        return _call(self.stage, self.say, self.hooks_file, self.workspace, tool, args)


def security_gate(stage: Stage, say: Say) -> Observed:
    say("== Scenario 1: the security gate ==")
    gate = Gate.install(stage, say, "security-gate", "code_execution", SECURITY_GATE)
    (gate.workspace / "victim").mkdir()
    calls = [
        gate.call("code_execution", {"code": "rm -rf victim", "language": "bash"}),
        gate.call("code_execution", {"code": "echo harmless; ls", "language": "bash"}),
    ]
    return Observed(gate.workspace, calls)


def privacy_gate(stage: Stage, say: Say) -> Observed:
    say("== Scenario 2: the privacy gate, and the agent's recovery ==")
    gate = Gate.install(stage, say, "privacy-gate", "read_file", PRIVACY_GATE)
    private, public = gate.workspace / "private", gate.workspace / "public"
    private.mkdir()
    (private / "customers.json").write_text('{"ssn": "000-00-0000"}')
    public.mkdir()
    (public / "summary.json").write_text('{"customers": 42}')
    calls = [
        gate.call("read_file", {"path": str(private / "customers.json")}),
        gate.call("read_file", {"path": str(public / "summary.json")}),
    ]
    return Observed(gate.workspace, calls)


def audit_logging(stage: Stage, say: Say) -> Observed:
    say("== Scenario 3: audit logging through the transparent egress proxy ==")
    say(f"   hooks.json names https://{TELEMETRY}/… without any credential;")
    say("   the proxy writes Authorization from its own environment.")
    endpoints = [
        f"https://{TELEMETRY}/api/v1/agent-events",
        f"https://{LOOPBACK_HOOK}/api/v1/agent-events",
        f"https://{NOT_ALLOWED}/collect",
    ]
    hooks = {
        "audit-logging": {
            "post_tool_execution": [
                {"matcher": "read_file|write_file",
                 "hooks": [{"type": "http", "url": url, "timeout": 10} for url in endpoints]}
            ]
        }
    }  # fmt: skip
    hooks_file, workspace = _prepare(stage, "audit-logging", hooks, {})
    marks = stage.upstream_log.mark(), stage.audit_log.mark(), stage.trap_log.mark()
    calls = [
        _call(
            stage,
            say,
            hooks_file,
            workspace,
            "write_file",
            {"path": "audit.log", "content": "event 1"},
        ),
        _call(stage, say, hooks_file, workspace, "read_file", {"path": "audit.log"}),
    ]
    observed = Observed(
        workspace,
        calls,
        upstream=[r for r in stage.upstream_log.since(marks[0]) if r.get("event") == "request"],
        audit=stage.audit_log.wait_count(marks[1], len(calls) * len(endpoints)),
        traps=stage.trap_log.since(marks[2]),
    )
    for record in observed.upstream:
        headers = {name: _mask(stage, value) for name, value in record["headers"]}
        authorization = headers.get("Authorization")
        say(f"   upstream received {record['method']} {record['target']} {authorization=}")
    for line in observed.audit:
        verdict = f"{line['decision']} {line['reason']} injected={line['injected']}"
        say(f"   proxy audit {line['method']} {line['host']} {verdict}")
    say(f"   loopback trap connections: {len(observed.traps)}")
    return observed


# The agent's MCP calls, from inside the sandbox: one JSON-RPC POST each, through the
# transparent proxy; prints [HTTP status, X-Egress-Denied, the JSON-RPC error's message].
MCP_CALLS = """
import json, urllib.error, urllib.request
out = []
for n, tool in enumerate(TOOLS):
    body = {"jsonrpc": "2.0", "id": n, "method": "tools/call",
            "params": {"name": tool, "arguments": {"query": "egress"}}}
    request = urllib.request.Request(URL, data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            out.append([answer.status, None, None])
    except urllib.error.HTTPError as e:
        text = e.read().decode("utf-8", "replace")
        try:
            error = json.loads(text).get("error")
        except ValueError:
            error = text[:120]
        # A JSON-RPC error (an MCP refusal) carries a message; the proxy's JSON a code.
        message = error.get("message") if isinstance(error, dict) else error
        out.append([e.code, e.headers.get("X-Egress-Denied"), message])
print(json.dumps(out))
"""
MCP_TOOLS = ["search_repositories", "delete_repository", "search_repositories",
             "search_repositories", "search_repositories"]  # fmt: skip


def mcp_budget(stage: Stage, say: Say) -> Observed:
    say("== Scenario 4: MCP tool calls judged one by one, and a budget spent ==")
    say(f"   the entry for {MCP_HOST} names one tool (search_repositories) and a budget")
    say("   of 3 requests an hour; the proxy writes the server's token, not the agent.")
    marks = stage.upstream_log.mark(), stage.audit_log.mark()
    script = MCP_CALLS.replace("TOOLS", repr(MCP_TOOLS)).replace(
        "URL", repr(f"https://{MCP_HOST}/mcp")
    )
    answers = json.loads(stage.in_sandbox(script))
    for tool, (status, denied, message) in zip(MCP_TOOLS, answers, strict=True):
        verdict = "reached the server" if denied is None else f"refused: {denied} ({message})"
        say(f"agent ▶ MCP tools/call {tool} -> {status} {verdict}")
    observed = Observed(
        Path(stage.base),
        [],
        upstream=[r for r in stage.upstream_log.since(marks[0]) if r.get("event") == "request"],
        audit=stage.audit_log.wait_count(marks[1], len(MCP_TOOLS) * 2),
    )
    observed.answers = answers
    for line in observed.audit:
        if line["method"] == "POST":
            say(f"   proxy audit POST {line['host']} {line['decision']} {line['reason']}")
    say(f"   the MCP server received {len(observed.upstream)} of {len(MCP_TOOLS)} calls")
    return observed


SCENARIOS = (security_gate, privacy_gate, audit_logging, mcp_budget)
