"""An allowlist entry's `transform`: headers the proxy sets on the requests it lets through
(docs/configuration.md#transform).

Invariants:
* A transform never sets a header that frames or routes the message
  (`FORBIDDEN_TRANSFORM_HEADERS`), nor one header twice (names are case-insensitive).
* Its value lives only inside a `Secret` (`proxy.config.references` resolves it); a problem names
  the header, never the value.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from sandbox_egress.common.tokens import shown
from sandbox_egress.proxy.config.references import secret_value
from sandbox_egress.proxy.values.secret import Secret

Report = Callable[[str, str], None]  # (location, message)

# Headers that frame or route the message: a transform may not rewrite them.
FORBIDDEN_TRANSFORM_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "proxy-connection",
        "x-egress-denied",
    }
)
HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")  # an RFC 9110 token


@dataclass(frozen=True, slots=True)
class Transform:
    header: str
    value: Secret


def parse_transform(
    raw: Any,
    where: str,
    environ: Mapping[str, str] | None,
    report: Report,
    credentials: Collection[str] | None = None,
) -> tuple[Transform, ...] | None:
    """The domain checks of a transform the schema accepted; None when refused.

    `environ` None: references are checked for syntax only and values are `Unresolved`.
    """
    if raw is None:
        return ()
    result: list[Transform] = []
    seen: set[str] = set()
    ok = True
    for header, value in raw.items():
        here = f"{where}.{header}"
        if not isinstance(header, str) or not HEADER_NAME.fullmatch(header):
            report(where, f"invalid header name {shown(str(header), 200)}")
            ok = False
        elif header.lower() in FORBIDDEN_TRANSFORM_HEADERS:
            report(here, "this header frames or routes the request and cannot be set")
            ok = False
        elif header.lower() in seen:
            report(here, "header given twice (names are case-insensitive)")
            ok = False
        elif (secret := secret_value(value, here, environ, report, credentials)) is None:
            ok = False
        else:
            result.append(Transform(header, secret))
        if isinstance(header, str):
            seen.add(header.lower())
    return tuple(result) if ok else None
