"""Reading one credential's configuration block: known keys, typed fields, durations,
`${...}` references and the cache settings every source takes (docs/configuration.md#credentials).

A `Block` reports each problem at `credentials.NAME.KIND.KEY` through the loader's `report`
and answers None for a field it refused; the kind's `parse` returns None when any was.

Invariants: a message names keys, types, paths and variable names, never a value; a
field holding a secret (`client_secret`, `private_key`, ...) is read through `secret`,
which resolves `${NAME}` / `${file:...}` into a `Secret` (or, loaded with
`secrets=False`, checks them only).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sandbox_egress.proxy.config.references import check_unresolved, resolve, secret_value
from sandbox_egress.proxy.credentials.base import (
    DEFAULT_FAILURE_TTL_S,
    DEFAULT_MAX_STALE_S,
    DEFAULT_REFRESH_BEFORE_S,
    DEFAULT_TIMEOUT_S,
    DEFAULT_TTL_S,
    CacheSettings,
)
from sandbox_egress.proxy.values.secret import Secret, Unresolved

Report = Callable[[str, str], None]  # (location, message)

SETTINGS = ("ttl", "refresh_before", "max_stale", "failure_ttl", "timeout")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
MAX_DURATION_S = 7 * 24 * 3600.0


def parse_duration(text: object) -> float | None:
    """`500ms`, `5s`, `10m`, `1h` (a bare number is seconds) in seconds; None if not one."""
    if isinstance(text, bool):
        return None
    if isinstance(text, int | float):
        seconds = float(text)
    elif isinstance(text, str) and (match := _DURATION.fullmatch(text.strip())):
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    else:
        return None
    return seconds if 0 < seconds <= MAX_DURATION_S else None


@dataclass
class Block:
    """One kind's mapping, read key by key; `ok` turns False at the first refusal."""

    raw: Mapping[str, Any]
    where: str
    report: Report
    environ: Mapping[str, str] | None  # None: references checked, not looked up
    ok: bool = True
    _read: set[str] = field(default_factory=set)

    @classmethod
    def of(
        cls, raw: Any, where: str, report: Report, environ: Mapping[str, str] | None
    ) -> Block | None:
        if not isinstance(raw, dict):
            report(where, "must be a mapping")
            return None
        return cls(raw, where, report, environ)

    def refuse(self, key: str, message: str) -> None:
        self.report(f"{self.where}.{key}" if key else self.where, message)
        self.ok = False

    def has(self, key: str) -> bool:
        return key in self.raw

    def value(self, key: str) -> Any:
        """The raw value of a key the kind checks itself (marked read)."""
        self._read.add(key)
        return self.raw.get(key)

    def string(self, key: str, *, required: bool = True, default: str = "") -> str:
        self._read.add(key)
        value = self.raw.get(key)
        if value is None and not required and key not in self.raw:
            return default
        if not isinstance(value, str) or not value:
            self.refuse(key, "required, a non-empty string" if required else "must be a string")
            return default
        return value

    def absolute_path(self, key: str, *, required: bool = True) -> str:
        path = self.string(key, required=required)
        if path and not path.startswith("/"):
            self.refuse(key, "must be an absolute path")
        return path

    def https_url(self, key: str) -> str:
        url = self.string(key)
        if url and not url.lower().startswith("https://"):
            self.refuse(key, "must be an https:// URL (credentials travel only over TLS)")
        return url.rstrip("/")

    def integer(self, key: str) -> int:
        self._read.add(key)
        value = self.raw.get(key)
        if isinstance(value, str) and value.isdigit():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            self.refuse(key, "required, a positive integer")
            return 0
        return value

    def strings(self, key: str, *, required: bool = False) -> tuple[str, ...]:
        self._read.add(key)
        value = self.raw.get(key)
        if value is None and not required:
            return ()
        if (
            not isinstance(value, list)
            or not value
            or not all(isinstance(v, str) and v for v in value)
        ):
            self.refuse(key, "must be a non-empty list of non-empty strings")
            return ()
        return tuple(value)

    def secret(self, key: str, *, required: bool = True, lines: bool = False) -> Secret | None:
        """A value that may hold `${NAME}` / `${file:...}`: resolved, never shown.

        `lines`: the value may span lines (a PEM key): it never becomes a header."""
        self._read.add(key)
        value = self.raw.get(key)
        if value is None and not required:
            return None
        if not isinstance(value, str) or not value:
            self.refuse(key, "required, a non-empty string")
            return None
        where = f"{self.where}.{key}"
        if lines:
            return self._lines(key, value, where)
        secret = secret_value(value, where, self.environ, self.report)
        if secret is None:
            self.ok = False
        return secret

    def _lines(self, key: str, value: str, where: str) -> Secret | None:
        """A value that may span lines (a PEM key): references resolved, NUL refused."""
        if self.environ is None:  # references checked for syntax only
            flat = value.replace("\r", "").replace("\n", "")
            if not check_unresolved(flat, where, self.report):
                self.ok = False
                return None
            return Unresolved()
        resolution = resolve(value, where, self.environ, self.report)
        if resolution is None:
            self.ok = False
            return None
        if "\0" in resolution[0]:
            self.refuse(key, "value contains NUL (after resolving references)")
            return None
        return Secret(*resolution)

    def settings(self, **defaults: float) -> CacheSettings:
        """The cache settings of this block, with the kind's own defaults."""
        values = {
            "ttl": DEFAULT_TTL_S,
            "refresh_before": DEFAULT_REFRESH_BEFORE_S,
            "max_stale": DEFAULT_MAX_STALE_S,
            "failure_ttl": DEFAULT_FAILURE_TTL_S,
            "timeout": DEFAULT_TIMEOUT_S,
            **defaults,
        }
        for key in SETTINGS:
            self._read.add(key)
            if key in self.raw:
                seconds = parse_duration(self.raw[key])
                if seconds is None:
                    self.refuse(key, "must be a duration: 500ms, 5s, 10m, 1h (up to 7 days)")
                else:
                    values[key] = seconds
        return CacheSettings(**values)

    def unknown(self, also: Iterable[str] = ()) -> None:
        """Refuse every key nobody read (call last)."""
        known = self._read | set(also)
        for key in self.raw:
            if key not in known:
                expected = ", ".join(sorted(known))
                self.refuse(str(key), f"unknown key (expected: {expected})")
