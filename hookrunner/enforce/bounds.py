"""Input a gate can read: the one bound on every payload, before any hook sees it.

Every handler failure allows (fail-open), so a payload that common parsers
cannot read would turn any gate into an allow: ``json.load`` in a default
``python3`` dies with ``RecursionError`` near 1,000 levels, jq 1.6 refuses
above 256. The runner therefore refuses, at every entry point (``run``,
``exec``, ``session``, ``fire``, the Python API of both dialects), a payload

* nested deeper than ``MAX_DEPTH`` (64) levels of objects and arrays, counted
  on the document a hook receives (the envelope's own levels included), or
* larger than ``MAX_BYTES`` (8 MiB) as UTF-8 JSON (a 4 MiB file travels in
  ``write_file``'s arguments with room for escaping), or
* holding ``NaN`` or ``Infinity`` (``1e400`` reads as one) or a lone UTF-16
  surrogate (``"\\ud800"``): Python's ``json`` reads and writes them, but
  ``JSON.parse`` in a Node gate throws on the first and jq 1.6 on the last.

``refusal`` measures a value without recursion (a Python value nested
100,000 deep is measured, not crashed on) and says why it is refused;
``check`` raises ``PayloadRefused`` with that reason. It is called where each
dialect makes a payload (``model.EventPayload``, ``ax.events.parse_event``),
so no entry point can skip it. ``parse`` reads JSON text from a command line
(the size before parsing; a depth the parser cannot reach is a refusal, not
malformed input). Callers turn ``PayloadRefused`` into their dialect's
refusal: a deny, ``exec``'s ``error``, no hook run for an event that cannot
block.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sandbox_egress.hookrunner.errors import PayloadError

MAX_DEPTH = 64
MAX_BYTES = 8 * 1024 * 1024
TOO_DEEP = f"the payload is nested deeper than {MAX_DEPTH} levels"
TOO_LARGE = f"the payload is larger than {MAX_BYTES // 1024 // 1024} MiB as JSON"
NOT_JSON_NUMBER = "the payload holds NaN or Infinity, which JSON does not have"
LONE_SURROGATE = "the payload holds a lone UTF-16 surrogate, which is not Unicode text"


class PayloadRefused(PayloadError):
    """The payload is beyond the bound: the call is refused (not a malformed request)."""


def refusal(value: Any) -> str | None:
    """Why ``value`` may not reach a hook, or None when it is within the bound."""
    if _deeper_than(value, MAX_DEPTH):
        return TOO_DEEP
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except ValueError:  # Python's json reads and writes them; JSON.parse and others fail
        return NOT_JSON_NUMBER
    except TypeError:
        return None  # not JSON at all: the caller's own check says so
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:  # Python reads "\ud800"; jq 1.6 and others refuse it
        return LONE_SURROGATE
    return TOO_LARGE if size > MAX_BYTES else None


def check(value: Any) -> None:
    """``PayloadRefused`` when ``value`` is beyond the bound."""
    reason = refusal(value)
    if reason is not None:
        raise PayloadRefused(reason)


def parse(data: bytes) -> Any:
    """JSON text, refusing what is beyond the bound before the value exists: text larger
    than the cap, a nesting the parser itself cannot reach (``PayloadRefused``); malformed
    text is a ``PayloadError``. The payload made of the value is checked where it is made.
    """
    if len(data) > MAX_BYTES:
        raise PayloadRefused(TOO_LARGE)
    try:
        return json.loads(data)
    except RecursionError:
        raise PayloadRefused(TOO_DEEP) from None
    except ValueError as exc:
        raise PayloadError(f"not JSON: {exc}") from None


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether objects and arrays nest more than ``limit`` levels; iterative, stops early."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth + 1 > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False
