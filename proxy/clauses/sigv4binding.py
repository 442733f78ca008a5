"""An entry's `credential: {as: sigv4, ...}` binding, checked at load
(docs/configuration.md#sigv4-re-signing-as-sigv4): which SigV4 signatures the proxy
re-signs (`proxy.clauses.sigv4`). The loader (`proxy.config`) calls `sigv4_binding` in one line.

Invariant: a binding names an `aws` credential (keys to sign with), a placeholder access
key id that looks like one, and non-empty lists of services and regions; `buckets`, when
given, is a non-empty list of bucket globs and needs `s3` among the services (D343).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from sandbox_egress.proxy.clauses.s3bucket import BUCKET_GLOB
from sandbox_egress.proxy.credentials.aws import AwsKeysSource
from sandbox_egress.proxy.credentials.section import As, Binding, Definitions

Report = Callable[[str, str], None]  # (location, message)

_NAME = re.compile(r"[a-z0-9-]{1,64}")  # a region or a service in a credential scope


@dataclass(frozen=True, slots=True)
class SigV4Binding:
    """An entry's `credential: {as: sigv4, ...}`: which signatures it re-signs."""

    placeholder_access_key_id: str
    services: frozenset[str]
    regions: frozenset[str]
    # The S3 buckets (globs) it re-signs for; None: any bucket (D343).
    buckets: frozenset[str] | None = None


def sigv4_binding(
    binding: Binding | None, where: str, credentials: Definitions | None, report: Report
) -> SigV4Binding | None | Literal[False]:
    """An entry's `as: sigv4` binding checked (None: not one; False: refused, reported)."""
    if binding is None or binding.as_ is not As.SIGV4:
        return None
    kind = credentials.specs.get(binding.name) if credentials is not None else None
    return parse_binding(binding.sigv4, kind, where, report) or False


_ACCESS_KEY_ID = re.compile(r"[A-Z0-9]{16,128}")
_KEYS = ("placeholder_access_key_id", "services", "regions", "buckets")


def parse_binding(
    raw: Mapping[str, Any], kind: object, where: str, report: Report
) -> SigV4Binding | None:
    """The sigv4 fields of an entry's `credential:` binding (`Binding.sigv4`), whose
    credential's definition is `kind` (an `aws` one, or None when it was refused)."""
    ok = True
    if kind is not None and not isinstance(kind, AwsKeysSource):
        report(f"{where}.name", "as: sigv4 needs an aws credential (keys to sign with)")
        ok = False
    placeholder = raw.get("placeholder_access_key_id")
    if not (isinstance(placeholder, str) and _ACCESS_KEY_ID.fullmatch(placeholder)):
        report(
            f"{where}.placeholder_access_key_id",
            "required with as: sigv4, 16-128 of A-Z 0-9 (e.g. AKIAEGRESSPLACEHOLDR)",
        )
        ok = False
    lists: dict[str, frozenset[str]] = {}
    for key in ("services", "regions"):
        value = raw.get(key)
        if not (isinstance(value, list) and value and all(_is_name(v) for v in value)):
            report(f"{where}.{key}", "required with as: sigv4, a non-empty list of names")
            ok = False
            continue
        lists[key] = frozenset(value)
    buckets = raw.get("buckets")
    if "buckets" in raw and not (
        isinstance(buckets, list)
        and buckets
        and all(isinstance(b, str) and BUCKET_GLOB.fullmatch(b) for b in buckets)
    ):
        message = "a non-empty list of bucket names or globs (a-z 0-9 . - * ?)"
        report(f"{where}.buckets", message)
        ok = False
    elif "buckets" in raw and "s3" not in lists.get("services", {"s3"}):
        report(f"{where}.buckets", "buckets: needs s3 among the services")
        ok = False
    for key in raw:
        if key not in _KEYS:
            report(f"{where}.{key}", f"unknown key (expected with as: sigv4: {', '.join(_KEYS)})")
            ok = False
    if not ok:
        return None
    named = frozenset(buckets) if isinstance(buckets, list) else None
    return SigV4Binding(str(placeholder), lists["services"], lists["regions"], named)


def _is_name(value: object) -> bool:
    return isinstance(value, str) and _NAME.fullmatch(value) is not None
