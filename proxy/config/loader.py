"""Load and validate the environment file's `network` section (docs/configuration.md#domain;
docs/configuration.md#transform).

The loader is the only place that reads YAML: it turns the file into frozen `Entry`
values or refuses the whole file with every problem it found, each naming the
file, the entry (`network.allowlist[3]`, 0-based) and what is wrong.
The structure is the JSON Schema `common/schemas/egress-config.schema.json`
(checked by `common.problems`); what no schema can say is checked by named validators:
`proxy.config.patterns` (IDNA, CIDR, loopback), `proxy.values.transforms` (framing headers),
`proxy.config.references` (`${NAME}`/`${file:}` references),
`proxy.config.combinations` (fields refused together) and the duplicate check in `parse`.

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

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from sandbox_egress.common.problems import (
    Found,
    Problem,
    schema_errors,
    schema_validator,
    syntax_problem,
)
from sandbox_egress.common.tokens import shown
from sandbox_egress.proxy.approvals.settings import NO_APPROVALS, ApprovalsConfig, parse_approvals
from sandbox_egress.proxy.clauses import CLAUSES
from sandbox_egress.proxy.clauses.sigv4binding import sigv4_binding
from sandbox_egress.proxy.config.combinations import combinations
from sandbox_egress.proxy.config.entry import Entry as Entry  # re-exported
from sandbox_egress.proxy.config.patterns import (
    PatternKind as PatternKind,  # an Entry's field type, re-exported
)
from sandbox_egress.proxy.config.patterns import parse_pattern
from sandbox_egress.proxy.config.positions import Positions, compose
from sandbox_egress.proxy.config.references import referenced_files, secret_value
from sandbox_egress.proxy.credentials.section import (
    NO_CREDENTIALS,
    Binding,
    Definitions,
    parse_binding,
    parse_credentials,
    used_names,
)
from sandbox_egress.proxy.credentials.section import referenced_files as credential_files
from sandbox_egress.proxy.learn.formats import missing_network
from sandbox_egress.proxy.state.settings import MEMORY, StateConfig, parse_state
from sandbox_egress.proxy.values.placeholders import (
    NO_PLACEHOLDERS,
    Placeholder,
    PlaceholderIndex,
    ResolveValue,
    parse_secrets,
)
from sandbox_egress.proxy.values.placeholders import index as placeholder_index
from sandbox_egress.proxy.values.redact import Redactor
from sandbox_egress.proxy.values.transforms import (
    Transform as Transform,  # an Entry's field type, re-exported
)
from sandbox_egress.proxy.values.transforms import parse_transform

Report = Callable[[str, str], None]  # (location, message)

# Shorter referenced parts are not redacted on their own: "1" would mangle every header.
MIN_REDACTED_LENGTH = 6


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
    # The top-level `credentials:` (proxy.credentials), fetched per request through a cache.
    credentials: Definitions = field(default=NO_CREDENTIALS, repr=False)
    state: StateConfig = MEMORY  # where budgets are kept (proxy.state, issue 34)
    approvals: ApprovalsConfig = NO_APPROVALS  # issue 47: held unknown destinations


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


def read_placed(source: str, text: str) -> tuple[Any, Callable[[ConfigError], ConfigError]]:
    """The document `text` (the file `source`'s, already read: a sandbox file's,
    `proxy.sandboxes.load_sandbox`), and what places a ConfigError's problems at their
    `line:column` of it."""
    document, positions = _composed(source, text)
    return document, lambda error: _placed(error, positions)


def _read(path: str | os.PathLike[str]) -> tuple[Any, Positions]:
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([Problem(source, "", f"cannot read file: {exc.strerror}")]) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError([Problem(source, "", "cannot read file: not UTF-8 text")]) from exc
    return _composed(source, text)


def _composed(source: str, text: str) -> tuple[Any, Positions]:
    try:
        return compose(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line, column = (mark.line + 1, mark.column + 1) if mark else (None, None)
        detail = getattr(exc, "problem", None) or "unreadable"
        raise ConfigError([syntax_problem(source, "YAML", detail, line, column)]) from exc


def _placed(error: ConfigError, positions: Positions) -> ConfigError:
    """`error` with each problem at its `file:line:column`, in the file's order (a problem
    without a position keeps its place after those that have one)."""
    placed = [positions.place(problem) for problem in error.problems]
    return ConfigError(sorted(placed, key=_file_order))


def _file_order(problem: Problem) -> tuple[float, float]:
    if problem.line is None:
        return (float("inf"), float("inf"))
    return (problem.line, problem.column if problem.column is not None else 0)


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
    credentials = parse_credentials(_credentials_section(document), report, lookup)
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
        failed = {str(e.path[2]) for e in errors if len(e.path) > 2}
        entry = _entry(index, raw, failed, lookup, report, credentials)
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
    placeholders = placeholder_index(entries, report, source)
    state = parse_state(document, report, lookup)
    approvals = parse_approvals(document, report, lookup)
    if problems:
        raise ConfigError(problems)
    report_only = isinstance(network, dict) and network.get("report_only") is True
    return NetworkConfig(
        source,
        tuple(entries),
        report_only=report_only,
        secrets_resolved=resolve_secrets,
        placeholders=placeholders,
        secret_files=referenced_files(allowlist) + credential_files(_credentials_section(document)),
        credentials=credentials or NO_CREDENTIALS,
        state=state,
        approvals=approvals,
    )


def _credentials_section(document: Any) -> Any:
    """The top-level `credentials:` beside `network:` (docs/configuration.md#credentials)."""
    if isinstance(document, dict) and "network" not in document:
        document = document.get("environment")
    return document.get("credentials") if isinstance(document, dict) else None


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
    index: int,
    raw: Any,
    failed: set[str],
    environ: Mapping[str, str] | None,
    report: Report,
    credentials: Definitions | None,
) -> Entry | None:
    """The domain checks of one entry whose fields `failed` the schema already."""
    where = f"network.allowlist[{index}]"
    if not isinstance(raw, dict) or "domain" in failed:
        return None
    try:
        base = parse_pattern(raw["domain"])
    except ValueError as exc:
        report(f"{where}.domain", f"{exc} (got {shown(raw['domain'], 200)})")
        return None
    transform: tuple[Transform, ...] | None = ()
    if "transform" not in failed:
        transform = parse_transform(
            raw.get("transform"), f"{where}.transform", environ, report, used_names(credentials)
        )
    secrets: tuple[Placeholder, ...] | None = ()
    if "secrets" not in failed:
        resolver = _resolver(environ, report, credentials)
        secrets = parse_secrets(raw.get("secrets"), f"{where}.secrets", resolver, report)
    binding: Binding | None = None
    if "credential" in raw and "credential" not in failed:
        binding = parse_binding(raw["credential"], f"{where}.credential", credentials, report)
        failed = failed | ({"credential"} if binding is None else set())
    sigv4 = sigv4_binding(binding, f"{where}.credential", credentials, report)
    clauses: dict[str, Any] = {}
    parsed = True
    for clause in CLAUSES:
        if clause.parse is not None:
            ok, values = clause.parse(raw, where, report, frozenset(failed))
            parsed, clauses = parsed and ok, {**clauses, **values}
    refusals = list(combinations(raw, base, failed))
    for field_name, message in refusals:
        report(f"{where}.{field_name}", message)
    if failed or transform is None or secrets is None or refusals or sigv4 is False:
        return None
    if not parsed:
        return None
    ports = raw.get("ports")
    return Entry(
        index=index,
        pattern=base.text,
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
        credential=binding,
        sigv4=sigv4 or None,
        clauses=MappingProxyType(clauses),
    )


def _redactions(transform: tuple[Transform, ...], secrets: tuple[Placeholder, ...]) -> Redactor:
    values = [t.value for t in transform] + [p.value for p in secrets]
    found = {s for v in values for s in v.reveal_all() if len(s) >= MIN_REDACTED_LENGTH}
    return Redactor.build(tuple(s.encode() for s in found))


def _resolver(
    environ: Mapping[str, str] | None, report: Report, credentials: Definitions | None
) -> ResolveValue:
    """A placeholder value's resolution (`proxy.values.placeholders`): a transform's checks."""
    names = used_names(credentials)
    return lambda value, where: secret_value(value, where, environ, report, names)
