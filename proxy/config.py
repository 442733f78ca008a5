"""Load and validate the environment file's `network` section (docs/configuration.md#domain;
docs/configuration.md#transform).

The loader is the only place that reads YAML: it turns the file into frozen `Entry`
values or refuses the whole file with every problem it found, each naming the
file, the entry (`network.allowlist[3]`, 0-based) and what is wrong.
The structure is the JSON Schema `common/schemas/egress-config.schema.json`
(checked by `common.problems`); what no schema can say is the named validators
below: `_pattern` (IDNA, CIDR, loopback), `_transform` and `_resolve` (framing
headers, `${NAME}`/`${file:}` references), `_combinations` (fields refused
together) and the duplicate check in `parse`.

Invariants:
* A resolved secret (a transform value) lives only inside a `Secret`, whose repr
  and str never show it; no `Problem` message is ever built from a value, only
  from key names, variable names and file paths.
* A configuration loaded with `secrets=False` (the DNS responder's, docs/decisions.md D83)
  read no environment variable and opened no referenced file: its transform values are
  `Unresolved`, which refuse `reveal()`, and `NetworkConfig.secrets_resolved` is False.
* Entries are canonical: names are lowercase IDNA without the trailing dot,
  networks are `ip_network` values, ports a frozenset.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import yaml

from common.invariant import InvariantError
from common.problems import Found, Problem, schema_errors, schema_validator, syntax_problem
from common.tokens import shown
from proxy.addresses import NEVER_ALLOWED, classify
from proxy.budget import Budget, parse_budget
from proxy.formats import missing_network
from proxy.gitpush import GitPolicy, parse_git
from proxy.hosts import HostError, canonical_host, canonical_name
from proxy.placeholders import NO_PLACEHOLDERS, Placeholder, PlaceholderIndex, parse_secrets
from proxy.placeholders import index as placeholder_index
from proxy.positions import Positions, compose
from proxy.redact import NO_REDACTION, Redactor
from proxy.rules import NO_RULES, Rules, parse_rules
from proxy.secret import Secret, Unresolved

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Report = Callable[[str, str], None]  # (location, message)

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
    secrets: tuple[Placeholder, ...] = ()  # placeholders swapped for values (proxy.swap)
    rules: Rules = NO_RULES  # methods, paths and queries the entry admits (proxy.rules)
    git: GitPolicy | None = None  # smart-HTTP fetches and pushes (proxy.gitpush)
    budget: Budget | None = None  # requests and upload per window (proxy.budget)
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
    # False when loaded with `secrets=False`: its transforms are `Unresolved`; never inject.
    secrets_resolved: bool = True
    placeholders: PlaceholderIndex = field(default=NO_PLACEHOLDERS, repr=False, compare=False)
    # The files `${file:...}` references read: watched, a change reloads (D115).
    secret_files: tuple[str, ...] = ()


class ConfigError(Exception):
    """The configuration was refused. `problems` lists every error found."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


def load(
    path: str | os.PathLike[str], environ: Mapping[str, str] | None = None, *, secrets: bool = True
) -> NetworkConfig:
    """The file at `path`, parsed; `secrets=False` checks references without looking them up.

    Every problem is placed at its `file:line:column`."""
    source = str(path)
    document, positions = _read(path)
    try:
        if not secrets:
            return parse(document, source, {}, resolve_secrets=False)
        return parse(document, source, os.environ if environ is None else environ)
    except ConfigError as exc:
        raise _placed(exc, positions) from None


def read_document(path: str | os.PathLike[str]) -> Any:
    """The YAML (or JSON) document at `path`, or ConfigError naming the file (and line)."""
    return _read(path)[0]


def _read(path: str | os.PathLike[str]) -> tuple[Any, Positions]:
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([Problem(source, "", f"cannot read file: {exc.strerror}")]) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError([Problem(source, "", "cannot read file: not UTF-8 text")]) from exc
    try:
        return compose(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line, column = (mark.line + 1, mark.column + 1) if mark else (None, None)
        detail = getattr(exc, "problem", None) or "unreadable"
        raise ConfigError([syntax_problem(source, "YAML", detail, line, column)]) from exc


def _placed(error: ConfigError, positions: Positions) -> ConfigError:
    """`error` with each problem at its `file:line:column`."""
    return ConfigError([positions.place(problem) for problem in error.problems])


def parse(
    document: Any, source: str, environ: Mapping[str, str], *, resolve_secrets: bool = True
) -> NetworkConfig:
    """The whole file as typed values, or ConfigError with every problem found, in order.

    With `resolve_secrets=False`, `environ` is never read and no referenced file is opened.
    """
    lookup = environ if resolve_secrets else None
    problems: list[Problem] = []

    def report(location: str, message: str) -> None:
        problems.append(Problem(source, location, message))

    network = _shorthand(_network_section(document, report))
    found = schema_errors(schema_validator("egress-config", "network"), network)
    by_entry: dict[int, list[Found]] = {}
    for item in found:
        if len(item.path) >= 2 and item.path[0] == "allowlist" and isinstance(item.path[1], int):
            by_entry.setdefault(item.path[1], []).append(item)
        else:
            report(_location(item.path), item.message)
    allowlist = network.get("allowlist") if isinstance(network, dict) else None
    entries: list[Entry] = []
    seen: dict[str, int] = {}
    for index, raw in enumerate(allowlist if isinstance(allowlist, list) else []):
        errors = by_entry.get(index, [])
        for item in errors:
            report(_location(item.path), item.message)
        entry = _entry(
            index, raw, {str(e.path[2]) for e in errors if len(e.path) > 2}, lookup, report
        )
        if entry is None or errors:
            continue
        if entry.pattern in seen:
            report(
                f"network.allowlist[{index}]",
                f"duplicate of network.allowlist[{seen[entry.pattern]}] ({entry.pattern})",
            )
            continue
        seen[entry.pattern] = index
        entries.append(entry)
    placeholders = placeholder_index(entries, report)
    if problems:
        raise ConfigError(problems)
    report_only = isinstance(network, dict) and network.get("report_only") is True
    return NetworkConfig(
        source,
        tuple(entries),
        report_only=report_only,
        secrets_resolved=resolve_secrets,
        placeholders=placeholders,
        secret_files=_referenced_files(allowlist),
    )


def _shorthand(network: Any) -> Any:
    """`allowlist: [github.com, ...]`: a bare string entry is `{domain: github.com}`."""
    allowlist = network.get("allowlist") if isinstance(network, dict) else None
    if not isinstance(allowlist, list) or not any(isinstance(e, str) for e in allowlist):
        return network
    entries = [{"domain": e} if isinstance(e, str) else e for e in allowlist]
    return {**network, "allowlist": entries}


def _location(path: Sequence[str | int]) -> str:
    """`network.allowlist[3].transform.X-K` for a path inside the network section."""
    text = "network"
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


def _network_section(document: Any, report: Report) -> Any:
    """The `network` value (a pasted environment object's too); None when there is none.

    A file without a `network` key is refused: read as an empty allowlist, a misspelt key
    or the wrong file would silently refuse everything.
    """
    if document is None:
        report("", missing_network(document))
        return None
    if not isinstance(document, dict):
        report("", "the file must be a mapping with a 'network' section")
        return None
    if "network" not in document and isinstance(document.get("environment"), dict):
        document = document["environment"]  # a pasted environment object works too
    if "network" not in document:
        report("", missing_network(document))
    return document.get("network")


def _entry(
    index: int, raw: Any, failed: set[str], environ: Mapping[str, str] | None, report: Report
) -> Entry | None:
    """The domain checks of one entry whose fields `failed` the schema already."""
    where = f"network.allowlist[{index}]"
    if not isinstance(raw, dict) or "domain" in failed:
        return None
    try:
        base = _pattern(raw["domain"])
    except ValueError as exc:
        report(f"{where}.domain", f"{exc} (got {shown(raw['domain'], 200)})")
        return None
    transform: tuple[Transform, ...] | None = ()
    if "transform" not in failed:
        transform = _transform(raw.get("transform"), f"{where}.transform", environ, report)
    secrets: tuple[Placeholder, ...] | None = ()
    if "secrets" not in failed:
        secrets = parse_secrets(
            raw.get("secrets"), f"{where}.secrets", _resolver(environ, report), report
        )
    rules = None if failed & {"rules", "deny"} else parse_rules(raw, where, report)
    git_ok, git = (
        (False, None) if "git" in failed else parse_git(raw.get("git"), f"{where}.git", report)
    )
    budget_ok, budget = (
        (False, None)
        if "budget" in failed
        else (parse_budget(raw.get("budget"), f"{where}.budget", report))
    )
    refusals = list(_combinations(raw, base, failed))
    for field_name, message in refusals:
        report(f"{where}.{field_name}", message)
    if failed or transform is None or secrets is None or refusals:
        return None
    if rules is None or not (git_ok and budget_ok):
        return None
    ports = raw.get("ports")
    return Entry(
        index=index,
        pattern=base.pattern,
        kind=base.kind,
        name=base.name,
        network=base.network,
        ports=None if ports is None else frozenset(ports),
        transform=transform,
        secrets=secrets,
        redactions=_redactions(transform, secrets),
        allow_plaintext=raw.get("allow_plaintext") is True,
        passthrough=raw.get("passthrough") is True,
        report_only=raw.get("report_only") is True,
        rules=rules,
        git=git,
        budget=budget,
    )


def _combinations(raw: dict[str, Any], base: Entry, failed: set[str]) -> Iterator[tuple[str, str]]:
    """Fields valid alone but refused together: (field, message)."""
    if "passthrough" not in failed and raw.get("passthrough") is True and raw.get("transform"):
        yield (
            "passthrough",
            "a pass-through entry is not intercepted, so it cannot have a transform",
        )
    if raw.get("passthrough") is True and ("rules" in raw or "deny" in raw or "git" in raw):
        yield (
            "passthrough",
            "a pass-through entry is not intercepted, so its rules could not be applied",
        )
    if raw.get("transform") and base.kind is PatternKind.ANY:
        yield (
            "transform",
            "a transform on '*' would send the credential to every host; name the host",
        )
    if raw.get("secrets") and base.kind is PatternKind.ANY:
        yield ("secrets", "a secret on '*' would go to every host; name the host")
    if "passthrough" not in failed and raw.get("passthrough") is True and raw.get("secrets"):
        yield ("passthrough", "a pass-through entry is not intercepted, so it cannot have secrets")


def _pattern(domain: str) -> Entry:
    """Classify a `domain` value. Raises ValueError with the problem."""
    domain = domain.strip()
    if not domain:
        raise ValueError("required, a non-empty string")
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


def _transform(
    raw: Any, where: str, environ: Mapping[str, str] | None, report: Report
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
        if not isinstance(header, str) or not _TOKEN.fullmatch(header):
            report(where, f"invalid header name {shown(str(header), 200)}")
            ok = False
        elif header.lower() in FORBIDDEN_TRANSFORM_HEADERS:
            report(here, "this header frames or routes the request and cannot be set")
            ok = False
        elif header.lower() in seen:
            report(here, "header given twice (names are case-insensitive)")
            ok = False
        elif environ is None:
            ok = _check_unresolved(value, here, report) and ok
            result.append(Transform(header, Unresolved()))
        elif (resolution := _resolve(value, here, environ, report)) is None:
            ok = False
        elif any(c in resolution[0] for c in "\r\n\0"):
            report(here, "value contains CR, LF or NUL (after resolving references)")
            ok = False
        elif not resolution[0]:
            report(here, "value is empty (after resolving references)")
            ok = False
        else:
            result.append(Transform(header, Secret(*resolution)))
        if isinstance(header, str):
            seen.add(header.lower())
    return tuple(result) if ok else None


def _check_unresolved(value: str, where: str, report: Report) -> bool:
    """The checks of `_resolve` and `_transform` that need no reference's value."""
    ok = True
    for match in _REFERENCE.finditer(value):
        ref = match.group(1)
        if not ref.startswith("file:") and not _VAR_NAME.match(ref):
            report(where, _invalid_reference(ref))
            ok = False
    if not ok:
        return False
    if any(c in _REFERENCE.sub("", value) for c in "\r\n\0"):
        report(where, "value contains CR, LF or NUL (after resolving references)")
        return False
    if not value:
        report(where, "value is empty (after resolving references)")
        return False
    return True


def _redactions(transform: tuple[Transform, ...], secrets: tuple[Placeholder, ...]) -> Redactor:
    values = [t.value for t in transform] + [p.value for p in secrets]
    found = {s for v in values for s in v.reveal_all() if len(s) >= MIN_REDACTED_LENGTH}
    return Redactor.build(tuple(s.encode() for s in found))


def _resolver(
    environ: Mapping[str, str] | None, report: Report
) -> Callable[[str, str], Secret | None]:
    """A placeholder value's resolution (`proxy.placeholders`): the checks of a transform's."""
    if environ is None:

        def check(value: str, where: str) -> Secret | None:
            return Unresolved() if _check_unresolved(value, where, report) else None

        return check

    def resolve(value: str, where: str) -> Secret | None:
        resolution = _resolve(value, where, environ, report)
        if resolution is None:
            return None
        if any(c in resolution[0] for c in "\r\n\0"):
            report(where, "value contains CR, LF or NUL (after resolving references)")
            return None
        if not resolution[0]:
            report(where, "value is empty (after resolving references)")
            return None
        return Secret(*resolution)

    return resolve


def _referenced_files(allowlist: Any) -> tuple[str, ...]:
    """The paths of every `${file:...}` in transform and secret values (already checked)."""
    values: list[str] = []
    for raw in allowlist if isinstance(allowlist, list) else []:
        values += (raw.get("transform") or {}).values()
        values += (s["value"] for s in raw.get("secrets") or ())
    refs = (m.group(1) for v in values for m in _REFERENCE.finditer(v))
    return tuple(dict.fromkeys(r[5:] for r in refs if r.startswith("file:")))


def _resolve(
    value: str, where: str, environ: Mapping[str, str], report: Report
) -> tuple[str, tuple[str, ...]] | None:
    """Replace `${NAME}` and `${file:/path}`; return the value and what each reference gave.

    Problems name the reference, never a value.
    """
    failed = False
    parts: list[str] = []

    def substitute(match: re.Match[str]) -> str:
        nonlocal failed
        ref = match.group(1)
        content, problem = (
            _file_reference(ref[5:])
            if ref.startswith("file:")
            else (_variable_reference(ref, environ))
        )
        if problem is not None:
            report(where, problem)
            failed = True
        parts.append(content)
        return content

    resolved = _REFERENCE.sub(substitute, value)
    return None if failed else (resolved, tuple(parts))


def _file_reference(path: str) -> tuple[str, str | None]:
    """What `${file:PATH}` gives (without one final newline), or why it cannot be used."""
    try:
        content = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        return "", f"cannot read ${{file:{path}}}: {exc.strerror}"
    except UnicodeDecodeError:
        return "", f"cannot read ${{file:{path}}}: not UTF-8 text"
    content = content[:-1] if content.endswith("\n") else content
    return content, None if content else f"${{file:{path}}} is empty"


def _invalid_reference(ref: str) -> str:
    return f"invalid reference ${{{ref}}} (expected ${{NAME}} or ${{file:/path}})"


def _variable_reference(name: str, environ: Mapping[str, str]) -> tuple[str, str | None]:
    """What `${NAME}` gives, or why it cannot be used."""
    if not _VAR_NAME.match(name):
        return "", _invalid_reference(name)
    if name not in environ:
        return "", f"environment variable {name} is not set"
    value = environ[name]
    return value, None if value else f"environment variable {name} is empty"
