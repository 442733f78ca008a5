"""Issue 20, item 1: input a gate can read.

The finding: an extra argument nested 1,000-1,400 levels deep crashed the
documented example gate (``python3``, ``json.load``: ``RecursionError``),
exit 1 failed open and the denied code ran — through ``run``, ``exec``,
``session``, ``fire`` and the Python API alike. Every entry point is driven
here with the real CLI or API, the real example gate and, for the tools, a
marker file the denied code would have written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from demo.scenarios import SECURITY_GATE as EXAMPLE_GATE  # the documented gate, as it is
from sandbox_egress.hookrunner.enforce import bounds
from tests.hookrunner.helpers import Env, command, pre_group, rule
from tests.hookrunner.test_cli import cli

DEEP = 1_200  # inside the finding's 1,000-1,400: json.load in a default python3 dies here
HANG_LIMIT = 60.0


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"n": value}
    return value


def marker_in(tmp_path: Path) -> Path:
    """Where the denied code would leave a mark: writable by the tool user (nobody) too."""
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o1777)
    shared.chmod(0o1777)
    return shared / "denied-code-ran"


def destructive(marker: Path, depth: int = DEEP) -> dict[str, Any]:
    """A call the gate denies, with an extra argument nested ``depth`` levels deep."""
    return {"code": f"rm -rf /nothing; touch {marker}", "language": "bash", "x": nested(depth)}


def gated(env: Env) -> None:
    # ``python3`` as the documented hooks.json spells it: the host's, not the test's.
    gate = "python3 " + env.script("gate.py", EXAMPLE_GATE).split(" ", 1)[1]
    env.hooks({"security-gate": pre_group(rule("code_execution", command(gate)))}, system=True)


TOO_DEEP = f"the payload is nested deeper than {bounds.MAX_DEPTH} levels"


# The pure bound: depth and size, measured without recursion.


@pytest.mark.parametrize(
    ("value", "refused"),
    [
        ("scalar", False),
        ({}, False),
        (nested(bounds.MAX_DEPTH - 1), False),  # 63 objects
        ({"tool_call": {"args": nested(bounds.MAX_DEPTH - 2)}}, False),  # 64 levels in all
        ({"tool_call": {"args": nested(bounds.MAX_DEPTH - 1)}}, True),  # 65
        ([[[]]] * 3, False),
        ([nested(bounds.MAX_DEPTH)], True),
        (nested(100_000), True),
        ({"a": "x" * (bounds.MAX_BYTES - 20)}, False),
        ({"a": "x" * bounds.MAX_BYTES}, True),
        ({"a": "é" * (bounds.MAX_BYTES // 2)}, True),  # counted as UTF-8 bytes
    ],
    ids=[
        "scalar",
        "empty",
        "63",
        "64-with-envelope",
        "65-with-envelope",
        "arrays",
        "array-of-deep",
        "100000",
        "just-under-size",
        "over-size",
        "over-size-utf8",
    ],
)
def test_refusal_of_depth_and_size(value: Any, refused: bool) -> None:
    assert (bounds.refusal(value) is not None) is refused


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ({"x": float("nan")}, bounds.NOT_JSON_NUMBER),
        ({"x": [float("inf")]}, bounds.NOT_JSON_NUMBER),
        ({"x": "\ud800"}, bounds.LONE_SURROGATE),
        ({"\udfff": 1}, bounds.LONE_SURROGATE),
        ({"x": "\U0001f600 \u202e \x00"}, None),
        ({"x": object()}, None),  # not JSON at all: the caller's own check says so
    ],
    ids=["nan", "infinity", "surrogate-value", "surrogate-key", "odd-but-valid", "not-json"],
)
def test_refusal_of_what_some_parsers_cannot_read(value: Any, reason: str | None) -> None:
    assert bounds.refusal(value) == reason


def test_refusal_reasons_name_the_bound() -> None:
    assert bounds.refusal(nested(65)) == TOO_DEEP
    assert bounds.refusal({"a": "x" * bounds.MAX_BYTES}) == (
        f"the payload is larger than {bounds.MAX_BYTES // 1024 // 1024} MiB as JSON"
    )


@pytest.mark.parametrize(
    "text",
    [b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 3_000 + b"1" + b"}" * 3_000],
    ids=["arrays-100000", "objects-3000"],
)
def test_parse_refuses_what_the_parser_cannot_nest(text: bytes) -> None:
    with pytest.raises(bounds.PayloadRefused, match=TOO_DEEP):
        bounds.parse(text)


def test_parse_refuses_oversized_text_before_parsing() -> None:
    with pytest.raises(bounds.PayloadRefused, match="larger than"):
        bounds.parse(b" " * (bounds.MAX_BYTES + 1) + b"{}")


# Every entry point of the hooks.json dialect.


def test_run_denies_a_payload_the_gate_cannot_read(env: Env, tmp_path: Path) -> None:
    gated(env)
    payload = {"tool_call": {"name": "code_execution", "args": destructive(tmp_path / "m")}}
    done = cli(env, "run", "pre_tool_execution", stdin=json.dumps(payload))
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout) == {"decision": "deny", "reason": TOO_DEEP, "group": ""}
    assert "kind=input_refused" in done.stderr
    assert "outcome=" not in done.stderr  # no hook ran


def test_run_denies_a_payload_python_cannot_parse(env: Env) -> None:
    gated(env)
    text = '{"tool_call": {"name": "code_execution", "args": {"x": ' + "[" * 5000
    text += "]" * 5000 + "}}}"
    done = cli(env, "run", "pre_tool_execution", stdin=text)
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["reason"] == TOO_DEEP


def test_run_post_skips_the_hooks(env: Env, tmp_path: Path) -> None:
    seen = tmp_path / "post-ran"
    env.hooks({"g": {"post_tool_execution": [rule("", command(f"touch {seen}"))]}}, system=True)
    payload = {"tool_call": {"name": "code_execution", "args": destructive(tmp_path / "m")}}
    done = cli(env, "run", "post_tool_execution", stdin=json.dumps(payload))
    assert (done.returncode, json.loads(done.stdout)) == (0, {"decision": "allow"})
    assert not seen.exists()
    assert "kind=input_refused" in done.stderr


def test_exec_reports_error_and_never_runs_the_tool(env: Env, tmp_path: Path) -> None:
    gated(env)
    marker = marker_in(tmp_path)
    done = cli(env, "exec", "code_execution", stdin=json.dumps(destructive(marker)))
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout) == {"status": "error", "output": "", "error": TOO_DEEP}
    assert not marker.exists()


def test_exec_of_unparseable_depth_reports_error(env: Env, tmp_path: Path) -> None:
    gated(env)
    done = cli(env, "exec", "read_file", stdin='{"path": ' + "[" * 5000 + "]" * 5000 + "}")
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["status"] == "error"


def test_session_refuses_each_request(env: Env, tmp_path: Path) -> None:
    gated(env)
    marker = marker_in(tmp_path)
    args = destructive(marker)
    lines = [
        {"exec": "code_execution", "args": args},
        {"event": "pre_tool_execution", "tool_call": {"name": "code_execution", "args": args}},
        {"exec": "list_files", "args": {"path": "."}},
    ]
    text = "".join(json.dumps(x) + "\n" for x in lines)
    text += '{"exec": "code_execution", "args": ' + "[" * 5000 + "]" * 5000 + "}\n"
    done = cli(env, "session", stdin=text)
    assert done.returncode == 0, done.stderr
    answers = [json.loads(x) for x in done.stdout.splitlines()]
    assert answers[0] == {"status": "error", "output": "", "error": TOO_DEEP}
    assert answers[1] == {"decision": "deny", "reason": TOO_DEEP, "group": ""}
    assert answers[2]["status"] == "ok"
    assert answers[3] == {
        "status": "error",
        "output": "",
        "error": TOO_DEEP,
        "decision": "deny",
        "reason": TOO_DEEP,
    }
    assert not marker.exists()


def test_python_api_denies_and_never_runs_the_tool(env: Env, tmp_path: Path) -> None:
    gated(env)
    marker = marker_in(tmp_path)
    session = env.session()
    decision = session.pre("code_execution", destructive(marker))
    assert (decision.allowed, decision.reason) == (False, TOO_DEEP)
    result = session.exec_tool("code_execution", destructive(marker, 100_000))
    assert (result.status, result.error) == ("error", TOO_DEEP)
    assert session.post("code_execution", destructive(marker)) == ()
    assert not marker.exists()
    assert env.runs("pre_tool_execution", "command", "exit_nonzero") == 0
    kinds = [w["kind"] for w in env.warnings()]
    assert kinds == ["input_refused"] * 3


def test_a_large_file_within_the_cap_still_reaches_the_gate_and_the_tool(env: Env) -> None:
    gated(env)
    content = "x" * (5 * 1024 * 1024)  # file contents travel in arguments
    session = env.session(tool_user="root")  # no chown to another tool user: no capability
    result = session.exec_tool("write_file", {"path": "big.txt", "content": content})
    assert result.status == "ok", result
    assert (env.workspace / "big.txt").stat().st_size == len(content)


def test_the_gate_still_denies_a_payload_within_the_bound(env: Env, tmp_path: Path) -> None:
    gated(env)
    args = destructive(tmp_path / "m", depth=bounds.MAX_DEPTH - 3)  # 64 with the envelope
    decision = env.session().pre("code_execution", args)
    assert decision.reason == "Destructive command blocked by security gate."
