"""Issue 20, item 4: hostile input never turns a gate's deny into an allow.

Generated payloads — deep nesting, large strings, any unicode (lone
surrogates, NUL, BOM-like and right-to-left characters), duplicate keys, NaN
and Infinity, numbers beyond a double — are sent as JSON text through the
path ``hookrunner run`` and ``session`` take (``bounds.parse``, then
``parse_event_payload``, then the session's decision) to the documented
example gate written three times: Python (``json.load``), jq and Node
(``JSON.parse``). Each gate denies a call whose arguments contain ``rm -rf``.
The property: whenever the arguments as the runner read them (what the tool
would run) contain ``rm -rf``, the decision is a deny — the gate's, or the
runner's refusal of input a gate could not read. Real child processes; the
examples are derandomised so a failure reproduces.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sandbox_egress.hookrunner.enforce import bounds
from sandbox_egress.hookrunner.errors import PayloadError
from sandbox_egress.hookrunner.model import Event
from sandbox_egress.hookrunner.session import HookSession, parse_event_payload
from tests.hookrunner.helpers import Env, command, pre_group, rule
from tests.hookrunner.test_input_bounds import EXAMPLE_GATE

REASON = "Destructive command blocked by security gate."
JQ_GATE = (
    'jq -c \'if (.tool_call.args | tostring | contains("rm -rf")) '
    f'then {{decision: "deny", reason: "{REASON}"}} else {{decision: "allow"}} end\''
)
NODE_GATE = (
    'node -e \'let d = ""; process.stdin.on("data", c => d += c).on("end", () => {'
    " const p = JSON.parse(d); const a = JSON.stringify((p.tool_call || {}).args || {});"
    f' console.log(JSON.stringify(a.includes("rm -rf") ? {{decision: "deny", reason: "{REASON}"}}'
    ' : {decision: "allow"})); })\''
)
GATES = ("python", "jq", "node")

leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), max_size=3),
    st.sampled_from(["\x00", "\ufeff", "\u202e", "\u2028", "\\", '"', "rm -rf /"]),
)
values = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=12,
)


def nested(depth: int, leaf: Any) -> Any:
    for _ in range(depth):
        leaf = [leaf]
    return leaf


@st.composite
def payload_texts(draw: st.DrawFn) -> str:
    """The JSON text of a pre payload; its args may repeat "code" and carry hostile extras."""
    code = draw(st.text(max_size=16)) + "rm -rf /tmp/x" + draw(st.text(max_size=16))
    members = [("code", json.dumps(code))]
    if draw(st.booleans()):  # a repeated key: the last one is what everyone reads
        members.insert(draw(st.integers(0, 1)), ("code", json.dumps(draw(st.text(max_size=8)))))
    for _ in range(draw(st.integers(0, 3))):
        extra = draw(values)
        extra = nested(draw(st.integers(0, 90)), extra) if draw(st.booleans()) else extra
        members.append((draw(st.text(max_size=6)), json.dumps(extra)))
    if draw(st.booleans()):
        members.append(("big", json.dumps("x" * draw(st.integers(0, 300_000)))))
    if draw(st.booleans()):
        members.append(("huge_number", "1" + "0" * draw(st.integers(300, 400))))
    args = ", ".join(f"{json.dumps(k)}: {v}" for k, v in members)
    return f'{{"tool_call": {{"name": "code_execution", "args": {{{args}}}}}}}'


def gated_session(env: Env, gate: str) -> HookSession:
    line = {
        "python": f"python3 {env.script('gate.py', EXAMPLE_GATE).split(' ', 1)[1]}",
        "jq": JQ_GATE,
        "node": NODE_GATE,
    }[gate]
    env.hooks({"security-gate": pre_group(rule("code_execution", command(line)))}, system=True)
    return env.session(log_decisions=False)


@pytest.fixture
def sessions(tmp_path: Path) -> dict[str, HookSession]:
    missing = [p for p in ("python3", "jq", "node") if shutil.which(p) is None]
    assert not missing, f"scripts/install-test-deps installs {missing}"
    return {gate: gated_session(Env(tmp_path / gate), gate) for gate in GATES}


def decide(session: HookSession, text: str) -> tuple[bool, str | None, dict[str, Any] | None]:
    """(allowed, reason, the args as the runner read them) for one payload text."""
    try:
        payload = parse_event_payload(
            Event.PRE, bounds.parse(text.encode("utf-8", "surrogatepass"))
        )
    except bounds.PayloadRefused as exc:
        return False, str(exc), None
    except PayloadError:
        return False, "malformed: never run", None
    decision = session.pre(payload.tool_call.name, payload.tool_call.args)
    return decision.allowed, decision.reason, dict(payload.tool_call.args)


@settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(text=payload_texts())
@example(text='{"tool_call": {"name": "code_execution", "args": {"code": "rm -rf /", "x": NaN}}}')
@example(text='{"tool_call": {"name": "code_execution", "args": {"code": "rm -rf /", "x": 1e400}}}')
@example(
    text='{"tool_call": {"name": "code_execution", "args": {"code": "rm -rf /", "x": "\\ud800"}}}'
)
@example(
    text='{"tool_call": {"name": "code_execution", "args": {"code": "rm -rf /", "x": '
    + "[" * 1200
    + "]" * 1200
    + "}}}"
)
@example(
    text='{"tool_call": {"name": "code_execution", "args": {"code": "rm -rf /", "x": "'
    + "y" * (bounds.MAX_BYTES + 10)
    + '"}}}'
)
@example(
    text='{"tool_call": {"name": "code_execution", "args": {"code": "rm -rf /", "x": '
    + "1" * 5000
    + "}}}"
)
def test_no_hostile_payload_turns_a_deny_into_an_allow(
    sessions: dict[str, HookSession], text: str
) -> None:
    for gate, session in sessions.items():
        allowed, reason, args = decide(session, text)
        if args is not None and "rm -rf" in json.dumps(args):
            assert not allowed, (gate, text[:200])
            assert reason == REASON or reason in (
                bounds.TOO_DEEP,
                bounds.TOO_LARGE,
                bounds.NOT_JSON_NUMBER,
            ), (gate, reason)
        elif args is None:
            assert not allowed  # refused or malformed: nothing runs


@pytest.mark.parametrize("gate", GATES)
def test_each_gate_still_allows_an_ordinary_call(
    sessions: dict[str, HookSession], gate: str
) -> None:
    text = (
        '{"tool_call": {"name": "code_execution", "args": {"code": "ls -la", "note": "é\\u202e"}}}'
    )
    assert decide(sessions[gate], text)[:2] == (True, None)
