"""Exact parsing of a pre_tool_execution handler's output (stdout or 2xx body).

The only deny is a UTF-8 document that is exactly one JSON object (surrounded
by nothing but JSON whitespace) whose ``"decision"`` is the string ``"deny"``.
Everything else allows (docs/hooks.md#execution-and-decisions;
docs/hooks.md#decisions-where-the-specification-is-silent), and each way of allowing has its own
``Outcome``. Output that resembles a deny without being one (``"DENY"``,
``"block"``, a deny inside an array, a deny after other text or followed by
trailing text, a Claude-Code style ``permissionDecision``) is a near miss: it
still allows, but is reported so the operator can see why a guard did not fire.
"""

from __future__ import annotations

import re
from typing import Any

from sandbox_egress.hookrunner.outcome import Classified, Outcome
from sandbox_egress.hookrunner.schema import loads_strict

MAX_REASON_CHARS = 4096
_JSON_WHITESPACE = " \t\n\r"
DENY_WORDS = frozenset(
    {
        "deny",
        "denied",
        "block",
        "blocked",
        "reject",
        "rejected",
        "refuse",
        "refused",
        "forbid",
        "forbidden",
        "disallow",
        "disallowed",
    }
)
_DECISION_KEYS = frozenset({"decision", "permissiondecision"})
_WORDS = "|".join(sorted(DENY_WORDS, key=len, reverse=True))
_TEXT_DENY = re.compile(
    rf"""["']?(?:permission)?decision["']?\s*[:=]\s*["']?\s*({_WORDS})\b""", re.IGNORECASE
)
_MAX_DEPTH = 16


def parse_decision(data: bytes, *, truncated: bool = False) -> Classified:
    """Interpret the output of a pre_tool_execution handler that exited 0 / answered 2xx."""
    if truncated:
        return Classified(Outcome.TRUNCATED, "output exceeded the 1 MiB cap")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        lenient = data.decode("utf-8", errors="replace")
        return _unparseable(lenient, f"output is not UTF-8 (byte offset {exc.start})")
    if not text.strip(_JSON_WHITESPACE):
        return Classified(Outcome.EMPTY_OUTPUT, "printed nothing")
    try:
        value = loads_strict(text.strip(_JSON_WHITESPACE))
    except RecursionError:
        return _unparseable(text, "output is not JSON: nested too deeply")
    except ValueError as exc:
        return _unparseable(text, f"output is not exactly one JSON value: {_message(exc)}")
    if isinstance(value, dict):
        dupes = getattr(value, "duplicates", ())
        if dupes:
            return _unparseable(text, f"output repeats the key {dupes[0]!r}")
        decision = value.get("decision")
        if decision == "deny":
            return Classified(Outcome.DENY, "denied", reason=_reason(value.get("reason")))
        if decision == "allow":
            return Classified(Outcome.ALLOW, "allowed")
        detail = (
            'the object has no "decision" key'
            if "decision" not in value
            else f'"decision" is {_show(decision)}, neither "allow" nor "deny"'
        )
    else:
        detail = f"output is {_kind(value)}, not a JSON object"
    near = near_miss_in_value(value)
    if near is not None:
        return Classified(Outcome.NEAR_MISS, f"{detail}; {near}", near_miss=near)
    return Classified(Outcome.UNRECOGNISED, detail)


def near_miss_in_output(data: bytes) -> str | None:
    """Whether output (of a handler whose output does not count) resembled a deny."""
    parsed = parse_decision(data)
    if parsed.outcome is Outcome.DENY:
        return 'it printed {"decision": "deny"}'
    return parsed.near_miss


def near_miss_in_value(value: Any, depth: int = 0) -> str | None:
    """Find a deny-like decision anywhere inside a parsed JSON value."""
    if depth > _MAX_DEPTH:
        return None
    if isinstance(value, str):
        if depth == 0 and _deny_like(value):
            return f"the JSON string {_show(value)} is not a decision object"
        return None
    if isinstance(value, list):
        for item in value:
            found = near_miss_in_value(item, depth + 1)
            if found is not None:
                return found if depth else f"a deny inside an array does not count ({found})"
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            folded = key.strip().casefold()
            if folded in _DECISION_KEYS and _deny_like(item):
                if depth or key != "decision":
                    return f'{_show(key)}: {_show(item)} is not a top-level "decision": "deny"'
                return f'"decision" must be exactly "deny", got {_show(item)}'
            if folded in DENY_WORDS and item is True:
                return f"{_show(key)}: true is not a decision"
            found = near_miss_in_value(item, depth + 1)
            if found is not None:
                return found
    return None


def _unparseable(text: str, detail: str) -> Classified:
    stripped = text.strip().casefold()
    near: str | None = None
    if stripped in DENY_WORDS:
        near = f"the bare word {_show(text.strip())} is not a decision object"
    else:
        match = _TEXT_DENY.search(text)
        if match is not None:
            near = f"a deny ({_show(match.group(0))}) appears in output that is not one JSON object"
    if near is not None:
        return Classified(Outcome.NEAR_MISS, f"{detail}; {near}", near_miss=near)
    return Classified(Outcome.UNPARSEABLE, detail)


def _deny_like(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().casefold() in DENY_WORDS
    if isinstance(value, list):
        return any(_deny_like(item) for item in value)
    return False


def _reason(value: Any) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return None
    if len(value) > MAX_REASON_CHARS:
        return value[: MAX_REASON_CHARS - 1] + "\u2026"
    return value


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "a JSON array"
    if isinstance(value, str):
        return "a JSON string"
    if value is None:
        return "JSON null"
    return "a JSON boolean" if isinstance(value, bool) else "a JSON number"


def _show(value: Any, limit: int = 60) -> str:
    shown = repr(value)
    return shown if len(shown) <= limit else shown[: limit - 1] + "\u2026"


def _message(exc: ValueError) -> str:
    msg = getattr(exc, "msg", None) or str(exc)
    pos = getattr(exc, "pos", None)
    return f"{msg} at character {pos}" if pos is not None else str(msg)
