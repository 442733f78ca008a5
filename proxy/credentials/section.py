"""The top-level `credentials:` map and an entry's `credential:` binding, parsed
(docs/configuration.md#credentials).

`parse_credentials` turns `credentials: {NAME: {KIND: {...}}}` into `Definitions`;
`parse_binding` an allowlist entry's `credential: {name, as, ...}` into a `Binding`. The
loader (`proxy.config`) calls each in one line.

Invariants:
* A credential has exactly one kind (a key of `proxy.credentials.table.KINDS`); its name
  is 1-64 of `A-Z a-z 0-9 - _ .` (a metric label value and a `${credential:NAME}`).
* A binding names a configured credential; `as` is one of `As`; `basic` needs a
  `username`, `header` a `header` that may be set (not a framing header). `sigv4`'s own
  fields are kept as given (`Binding.sigv4`) for the SigV4 stage to check.
* Nothing is fetched here: a definition is checked, with its `${...}` references resolved
  like any secret (or only checked, loaded with `secrets=False`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from sandbox_egress.proxy.config.references import REFERENCE
from sandbox_egress.proxy.credentials.base import Source
from sandbox_egress.proxy.credentials.block import Report
from sandbox_egress.proxy.credentials.https import Https
from sandbox_egress.proxy.credentials.oauth2 import OAuth2
from sandbox_egress.proxy.credentials.table import KINDS, Spec
from sandbox_egress.proxy.values.transforms import FORBIDDEN_TRANSFORM_HEADERS, HEADER_NAME

if TYPE_CHECKING:
    from sandbox_egress.proxy.credentials.fleet import Fleet

NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


@dataclass(frozen=True, slots=True)
class Definitions:
    """Every configured credential by name, as parsed (compared on a reload)."""

    specs: Mapping[str, Spec] = field(default_factory=lambda: MappingProxyType({}))

    def __contains__(self, name: object) -> bool:
        return name in self.specs

    def names(self) -> frozenset[str]:
        return frozenset(self.specs)


NO_CREDENTIALS = Definitions()


class As(StrEnum):
    """How an entry's `credential` binding writes the value."""

    BEARER = "bearer"  # Authorization: Bearer VALUE
    BASIC = "basic"  # Authorization: Basic base64(username:VALUE)
    HEADER = "header"  # HEADER: VALUE
    SIGV4 = "sigv4"  # the request re-signed with the credential's keys


@dataclass(frozen=True, slots=True)
class Binding:
    name: str
    as_: As
    username: str | None = None  # basic
    header: str | None = None  # header
    sigv4: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def header_name(self) -> str | None:
        """The header this binding writes (None for sigv4, which signs)."""
        if self.as_ in (As.BEARER, As.BASIC):
            return "Authorization"
        return self.header if self.as_ is As.HEADER else None


_BINDING_KEYS = {"name", "as", "username", "header"}


def parse_credentials(
    raw: Any, report: Report, environ: Mapping[str, str] | None
) -> Definitions | None:
    """The `credentials:` section; None when refused (every problem reported)."""
    if raw is None:
        return NO_CREDENTIALS
    if not isinstance(raw, dict):
        report("credentials", "must be a mapping of credential name to its source")
        return None
    specs: dict[str, Spec] = {}
    ok = True
    for name, block in raw.items():
        where = f"credentials.{name}"
        if not isinstance(name, str) or not NAME.fullmatch(name):
            report("credentials", "invalid credential name (1-64 of A-Z a-z 0-9 - _ .)")
            ok = False
            continue
        if not isinstance(block, dict) or len(block) != 1:
            kinds = ", ".join(KINDS)
            report(where, f"must be a mapping with exactly one of: {kinds}")
            ok = False
            continue
        ((kind, body),) = block.items()
        parse = KINDS.get(kind)
        if parse is None:
            report(where, f"unknown kind {kind!r} (expected one of: {', '.join(KINDS)})")
            ok = False
            continue
        spec = parse(body, f"{where}.{kind}", report, environ)
        if spec is None:
            ok = False
            continue
        specs[name] = spec
    return Definitions(MappingProxyType(specs)) if ok else None


def parse_binding(
    raw: Any, where: str, known: Definitions | None, report: Report
) -> Binding | None:
    """An entry's `credential:`; `known` None: the credentials section was refused (the
    name is not checked, so its own problems are not doubled)."""
    if not isinstance(raw, dict):
        report(where, "must be a mapping: {name: ..., as: bearer|basic|header|sigv4}")
        return None
    ok = True
    name, kind = raw.get("name"), raw.get("as")
    if not isinstance(name, str) or not name:
        report(f"{where}.name", "required, the name of a credential in credentials:")
        ok = False
    elif known is not None and name not in known:
        report(f"{where}.name", f"unknown credential {name!r} (not in credentials:)")
        ok = False
    if kind not in set(As):
        report(f"{where}.as", "required, one of: bearer, basic, header, sigv4")
        return None
    as_ = As(kind)
    username, header = raw.get("username"), raw.get("header")
    if as_ is As.BASIC and not (isinstance(username, str) and username and ":" not in username):
        report(f"{where}.username", "required with as: basic, a non-empty name without ':'")
        ok = False
    if as_ is As.HEADER and not (isinstance(header, str) and HEADER_NAME.fullmatch(header)):
        report(f"{where}.header", "required with as: header, a header name")
        ok = False
    elif as_ is As.HEADER and str(header).lower() in FORBIDDEN_TRANSFORM_HEADERS:
        report(f"{where}.header", "this header frames or routes the request and cannot be set")
        ok = False
    extra = {k: v for k, v in raw.items() if k not in _BINDING_KEYS}
    if as_ is not As.SIGV4:
        for key in extra:
            report(f"{where}.{key}", f"unknown key (expected: {', '.join(sorted(_BINDING_KEYS))})")
            ok = False
        if as_ is not As.BASIC and "username" in raw:
            report(f"{where}.username", "only with as: basic")
            ok = False
        if as_ is not As.HEADER and "header" in raw:
            report(f"{where}.header", "only with as: header")
            ok = False
    if not ok or not isinstance(name, str):
        return None
    return Binding(
        name,
        as_,
        username if as_ is As.BASIC else None,
        header if as_ is As.HEADER else None,
        MappingProxyType(extra) if as_ is As.SIGV4 else MappingProxyType({}),
    )


def referenced_files(raw: Any) -> tuple[str, ...]:
    """The paths of every `${file:...}` in the credentials section: watched like the
    allowlist's (a change reloads, and a changed definition is fetched anew)."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            refs = (m.group(1) for m in REFERENCE.finditer(value))
            found.extend(r[5:] for r in refs if r.startswith("file:"))
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(raw)
    return tuple(dict.fromkeys(p for p in found if p))


class _Anything(frozenset[str]):
    """Every name: the credentials section was refused, so names are not checked twice."""

    def __contains__(self, name: object) -> bool:
        return True


def used_names(definitions: Definitions | None) -> frozenset[str]:
    """The names `${credential:NAME}` may use (all, when the section itself was refused)."""
    return _Anything() if definitions is None else definitions.names()


def sources(
    definitions: Definitions, https: Https, fleet: Fleet | None = None
) -> tuple[dict[str, Source], dict[str, Spec]]:
    """Every credential ready to fetch with the proxy's upstream trust, and the definitions
    the cache compares on a reload (`Credentials(*sources(...))`, `Credentials.replace`).
    With a shared state (`fleet`), a rotating refresh token is refreshed by one replica at
    a time (`proxy.credentials.fleet`)."""
    specs = dict(definitions.specs)
    ready = {name: spec.source(https) for name, spec in specs.items()}
    if fleet is not None:
        ready = {n: s.shared(n, fleet) if isinstance(s, OAuth2) else s for n, s in ready.items()}
    return ready, specs
