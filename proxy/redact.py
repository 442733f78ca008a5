"""Redaction of injected secrets that an upstream echoes back (SPEC 1.4).

Works on raw header bytes: a secret is replaced wherever it occurs, including
inside a longer value (`Bearer <secret>`), so the sandbox never reads it.
"""

from __future__ import annotations

from collections.abc import Iterable

REDACTED = b"[redacted]"


def redact(value: bytes, secrets: Iterable[str]) -> bytes:
    for secret in secrets:
        raw = secret.encode("utf-8", "surrogateescape")
        if raw and raw in value:
            value = value.replace(raw, REDACTED)
    return value
