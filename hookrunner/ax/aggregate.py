"""The decision of one fired event from its hook runs, in entry order (pure).

Blocking events (``PreToolUse``, ``UserPromptSubmit``):
* the first block is the decision: no later entry runs;
* an ask does not stop later entries, so a later deny beats an earlier ask;
  the first ask's reason is kept;
* at the end an ask becomes: on ``UserPromptSubmit`` a block (there is no
  tool call to attach a prompt to); in a headless session a deny that reads
  like an ordinary permission rejection (no rule or grant can answer a hook's
  ask); with an interactive channel, the ``ask`` verdict, for the caller to
  show to a human;
* otherwise allow (``no_hooks`` when nothing matched), with the context the
  ``UserPromptSubmit`` hooks added (at most ``PER_CALL_CHARS`` in all).

Other events run every matching entry; they always allow. ``PostToolUse``
contributions become one feedback block; ``Stop``-like notices are kept.

What the hooks that ran asked of Claude Code beyond the decision (``HookRun.carried``)
is merged into ``FireResult.carried`` (``merge_carried``, D392): messages and
context joined in entry order, ``updatedInput`` the last one given.

The entries run through the ``run`` callable given in, so nothing here starts
a process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sandbox_egress.hookrunner.ax.eventtable import spec_of
from sandbox_egress.hookrunner.ax.feedback import (
    NOTICE_CHARS,
    PER_CALL_CHARS,
    bound,
    feedback_block,
)
from sandbox_egress.hookrunner.ax.model import (
    AxEntry,
    AxEvent,
    Cause,
    Effect,
    FireResult,
    HookRun,
    Verdict,
)

RunEntry = Callable[[AxEntry], HookRun]


def headless_reason(tool: str, reason: str) -> str:
    return (
        f"Permission to use {tool or 'this tool'} was rejected: a hook asked for interactive "
        f"confirmation ({reason}) and this run has no one to ask."
    )


_JOINED = {"systemMessage": "\n", "additionalContext": "\n\n"}


def merge_carried(runs: Sequence[HookRun]) -> dict[str, Any]:
    """One answer's carried fields from every run's, in entry order."""
    merged: dict[str, Any] = {}
    for run in runs:
        for key, value in (run.carried or {}).items():
            if key in _JOINED and key in merged:
                merged[key] = f"{merged[key]}{_JOINED[key]}{value}"
            elif key == "suppressOutput":
                merged[key] = bool(merged.get(key)) or value
            else:
                merged[key] = value  # updatedInput, continue...: the last hook's (D392)
    return merged


def decide(
    event: AxEvent,
    entries: Iterable[AxEntry],
    run: RunEntry,
    *,
    interactive: bool,
    tool: str = "",
) -> FireResult:
    runs: list[HookRun] = []
    ask: HookRun | None = None
    for entry in entries:
        result = run(entry)
        runs.append(result)
        if result.effect is Effect.BLOCK:
            cause = result.cause or Cause.BLOCK_ON_FAILURE
            return FireResult(
                event,
                Verdict.DENY,
                cause,
                result.reason,
                entry.source,
                runs=tuple(runs),
                carried=merge_carried(runs),
            )
        if result.effect is Effect.ASK and ask is None:
            ask = result
    if ask is not None:
        reason = ask.reason or ""
        source = ask.entry.source
        if spec_of(event).ask == "block":
            return FireResult(
                event, Verdict.DENY, Cause.ASK_ON_PROMPT, reason, source, runs=tuple(runs)
            )
        if not interactive:
            return FireResult(
                event,
                Verdict.DENY,
                Cause.ASK_HEADLESS,
                headless_reason(tool, reason),
                source,
                runs=tuple(runs),
            )
        carried = merge_carried(runs)
        return FireResult(
            event, Verdict.ASK, Cause.ASK, reason, source, runs=tuple(runs), carried=carried
        )
    cause = Cause.ALLOWED if runs else Cause.NO_HOOKS
    pieces = [r.context for r in runs if r.context]
    context = bound("\n\n".join(pieces), PER_CALL_CHARS, what="context") if pieces else None
    carried = merge_carried(runs)
    return FireResult(
        event, Verdict.ALLOW, cause, runs=tuple(runs), context=context, carried=carried
    )


def gather(event: AxEvent, entries: Iterable[AxEntry], run: RunEntry) -> FireResult:
    runs = tuple(run(entry) for entry in entries)
    block = feedback_block(r.feedback for r in runs if r.feedback)
    notices = tuple(bound(r.notice, NOTICE_CHARS, what="notice") for r in runs if r.notice)
    cause = Cause.NON_BLOCKING if runs else Cause.NO_HOOKS
    pieces = [r.context for r in runs if r.context]  # SessionStart's (--claude-json, D391)
    context = bound("\n\n".join(pieces), PER_CALL_CHARS, what="context") if pieces else None
    return FireResult(
        event,
        Verdict.ALLOW,
        cause,
        feedback=block,
        notices=notices,
        runs=runs,
        context=context,
        carried=merge_carried(runs),
    )
