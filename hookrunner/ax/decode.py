"""One finished hook process to what it asks of its event (pure).

Observation-only events ignore the decoder entirely: a hook's exit status and
output never change anything there. Otherwise:

Legacy entries (no ``protocol``):
* exit 0 continues; for ``PostToolUse`` the trimmed stdout is feedback, for
  ``Stop``, ``SubagentStop`` and ``PreCompact`` it is a notice for the user;
* any failure (non-zero exit, timeout, crash, missing program) blocks a
  blocking event only with ``blockOnFailure``, the reason being the trimmed
  stderr (else stdout, else the cause); otherwise it continues, with a warning
  (a non-zero exit that blocks is a deliberate block: no warning, the decision
  line tells).

``"protocol": "claude-code"`` entries:
* exit 2 blocks a blocking event whatever stdout holds (malformed or not),
  the reason being stderr (else a string ``reason`` on stdout, else a default);
  on ``PostToolUse`` stderr is feedback;
* exit 0 on a blocking event: stdout must be empty (no decision) or one JSON
  object; ``continue: false`` blocks, then ``permissionDecision`` (top level or
  under ``hookSpecificOutput``, the stricter when both) ``deny`` blocks, ``ask``
  asks, ``allow`` continues, then the older ``decision`` ``block``/``approve``.
  Anything else (not UTF-8, not JSON, not an object, repeated keys, an unknown
  ``permissionDecision``, truncated output) is malformed and blocks:
  docs/hooks.md#the-ax-code--claude-code-dialect-ax-codehooksjson
  "malformed stdout blocks". A ``reason`` that is not a string does not turn a
  deny into an allow: the default reason is used;
* exit 0 on ``UserPromptSubmit`` (Claude Code's context injection): plain
  text on stdout (anything not starting with ``{``) is context for the model,
  as is ``hookSpecificOutput.additionalContext`` of an answer that does not
  block; text that starts with ``{`` but is not a valid answer is malformed;
* exit 0 on ``PostToolUse``: ``hookSpecificOutput.additionalContext`` and the
  ``reason`` of ``{"decision": "block"}`` are feedback; malformed output gives
  none (and a warning);
* on ``Stop``, ``SubagentStop`` and ``PreCompact`` (which cannot block, source
  page) an exit 2 or an answer ``{"decision": "block"}`` / ``{"continue":
  false}`` is ignored with a warning; its reason becomes a notice;
* any other failure (another exit status, a timeout, a crash, a missing
  program) blocks a blocking event only with ``blockOnFailure`` (the entry
  fails closed, the failure the reason); otherwise it does not block (a
  warning says why);
* what an exit-0 answer asks of Claude Code beyond the decision is kept in
  ``carried`` (``CARRIED``: ``updatedInput``, ``systemMessage``,
  ``suppressOutput``, a PreToolUse ``additionalContext``, an explicit
  ``permissionDecision: allow``) for ``fire --claude-json`` to pass on (D390);
* ``SessionStart`` (observation-only in the AX dialect, ``carried`` in its row):
  a claude-code hook's plain stdout or ``additionalContext`` is context,
  ``continue: false`` stops, as Claude Code reads them (D391).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from sandbox_egress.hookrunner.ax.answer import CARRIED, carried_fields, parse_answer, plain_text
from sandbox_egress.hookrunner.ax.eventtable import AxEvent, Output, spec_of
from sandbox_egress.hookrunner.ax.feedback import bound
from sandbox_egress.hookrunner.ax.model import AxEntry, Cause, Effect, Protocol
from sandbox_egress.hookrunner.decision import MAX_REASON_CHARS
from sandbox_egress.hookrunner.enforce.command import ProcessResult
from sandbox_egress.hookrunner.outcome import Outcome, classify_process

ASK_REASON = "hook requested user confirmation"
PERMISSIONS = ("allow", "deny", "ask")
_STRICTNESS = {"allow": 0, "ask": 1, "deny": 2}


@dataclass(frozen=True)
class Decoded:
    outcome: Outcome
    effect: Effect
    detail: str
    reason: str | None = None
    cause: Cause | None = None
    feedback: str | None = None
    notice: str | None = None
    failed: bool = False
    context: str | None = None
    # A Stop-like hook asked to block (exit 2, {"decision": "block"}, {"continue": false}):
    # ignored here, honoured by Claude Code's own convention (`ax.claudeout`, D228).
    asked_block: bool = False
    carried: dict[str, Any] | None = None  # CARRIED fields of the answer (D390)


def decode(event: AxEvent, entry: AxEntry, result: ProcessResult) -> Decoded:
    if result.cancelled:
        detail = "stopped because its session closed; its process group was killed"
        return Decoded(Outcome.CANCELLED, Effect.CONTINUE, detail, failed=True)
    classified = classify_process(result, entry.timeout)
    base = Decoded(classified.outcome, Effect.CONTINUE, classified.detail)
    if spec_of(event).carried and entry.protocol is Protocol.CLAUDE_CODE:
        return _carried_observation(result, base)
    if spec_of(event).output is Output.IGNORED:
        return Decoded(base.outcome, Effect.CONTINUE, base.detail, failed=base.outcome.failed)
    if entry.protocol is Protocol.CLAUDE_CODE:
        return _claude_code(event, entry, result, base)
    return _legacy(event, entry, result, base)


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace").strip()


def _reason(text: str) -> str:
    return bound(text, MAX_REASON_CHARS, what="reason")


def _legacy(event: AxEvent, entry: AxEntry, result: ProcessResult, base: Decoded) -> Decoded:
    output = spec_of(event).output
    if base.outcome is Outcome.OK:
        text = _text(result.stdout) or None
        if output is Output.FEEDBACK:
            return Decoded(Outcome.OK, Effect.CONTINUE, base.detail, feedback=text)
        if output is Output.NOTICE:
            return Decoded(Outcome.OK, Effect.CONTINUE, base.detail, notice=text)
        return base
    if output is Output.DECISION and entry.block_on_failure:
        said = _text(result.stderr) or _text(result.stdout)
        blocked = _failed_closed(event, base)
        # A non-zero exit is how a legacy hook blocks on purpose: the decision line says
        # so. A timeout, crash or missing program blocking is worth a warning too.
        return replace(
            blocked,
            reason=_reason(said) if said else blocked.reason,
            failed=base.outcome is not Outcome.EXIT_NONZERO,
        )
    return Decoded(base.outcome, Effect.CONTINUE, base.detail, failed=True)


def _failed_closed(event: AxEvent, base: Decoded) -> Decoded:
    """A failed blockOnFailure entry of a blocking event: blocks, the failure the reason."""
    reason = f"Blocked by a {event.value} hook that failed: {base.detail}."
    return Decoded(
        base.outcome,
        Effect.BLOCK,
        base.detail,
        _reason(reason),
        Cause.BLOCK_ON_FAILURE,
        failed=True,
    )


def _claude_code(event: AxEvent, entry: AxEntry, result: ProcessResult, base: Decoded) -> Decoded:
    output = spec_of(event).output
    if result.returncode == 2 and base.outcome is Outcome.EXIT_NONZERO:
        stderr = _text(result.stderr)
        if output is Output.DECISION:
            answer, _ = parse_answer(result.stdout, result.stdout_truncated)
            stated = answer.get("reason") if answer is not None else None
            reason = stderr or (stated if isinstance(stated, str) and stated.strip() else "")
            reason = reason or f"Blocked by a {event.value} hook (exit status 2)."
            return Decoded(
                Outcome.EXIT_2,
                Effect.BLOCK,
                "exited with status 2",
                _reason(reason),
                Cause.EXIT_2,
            )
        if output is Output.FEEDBACK:
            return Decoded(Outcome.EXIT_2, Effect.CONTINUE, "exited with status 2", feedback=stderr)
        detail = f"exited with status 2, but {event.value} cannot block; ignored"
        return Decoded(
            Outcome.EXIT_2,
            Effect.CONTINUE,
            detail,
            notice=stderr or None,
            failed=True,
            asked_block=True,
        )
    if base.outcome is not Outcome.OK:
        if spec_of(event).blocks and entry.block_on_failure:
            return _failed_closed(event, base)
        return Decoded(base.outcome, Effect.CONTINUE, base.detail, failed=True)
    if output is Output.DECISION:
        return _decision(event, result)
    decoded = (
        _post_feedback(result) if output is Output.FEEDBACK else _ignored_block(event, result, base)
    )
    answer, _ = parse_answer(result.stdout, result.stdout_truncated)
    carried = carried_fields(event, answer or {})
    return replace(decoded, carried=carried) if carried else decoded


def _ignored_block(event: AxEvent, result: ProcessResult, base: Decoded) -> Decoded:
    """A Stop-like hook that asks to block: it cannot (source page), so say so."""
    answer, _ = parse_answer(result.stdout, result.stdout_truncated)
    if answer is None:
        return base
    if answer.get("decision") == "block":
        asked, stated = '{"decision": "block"}', answer.get("reason")
    elif answer.get("continue") is False:
        asked, stated = '{"continue": false}', answer.get("stopReason")
    else:
        return base
    reason = stated.strip() if isinstance(stated, str) and stated.strip() else None
    detail = f"answered {asked}, but {event.value} cannot block; ignored"
    return Decoded(
        Outcome.DENY, Effect.CONTINUE, detail, notice=reason, failed=True, asked_block=True
    )


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)[:40]


def _decision(event: AxEvent, result: ProcessResult) -> Decoded:
    decoded = _decision_of(event, result)
    if decoded.outcome is Outcome.MALFORMED:
        return decoded
    answer, _ = parse_answer(result.stdout, result.stdout_truncated)  # None: plain context
    carried = carried_fields(event, answer or {})
    return replace(decoded, carried=carried) if carried else decoded


def _carried_observation(result: ProcessResult, base: Decoded) -> Decoded:
    """A claude-code hook of SessionStart, read as Claude Code reads it: exit 0 plain
    text or ``additionalContext`` is context; ``continue: false`` stops (kept in
    ``carried``); a failure never blocks (a warning says why)."""
    if base.outcome is not Outcome.OK:
        return Decoded(base.outcome, Effect.CONTINUE, base.detail, failed=True)
    text = plain_text(result.stdout, result.stdout_truncated)
    if text is not None:
        return Decoded(Outcome.OK, Effect.CONTINUE, "printed context", context=text)
    answer, problem = parse_answer(result.stdout, result.stdout_truncated)
    if answer is None:
        return Decoded(Outcome.MALFORMED, Effect.CONTINUE, f"{problem}; ignored", failed=True)
    nested = answer.get("hookSpecificOutput")
    added = nested.get("additionalContext") if isinstance(nested, dict) else None
    context = added.strip() or None if isinstance(added, str) else None
    carried: dict[str, Any] = {
        k: answer[k] for k in CARRIED if isinstance(answer.get(k), str | bool)
    }
    if answer.get("continue") is False:
        carried["continue"] = False
        if isinstance(answer.get("stopReason"), str):
            carried["stopReason"] = answer["stopReason"]
    return Decoded(
        Outcome.OK, Effect.CONTINUE, base.detail, context=context, carried=carried or None
    )


def _decision_of(event: AxEvent, result: ProcessResult) -> Decoded:
    takes_context = spec_of(event).context
    if takes_context:
        text = plain_text(result.stdout, result.stdout_truncated)
        if text is not None:
            return Decoded(Outcome.OK, Effect.CONTINUE, "printed context", context=text)
    answer, problem = parse_answer(result.stdout, result.stdout_truncated)
    if answer is not None:
        problem = _check(answer)
    if answer is None or problem is not None:
        message = f"Blocked by a {event.value} hook: its output is not a valid answer ({problem})."
        return Decoded(
            Outcome.MALFORMED,
            Effect.BLOCK,
            f"exited with status 0 but {problem}",
            _reason(message),
            Cause.MALFORMED_OUTPUT,
            failed=True,
        )
    nested = answer.get("hookSpecificOutput") or {}
    permissions = [
        p for p in (answer.get("permissionDecision"), nested.get("permissionDecision")) if p
    ]
    permission: str | None = max(permissions, key=_STRICTNESS.__getitem__, default=None)
    stated = [answer.get("reason"), nested.get("permissionDecisionReason")]
    reason = next((r for r in stated if isinstance(r, str) and r.strip()), None)
    ignored = any(r is not None and not isinstance(r, str) for r in stated)
    note = "; its reason is not a string, so the default reason is used" if ignored else ""
    if answer.get("continue") is False:
        stop = answer.get("stopReason")
        text = stop if isinstance(stop, str) and stop.strip() else reason
        text = text or f"Blocked by a {event.value} hook (continue: false)."
        return Decoded(
            Outcome.DENY,
            Effect.BLOCK,
            "printed continue: false",
            _reason(text),
            Cause.CONTINUE_FALSE,
        )
    if permission == "deny" or (permission is None and answer.get("decision") == "block"):
        cause = Cause.PERMISSION_DENY if permission == "deny" else Cause.DECISION_BLOCK
        text = reason or f"Blocked by a {event.value} hook."
        return Decoded(Outcome.DENY, Effect.BLOCK, f"denied{note}", _reason(text), cause)
    if permission == "ask":
        return Decoded(
            Outcome.ASK, Effect.ASK, f"asked{note}", _reason(reason or ASK_REASON), Cause.ASK
        )
    added = nested.get("additionalContext") if takes_context else None
    context = added.strip() or None if isinstance(added, str) else None
    if permission == "allow" or answer.get("decision") == "approve":
        return Decoded(Outcome.ALLOW, Effect.CONTINUE, "allowed", context=context)
    detail = "exited with status 0 without a decision"
    return Decoded(Outcome.OK, Effect.CONTINUE, detail, context=context)


def _check(answer: dict[str, Any]) -> str | None:
    """Why a parsed answer is malformed, or None."""
    nested = answer.get("hookSpecificOutput", {})
    if not isinstance(nested, dict):
        return f'"hookSpecificOutput" must be an object, got {_show(nested)}'
    for where, container in (("", answer), ("hookSpecificOutput.", nested)):
        if "permissionDecision" in container and container["permissionDecision"] not in PERMISSIONS:
            got = _show(container["permissionDecision"])
            return f'{where}permissionDecision must be "allow", "deny" or "ask", got {got}'
    if "decision" in answer and answer["decision"] not in ("approve", "block"):
        return f'decision must be "approve" or "block", got {_show(answer["decision"])}'
    added = nested.get("additionalContext")
    updated = nested.get("updatedInput")
    if updated is not None and not isinstance(updated, dict):
        return f"hookSpecificOutput.updatedInput must be an object, got {_show(updated)}"
    if added is not None and not isinstance(added, str):
        return f"hookSpecificOutput.additionalContext must be a string, got {_show(added)}"
    if "continue" in answer and not isinstance(answer["continue"], bool):
        return f"continue must be true or false, got {_show(answer['continue'])}"
    return None


def _post_feedback(result: ProcessResult) -> Decoded:
    answer, problem = parse_answer(result.stdout, result.stdout_truncated)
    if answer is None:
        return Decoded(
            Outcome.MALFORMED, Effect.CONTINUE, f"{problem}; no feedback taken", failed=True
        )
    pieces = []
    if answer.get("decision") == "block" and isinstance(answer.get("reason"), str):
        pieces.append(answer["reason"].strip())
    nested = answer.get("hookSpecificOutput")
    if isinstance(nested, dict) and isinstance(nested.get("additionalContext"), str):
        pieces.append(nested["additionalContext"].strip())
    feedback = "\n".join(p for p in pieces if p) or None
    return Decoded(Outcome.OK, Effect.CONTINUE, "exited with status 0", feedback=feedback)
