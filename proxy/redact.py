"""Redaction of injected secrets that an upstream echoes back (SPEC 1.4).

Works on raw header bytes: a secret is replaced wherever it occurs, including
inside a longer value (`Bearer <secret>`), so the sandbox never reads it. The
caller passes the secrets injected into the request being answered, encoded
once per configuration (`Entry.redactions`), longest first.
"""

from __future__ import annotations

REDACTED = b"[redacted]"


def redact(value: bytes, secrets: tuple[bytes, ...]) -> bytes:
    for secret in secrets:
        if secret in value:
            value = value.replace(secret, REDACTED)
    return value
