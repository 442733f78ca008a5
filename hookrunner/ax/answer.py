"""Reading a claude-code hook's exit-0 stdout: Claude Code's answer (pure).

``parse_answer`` reads stdout as one JSON object (``{}`` when empty) or says why it is
malformed (not UTF-8, not JSON, not an object, a repeated key, truncated output);
``plain_text`` is exit-0 text that is not JSON-looking (context where the event takes
it). ``carried_fields`` keeps what a valid answer asks of Claude Code beyond the
decision (D390): ``fire --claude-json`` passes it on unchanged, as Claude Code would
have acted on it with the hook run by itself. The decision is ``decode``'s.
"""

from __future__ import annotations

from typing import Any

from sandbox_egress.hookrunner.ax.eventtable import AxEvent
from sandbox_egress.hookrunner.enforce.command import OUTPUT_CAP
from sandbox_egress.hookrunner.schema import loads_strict

_JSON_WHITESPACE = " \t\n\r"


def plain_text(data: bytes, truncated: bool) -> str | None:
    """Exit-0 stdout that is plain text (not JSON-looking), or None."""
    if truncated:
        return None
    try:
        text = data.decode("utf-8").strip(_JSON_WHITESPACE)
    except UnicodeDecodeError:
        return None
    return text if text and not text.startswith("{") else None  # "[INFO] ..." is text


def parse_answer(data: bytes, truncated: bool = False) -> tuple[dict[str, Any] | None, str | None]:
    """Exit-0 stdout as a JSON object ({} when empty), or why it is malformed."""
    if truncated:
        return None, f"stdout exceeded the {OUTPUT_CAP // (1024 * 1024)} MiB cap"
    try:
        text = data.decode("utf-8").strip(_JSON_WHITESPACE)
    except UnicodeDecodeError as exc:
        return None, f"stdout is not UTF-8 (byte offset {exc.start})"
    if not text:
        return {}, None
    try:
        value = loads_strict(text)
    except RecursionError:
        return None, "stdout is not JSON: nested too deeply"
    except ValueError as exc:
        message = getattr(exc, "msg", None) or str(exc)
        return None, f"stdout is not one JSON object: {message}"
    if not isinstance(value, dict):
        return None, f"stdout is JSON {type(value).__name__}, not an object"
    for container in (value, value.get("hookSpecificOutput")):
        duplicates = getattr(container, "duplicates", ())
        if duplicates:
            return None, f"stdout repeats the key {duplicates[0]!r}"
    return value, None


# What an answer asks of Claude Code beyond the decision: passed on by --claude-json.
CARRIED = ("systemMessage", "suppressOutput")


def carried_fields(event: AxEvent, answer: dict[str, Any]) -> dict[str, Any]:
    """The fields of a valid answer that Claude Code would have acted on beyond the
    decision, as given (wrong types are left out, as Claude Code's schema would)."""
    carried: dict[str, Any] = {}
    if isinstance(answer.get("systemMessage"), str):
        carried["systemMessage"] = answer["systemMessage"]
    if isinstance(answer.get("suppressOutput"), bool):
        carried["suppressOutput"] = answer["suppressOutput"]
    if answer.get("continue") is False:  # Claude stops, whatever the event (D390)
        carried["continue"] = False
        if isinstance(answer.get("stopReason"), str):
            carried["stopReason"] = answer["stopReason"]
    nested = answer.get("hookSpecificOutput")
    if event is AxEvent.PRE_TOOL_USE and isinstance(nested, dict):
        if isinstance(nested.get("updatedInput"), dict):
            carried["updatedInput"] = nested["updatedInput"]
        if isinstance(nested.get("additionalContext"), str):
            carried["additionalContext"] = nested["additionalContext"]
        if nested.get("permissionDecision") == "allow" or answer.get("decision") == "approve":
            carried["permissionDecision"] = "allow"
    return carried
