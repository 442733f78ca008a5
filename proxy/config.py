"""Load and validate the environment file's `network` section (SPEC 1.1, 1.2).

The loader is the only place that reads YAML: it turns the file into frozen `Entry`
values or refuses the whole file with every problem it found, each naming the
file, the entry (`network.allowlist[3]`, 0-based) and what is wrong.

Invariants:
* A resolved secret (a transform value) lives only inside a `Secret`, whose repr
  and str never show it; no `Problem` message is ever built from a value, only
  from key names, variable names and file paths.
* Entries are canonical: names are lowercase IDNA without the trailing dot,
  networks are `ip_network` values, ports a frozenset.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import yaml

from common.invariant import InvariantError
from proxy.addresses import NEVER_ALLOWED, classify
from proxy.hosts import HostError, canonical_host, canonical_name
from proxy.redact import NO_REDACTION, Redactor

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

ENTRY_KEYS = frozenset(
    {"domain", "transform", "ports", "allow_plaintext", "passthrough", "report_only"}
)
NETWORK_KEYS = ("allowlist", "report_only")
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain"})
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
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_REFERENCE = re.compile(r"\$\{([^}]*)\}")
# Shorter referenced parts are not redacted on their own: "1" would mangle every header.
MIN_REDACTED_LENGTH = 6
_VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class PatternKind(Enum):
    EXACT = "exact"
    WILDCARD = "wildcard"
    ANY = "any"
    ADDRESS = "address"


class Secret:
    """A transform value. Shows itself as `***` everywhere but `reveal()`.

    `parts` are the values its references resolved to (an environment variable,
    a file), kept so that an upstream echoing only the token can be redacted too.
    """

    __slots__ = ("_parts", "_value")

    def __init__(self, value: str, parts: tuple[str, ...] = ()) -> None:
        self._value = value
        self._parts = parts

    def reveal(self) -> str:
        return self._value

    def reveal_all(self) -> tuple[str, ...]:
        return (self._value, *self._parts)

    def __repr__(self) -> str:
        return "Secret(***)"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


@dataclass(frozen=True, slots=True)
class Transform:
    header: str
    value: Secret


@dataclass(frozen=True, slots=True)
class Entry:
    index: int
    pattern: str
    kind: PatternKind
    name: str | None = None  # EXACT: the name; WILDCARD: the suffix after "*."
    network: IPNetwork | None = None
    ports: frozenset[int] | None = None
    transform: tuple[Transform, ...] = ()
    allow_plaintext: bool = False
    passthrough: bool = False
    report_only: bool = False  # refusals this entry decides are logged and let through
    # What to redact from a response to a request this entry injected into: every
    # resolved value and referenced part, and their matchers (proxy.redact). Never log it.
    redactions: Redactor = field(default=NO_REDACTION, repr=False, compare=False)

    def allows_port(self, port: int) -> bool:
        return self.ports is None or port in self.ports


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    source: str
    allowlist: tuple[Entry, ...] = field(default_factory=tuple)
    report_only: bool = False  # every reportable refusal is logged and let through


@dataclass(frozen=True, slots=True)
class Problem:
    source: str
    location: str
    message: str

    def __str__(self) -> str:
        where = f": {self.location}" if self.location else ""
        return f"{self.source}{where}: {self.message}"


class ConfigError(Exception):
    """The configuration was refused. `problems` lists every error found."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


def load(path: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> NetworkConfig:
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([Problem(source, "", f"cannot read file: {exc.strerror}")]) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError([Problem(source, "", "cannot read file: not UTF-8 text")]) from exc
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError([Problem(source, where, f"invalid YAML: {problem}")]) from exc
    return parse(document, source, os.environ if environ is None else environ)


def parse(document: Any, source: str, environ: Mapping[str, str]) -> NetworkConfig:
    problems: list[Problem] = []

    def report(location: str, message: str) -> None:
        problems.append(Problem(source, location, message))

    network = _network_section(document, report)
    entries: list[Entry] = []
    if network is not None:
        allowlist = network.get("allowlist")
        for key in network:
            if key not in NETWORK_KEYS:
                report(f"network.{key}", f"unknown key (expected: {', '.join(NETWORK_KEYS)})")
        report_only = network.get("report_only", False)
        if not isinstance(report_only, bool):
            report("network.report_only", "must be true or false")
        if allowlist is None:
            allowlist = []
        if not isinstance(allowlist, list):
            report("network.allowlist", "must be a list of entries")
            allowlist = []
        seen: dict[str, int] = {}
        for index, raw in enumerate(allowlist):
            entry = _entry(index, raw, environ, report)
            if entry is None:
                continue
            if entry.pattern in seen:
                report(
                    f"network.allowlist[{index}]",
                    f"duplicate of network.allowlist[{seen[entry.pattern]}] ({entry.pattern})",
                )
                continue
            seen[entry.pattern] = index
            entries.append(entry)
    if problems:
        raise ConfigError(problems)
    report_only = isinstance(network, dict) and network.get("report_only") is True
    return NetworkConfig(source, tuple(entries), report_only=report_only)


def _network_section(document: Any, report: Any) -> dict[str, Any] | None:
    if document is None:
        return None
    if not isinstance(document, dict):
        report("", "the file must be a mapping with a 'network' section")
        return None
    if "network" not in document and isinstance(document.get("environment"), dict):
        document = document["environment"]  # a pasted environment object works too
    network = document.get("network")
    if network is None:
        return None
    if not isinstance(network, dict):
        report("network", "must be a mapping")
        return None
    return network


def _entry(index: int, raw: Any, environ: Mapping[str, str], report: Any) -> Entry | None:
    where = f"network.allowlist[{index}]"
    if not isinstance(raw, dict):
        report(where, "an entry must be a mapping with a 'domain' key")
        return None
    ok = True
    for key in raw:
        if key not in ENTRY_KEYS:
            report(where, f"unknown key {str(key)!r} (expected: {', '.join(sorted(ENTRY_KEYS))})")
            ok = False
    domain = raw.get("domain")
    if not isinstance(domain, str) or not domain.strip():
        report(f"{where}.domain", "required, a non-empty string")
        return None
    try:
        base = _pattern(domain.strip())
    except ValueError as exc:
        report(f"{where}.domain", f"{exc} (got {domain!r})")
        return None
    ports = _ports(raw.get("ports"), f"{where}.ports", report)
    if isinstance(ports, bool):
        ok, ports = False, None
    plaintext = raw.get("allow_plaintext", False)
    if not isinstance(plaintext, bool):
        report(f"{where}.allow_plaintext", "must be true or false")
        ok = False
    entry_report_only = raw.get("report_only", False)
    if not isinstance(entry_report_only, bool):
        report(f"{where}.report_only", "must be true or false")
        ok = False
    passthrough = raw.get("passthrough", False)
    if not isinstance(passthrough, bool):
        report(f"{where}.passthrough", "must be true or false")
        ok = False
    elif passthrough and raw.get("transform"):
        report(
            f"{where}.passthrough",
            "a pass-through entry is not intercepted, so it cannot have a transform",
        )
        ok = False
    transform = _transform(raw.get("transform"), f"{where}.transform", environ, report)
    if transform is None:
        ok = False
    elif transform and base.kind is PatternKind.ANY:
        report(
            f"{where}.transform",
            "a transform on '*' would send the credential to every host; name the host",
        )
        ok = False
    if not ok:
        return None
    return Entry(
        index=index,
        pattern=base.pattern,
        kind=base.kind,
        name=base.name,
        network=base.network,
        ports=ports,
        transform=transform or (),
        redactions=_redactions(transform or ()),
        allow_plaintext=bool(plaintext),
        passthrough=bool(passthrough),
        report_only=entry_report_only is True,
    )


def _pattern(domain: str) -> Entry:
    """Classify a `domain` value. Raises ValueError with the problem."""
    if domain == "*":
        return Entry(-1, "*", PatternKind.ANY)
    if "/" in domain:
        try:
            network = ipaddress.ip_network(domain, strict=True)
        except ValueError as exc:
            raise ValueError(f"invalid CIDR: {exc}") from None
        _refuse_loopback_network(network)
        return Entry(-1, network.compressed, PatternKind.ADDRESS, network=network)
    if domain.startswith("*."):
        suffix = domain[2:]
        if "*" in suffix:
            raise ValueError("a wildcard may only be a single leading '*.' label")
        name = _name(suffix)
        if name == "localhost" or name.endswith(".localhost"):
            raise ValueError("loopback names can never be opened")
        return Entry(-1, f"*.{name}", PatternKind.WILDCARD, name=name)
    if "*" in domain:
        raise ValueError("a wildcard may only be a single leading '*.' label, or '*' alone")
    try:
        host = canonical_host(domain)
    except HostError as exc:
        raise ValueError(f"invalid host: {exc}") from None
    if host.ip is not None:
        network = ipaddress.ip_network(host.ip)
        _refuse_loopback_network(network)
        return Entry(-1, network.network_address.compressed, PatternKind.ADDRESS, network=network)
    if host.name is None:
        raise InvariantError("a Host without an address has a name")
    if host.name in LOOPBACK_NAMES or host.name.endswith(".localhost"):
        raise ValueError("loopback names can never be opened")
    return Entry(-1, host.name, PatternKind.EXACT, name=host.name)


def _name(raw: str) -> str:
    try:
        return canonical_name(raw)
    except HostError as exc:
        raise ValueError(f"invalid host: {exc}") from None


def _refuse_loopback_network(network: IPNetwork) -> None:
    # A range inside loopback/unspecified can never be opened. A wider range
    # (0.0.0.0/0) is accepted; loopback inside it stays refused at run time.
    first, last = network.network_address, network.broadcast_address
    if classify(first) in NEVER_ALLOWED and classify(last) in NEVER_ALLOWED:
        raise ValueError("loopback and unspecified addresses can never be opened")


def _ports(raw: Any, where: str, report: Any) -> frozenset[int] | None | bool:
    if raw is None:
        return None
    if not isinstance(raw, list) or not raw:
        report(where, "must be a non-empty list of port numbers")
        return False
    ports = set()
    for i, port in enumerate(raw):
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            report(f"{where}[{i}]", f"port must be an integer in 1-65535 (got {port!r})")
            return False
        ports.add(port)
    return frozenset(ports)


def _transform(
    raw: Any, where: str, environ: Mapping[str, str], report: Any
) -> tuple[Transform, ...] | None:
    if raw is None:
        return ()
    if not isinstance(raw, dict) or not raw:
        report(where, "must be a non-empty mapping of header name to value")
        return None
    result: list[Transform] = []
    seen: set[str] = set()
    ok = True
    for header, value in raw.items():
        here = f"{where}.{header}"
        if not isinstance(header, str) or not _TOKEN.match(header):
            report(where, f"invalid header name {str(header)!r}")
            ok = False
            continue
        if header.lower() in FORBIDDEN_TRANSFORM_HEADERS:
            report(here, "this header frames or routes the request and cannot be set")
            ok = False
            continue
        if header.lower() in seen:
            report(here, "header given twice (names are case-insensitive)")
            ok = False
            continue
        seen.add(header.lower())
        if not isinstance(value, str):
            report(here, "value must be a string")
            ok = False
            continue
        resolution = _resolve(value, here, environ, report)
        if resolution is None:
            ok = False
            continue
        resolved, parts = resolution
        if any(c in resolved for c in "\r\n\0"):
            report(here, "value contains CR, LF or NUL (after resolving references)")
            ok = False
            continue
        if not resolved:
            report(here, "value is empty (after resolving references)")
            ok = False
            continue
        result.append(Transform(header, Secret(resolved, parts)))
    return tuple(result) if ok else None


def _redactions(transform: tuple[Transform, ...]) -> Redactor:
    found = {s for t in transform for s in t.value.reveal_all() if len(s) >= MIN_REDACTED_LENGTH}
    return Redactor.build(tuple(s.encode() for s in found))


def _resolve(
    value: str, where: str, environ: Mapping[str, str], report: Any
) -> tuple[str, tuple[str, ...]] | None:
    """Replace `${NAME}` and `${file:/path}`; return the value and what each reference gave.

    Problems name the reference, never a value.
    """
    failed = False
    parts: list[str] = []

    def substitute(match: re.Match[str]) -> str:
        nonlocal failed
        ref = match.group(1)
        if ref.startswith("file:"):
            path = ref[5:]
            try:
                content = Path(path).read_text(encoding="utf-8")
            except OSError as exc:
                report(where, f"cannot read ${{file:{path}}}: {exc.strerror}")
                failed = True
                return ""
            except UnicodeDecodeError:
                report(where, f"cannot read ${{file:{path}}}: not UTF-8 text")
                failed = True
                return ""
            content = content[:-1] if content.endswith("\n") else content
            if not content:
                report(where, f"${{file:{path}}} is empty")
                failed = True
            parts.append(content)
            return content
        if not _VAR_NAME.match(ref):
            report(where, f"invalid reference ${{{ref}}} (expected ${{NAME}} or ${{file:/path}})")
            failed = True
            return ""
        if ref not in environ:
            report(where, f"environment variable {ref} is not set")
            failed = True
            return ""
        if not environ[ref]:
            report(where, f"environment variable {ref} is empty")
            failed = True
        parts.append(environ[ref])
        return environ[ref]

    resolved = _REFERENCE.sub(substitute, value)
    return None if failed else (resolved, tuple(parts))
