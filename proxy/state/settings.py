"""The configuration file's top-level `state:` section (docs/configuration.md#state): where
budgets are kept — this node's memory (the default) or a Redis every replica shares (1.16).

Parsed here and called from the loader (`proxy.config.parse`) in one line; problems are
reported at `state.<key>` like every other problem of the file. A URL's password is never
part of a message (only the key names are).

`password` (issue 48, D405) is the store's password kept out of the file: `${file:/path}`
(a Kubernetes Secret's file) or `${NAME}`, resolved like a transform value
(`proxy.config.references`) and never shown (not in a repr, a message or `/status`). With
`environ` None (`check --no-secrets`) only its syntax is checked.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from sandbox_egress.proxy.values.secret import Unresolved

Report = Callable[[str, str], None]

DEFAULT_TIMEOUT_S = 0.05
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s)\s*$")
_KEY_PREFIX = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
_KEYS = ("backend", "url", "password", "key_prefix", "timeout", "on_error")


class OnError(StrEnum):
    LOCAL = "local"  # fall back to this process's memory (counted, logged)
    DENY = "deny"  # refuse budgeted requests: 503 budget_unavailable


# The backends a file may name, each a row of `proxy.state.backends.BACKENDS` (which
# refuses to import when the two differ): memory (this node's) and redis (shared, 1.16).
BACKEND_NAMES: tuple[str, ...] = ("memory", "redis")


@dataclass(frozen=True, slots=True)
class StateConfig:
    backend: str = "memory"  # a name of `BACKEND_NAMES`
    url: str = ""
    key_prefix: str = "egress"
    timeout_s: float = DEFAULT_TIMEOUT_S
    on_error: OnError = OnError.LOCAL
    password: str = field(default="", repr=False)  # resolved; "" none (or not resolved)


MEMORY = StateConfig()


def parse_state(
    document: Any, report: Report, environ: Mapping[str, str] | None = None
) -> StateConfig:
    """The `state:` section of `document` (the default without one); `environ` resolves
    the references of `password` (None: their syntax is checked only)."""
    raw = document.get("state") if isinstance(document, dict) else None
    if raw is None:
        return MEMORY
    if not isinstance(raw, dict):
        report("state", "must be a mapping (backend, url, key_prefix, timeout, on_error)")
        return MEMORY
    for key in raw:
        if key not in _KEYS:
            report(f"state.{key}", f"unknown key (expected: {', '.join(_KEYS)})")
    backend = raw.get("backend", "memory")
    if backend not in BACKEND_NAMES:
        report("state.backend", f"expected {' or '.join(BACKEND_NAMES)}")
        backend = "memory"
    url = raw.get("url", "")
    if backend == "redis" and not _redis_url(url):
        report("state.url", "backend redis needs url: redis://HOST:PORT/DB, rediss:// or unix://")
    prefix = raw.get("key_prefix", "egress")
    if not isinstance(prefix, str) or not _KEY_PREFIX.match(prefix):
        report("state.key_prefix", "expected 1-64 letters, digits or _.:-")
        prefix = "egress"
    timeout = _duration(raw.get("timeout", "50ms"))
    if timeout is None:
        report("state.timeout", "expected a duration such as 50ms or 1s (at most 10s)")
    on_error = raw.get("on_error", "local")
    if on_error not in ("local", "deny"):
        report("state.on_error", "expected local or deny")
        on_error = "local"
    password = _password(raw.get("password"), environ, report)
    return StateConfig(
        backend, str(url or ""), prefix, timeout or DEFAULT_TIMEOUT_S, OnError(on_error), password
    )


def _password(value: Any, environ: Mapping[str, str] | None, report: Report) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or not value:
        report("state.password", "expected a string, e.g. ${file:/run/secrets/redis/password}")
        return ""
    from sandbox_egress.proxy.config.references import secret_value

    secret = secret_value(value, "state.password", environ, report)
    return "" if secret is None or isinstance(secret, Unresolved) else secret.reveal()


def _redis_url(url: Any) -> bool:
    if not isinstance(url, str):
        return False
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    if parts.scheme == "unix":
        return bool(parts.path)
    return parts.scheme in ("redis", "rediss") and bool(parts.hostname)


def _duration(value: Any) -> float | None:
    """Seconds of `"50ms"`/`"1s"` (or a bare number of seconds), None when not one."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        match = _DURATION.match(value) if isinstance(value, str) else None
        if match is None:
            return None
        seconds = float(match[1]) / (1000 if match[2] == "ms" else 1)
    return seconds if 0 < seconds <= 10 else None
