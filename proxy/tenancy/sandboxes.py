"""The sandboxes of a node proxy (docs/configuration.md#sandboxes): the node file's
`sandboxes:` section, and one file per sandbox, `<id>.yaml`, in a watched directory.

A sandbox file holds `token` (proxy_auth), `class` (the one label metrics may carry),
`addresses` (source_address) and a `network` section parsed by `proxy.config.parse`, the
node's own entry parser, so every entry feature applies to sandboxes unchanged. Problems
name the sandbox file and the location inside it, like the node file's.

`SandboxDirectory.scan()` reads only the files whose identity (path, inode, size, mtime)
changed since the last scan and, when watched, has since stopped changing (D102: a file
rewritten in place is never read half-written): a new or changed valid file replaces that
sandbox, a removed file removes it, an invalid one keeps that sandbox's last good policy
(a new sandbox stays unknown) and is reported; the other sandboxes are untouched.

Invariants:
* A token is a `Secret`: no problem message, repr or log line shows it.
* A sandbox id is the file name without `.yaml`: letters, digits, `.`, `_`, `-` (never
  `:`, which would split a Basic credential). Hidden files (Kubernetes' `..data`) are not
  sandboxes.
* An address identifies at most one sandbox: a file claiming an address another sandbox
  holds is refused (the holder keeps it). Within what one sandbox sees, a placeholder names
  one secret: a sandbox file repeating the node's is refused; two sandbox files may bind
  the same placeholder, each to its own secret (D342, superseding D179's uniqueness).
* A sandbox file is read with a `Confined` lookup (D340): no `${NAME}`, and `${file:}`
  only its own files of `sandboxes.secrets` (`<id>/...` or `<id>.<name>`). The file itself
  is read only as a plain file of the directory (`read_sandbox_file`). Every refused file
  is kept with its problems (`refused`) for /status; no file, whatever a parser makes of
  it, stops the scan or the node (D341).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

from sandbox_egress.common.problems import Problem, schema_errors, schema_validator
from sandbox_egress.proxy.config.loader import (
    ConfigError,
    NetworkConfig,
    load,
    parse,
    read_document,
    read_placed,
)
from sandbox_egress.proxy.config.references import check_confined, resolve
from sandbox_egress.proxy.hosts import IPAddress
from sandbox_egress.proxy.tenancy.addresses import claims, parse_addresses, rivals
from sandbox_egress.proxy.tenancy.files import (
    MAX_SANDBOX_SECRET_BYTES,
    Confined,
    Unreadable,
    read_sandbox_file,
    references,
)
from sandbox_egress.proxy.values.placeholders import searchable
from sandbox_egress.proxy.values.secret import Secret

SUFFIX = ".yaml"
DEFAULT_CLASS = "default"
DEFAULT_MAX_CONNECTIONS = 512
MIN_TOKEN_LENGTH = 16
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


class Identify(StrEnum):
    """How a client connection is tied to a sandbox, tried in the configured order."""

    PROXY_AUTH = "proxy_auth"
    SOURCE_ADDRESS = "source_address"


@dataclass(frozen=True, slots=True)
class SandboxesSection:
    """The node file's `sandboxes:` section."""

    directory: Path
    identify: tuple[Identify, ...] = (Identify.PROXY_AUTH, Identify.SOURCE_ADDRESS)
    max_connections: int = DEFAULT_MAX_CONNECTIONS  # open client connections per sandbox
    # Where sandbox files' `${file:}` may read, each only its own `<id>/...` or `<id>.<name>`
    # (None: nowhere, D340).
    secrets: Path | None = None


@dataclass(frozen=True, slots=True)
class Sandbox:
    id: str
    network: NetworkConfig
    token: Secret | None = None
    sandbox_class: str = DEFAULT_CLASS
    addresses: frozenset[IPAddress] = frozenset()


def node_section(path: str | os.PathLike[str]) -> SandboxesSection | None:
    """The node file's `sandboxes:` section (None without one), or ConfigError."""
    return parse_section(read_document(path), str(path))


def parse_section(document: Any, source: str) -> SandboxesSection | None:
    if not isinstance(document, dict) or document.get("sandboxes") is None:
        return None
    raw = document["sandboxes"]
    found = schema_errors(schema_validator("egress-sandbox", "sandboxes"), raw)
    if found:
        raise ConfigError([Problem(source, _where("sandboxes", f.path), f.message) for f in found])
    directory = _beside(Path(raw["directory"]), source)
    secrets = _beside(Path(raw["secrets"]), source) if raw.get("secrets") else None
    identify = tuple(Identify(i) for i in raw.get("identify", [i.value for i in Identify]))
    bound = raw.get("max_connections", DEFAULT_MAX_CONNECTIONS)
    return SandboxesSection(directory, identify, bound, secrets)


def _beside(path: Path, source: str) -> Path:
    """A directory of the section: relative to the node file, like a mounted volume."""
    return path if path.is_absolute() else Path(source).resolve().parent / path


def sandbox_id(path: Path) -> str | None:
    """The sandbox a file of the directory defines, or None when it defines none."""
    if path.name.startswith(".") or path.suffix != SUFFIX:
        return None
    return path.stem if _ID.fullmatch(path.stem) else None


def load_sandbox(
    path: Path,
    files: Path | None = None,
    *,
    secrets: bool = True,
    node: frozenset[bytes] = frozenset(),
) -> Sandbox:
    """The sandbox file at `path`, or ConfigError with every problem found; `files` is the
    node's `sandboxes.secrets`; `secrets=False` checks references without looking them up
    (the DNS responder's, D83)."""
    found = sandbox_id(path)
    if found is None:
        message = "a sandbox file is named <id>.yaml, id of letters, digits, '.', '_', '-'"
        raise ConfigError([Problem(str(path), "", message)])
    try:
        text = read_sandbox_file(path)
    except Unreadable as exc:
        raise ConfigError([Problem(str(path), "", f"cannot read file: {exc}")]) from None
    document, placed = read_placed(str(path), text)
    try:
        return parse_sandbox(document, str(path), found, files, secrets=secrets, node=node)
    except ConfigError as exc:
        raise placed(exc) from None


def parse_sandbox(
    document: Any,
    source: str,
    sandbox: str,
    files: Path | None = None,
    *,
    secrets: bool = True,
    node: frozenset[bytes] = frozenset(),
) -> Sandbox:
    """One sandbox file's document; its references resolved by a `Confined` lookup (no
    variable, only its own files of `files`, D340); a placeholder of `node` (the node
    file's) repeated is refused (D342)."""
    confined = Confined(sandbox, files)
    environ: Mapping[str, str] = confined if secrets else {}
    problems = [
        Problem(source, _where("", f.path), f.message)
        for f in schema_errors(schema_validator("egress-sandbox"), document)
    ]
    if not isinstance(document, dict):
        raise ConfigError(problems)
    network: NetworkConfig | None = None
    try:
        network = parse(
            {"network": document.get("network")}, source, environ, resolve_secrets=secrets
        )
    except ConfigError as exc:
        problems.extend(exc.problems)

    def report(location: str, message: str) -> None:
        problems.append(Problem(source, location, message))

    token = _token(document.get("token"), environ, report) if secrets else None
    if not secrets:  # what resolving would refuse, said without opening a file
        for where, value in references(document):
            check_confined(value, where, confined, report)
    addresses = parse_addresses(document.get("addresses"), report)
    if network is not None:
        problems.extend(_repeats(network, source, node))
        held = sum(len(value) for entry in network.allowlist for value in entry.redactions.secrets)
        if held > MAX_SANDBOX_SECRET_BYTES:  # each sandbox compiles its own matcher (D425)
            report(
                "network",
                f"its secret values total {held} bytes, more than {MAX_SANDBOX_SECRET_BYTES}",
            )
        elif secrets and not searchable(network.placeholders):  # RE2's size limit (D427)
            report("network", "its placeholders and secret values are too large to search")
    if problems or network is None:
        raise ConfigError(problems)
    sandbox_class = document.get("class", DEFAULT_CLASS)
    return Sandbox(sandbox, network, token, sandbox_class, addresses)


def _where(base: str, path: tuple[str | int, ...]) -> str:
    text = base
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _token(raw: Any, environ: Mapping[str, str], report: Any) -> Secret | None:
    if not isinstance(raw, str) or not raw:
        return None  # absent, or refused by the schema
    resolved = resolve(raw, "token", environ, report)
    if resolved is None:
        return None
    value, parts = resolved
    if len(value) < MIN_TOKEN_LENGTH or any(c in value for c in ":\r\n\0"):
        report("token", f"must be at least {MIN_TOKEN_LENGTH} characters, without ':', CR, LF, NUL")
        return None
    return Secret(value, parts)


# -- the watched directory -----------------------------------------------------------------

Fingerprint = tuple[int, int, int, int]


def _fingerprint(path: Path) -> Fingerprint | None:
    """What changes when the file, or what its symlinks lead to, is replaced or written
    (a Kubernetes volume swaps `..data`: the file reached has another inode)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class Steadiness(Protocol):
    """Whether a changed file has stopped changing (`runtime.lifecycle.Settling`, D102)."""

    def settled(self, key: str, seen: Fingerprint | None) -> bool: ...

    def forget(self, key: str) -> None: ...


@dataclass(frozen=True, slots=True)
class Scan:
    """What one scan changed: ids whose policy changed or vanished, and the problems."""

    changed: frozenset[str] = frozenset()
    removed: frozenset[str] = frozenset()
    problems: tuple[Problem, ...] = ()


@dataclass
class SandboxDirectory:
    """The sandboxes of one directory, each its last good file; `scan()` brings it up to date."""

    directory: Path
    files: Path | None = None  # the node's `sandboxes.secrets` (D340)
    secrets: bool = True  # False: tokens and transform values are checked, never looked up
    sandboxes: dict[str, Sandbox] = field(default_factory=dict)
    _seen: dict[str, Fingerprint | None] = field(default_factory=dict)
    # ids whose current file is refused, with why (for /status, D341)
    _refused: dict[str, tuple[Problem, ...]] = field(default_factory=dict)
    _pending: set[str] = field(default_factory=set)  # ids whose file is still changing
    # The node file's placeholders: no sandbox file may repeat one (D342; `Tenants` sets it).
    node_placeholders: frozenset[bytes] = frozenset()

    def scan(self, steady: Steadiness | None = None) -> Scan:
        """Bring the sandboxes up to date with the directory. With `steady` (the watch), a
        new or changed file is read only once it has stopped changing: until then its
        sandbox keeps its last good policy. Without (start, SIGHUP), at once."""
        try:
            names = sorted(os.listdir(self.directory))
        except OSError as exc:
            problem = Problem(str(self.directory), "", f"cannot list: {exc.strerror}")
            return Scan(problems=(problem,))  # every sandbox keeps its policy
        present: dict[str, Path] = {}
        for name in names:
            found = sandbox_id(Path(name))
            if found is not None:
                present[found] = self.directory / name
        removed = frozenset(set(self._seen) - set(present))
        for gone in removed | (set(self._pending) - set(present)):
            self._pending.discard(gone)
            if steady is not None:
                steady.forget(gone)
        for gone in removed:
            self._seen.pop(gone, None)
            self._refused.pop(gone, None)
            self.sandboxes.pop(gone, None)
        changed: set[str] = set()
        problems: list[Problem] = []
        holders = {a: s.id for s in self.sandboxes.values() for a in s.addresses}
        loaded: list[tuple[str, Path, Sandbox]] = []  # read now; claims judged together
        for sandbox, path in present.items():
            identity = _fingerprint(path)
            if sandbox in self._seen and self._seen[sandbox] == identity:
                continue
            if steady is not None and not steady.settled(sandbox, identity):
                self._pending.add(sandbox)  # changing: read at a later scan, once settled
                continue
            self._pending.discard(sandbox)
            self._seen[sandbox] = identity
            try:
                fresh = load_sandbox(
                    path, self.files, secrets=self.secrets, node=self.node_placeholders
                )
            except ConfigError as exc:
                problems.extend(exc.problems)
                self._refused[sandbox] = tuple(exc.problems)
                continue
            except Exception as exc:  # no file may stop the scan, nor the node (D341)
                unread = Problem(str(path), "", _unreadable(exc))
                problems.append(unread)
                self._refused[sandbox] = (unread,)
                continue
            loaded.append((sandbox, path, fresh))
        contested = rivals({f.id: (p, f.addresses) for _, p, f in loaded}, holders)
        for sandbox, path, fresh in loaded:
            claimed = contested.get(sandbox) or claims(fresh.id, fresh.addresses, path, holders)
            if claimed:
                problems.extend(claimed)
                self._refused[sandbox] = tuple(claimed)
                continue
            self._refused.pop(sandbox, None)
            old = self.sandboxes.get(sandbox)
            for address in old.addresses if old is not None else ():
                holders.pop(address, None)
            holders.update(dict.fromkeys(fresh.addresses, sandbox))
            self.sandboxes[sandbox] = fresh
            changed.add(sandbox)
        return Scan(frozenset(changed), removed, tuple(problems))

    @property
    def invalid(self) -> frozenset[str]:
        return frozenset(self._refused)

    def refused(self) -> dict[str, tuple[Problem, ...]]:
        """Each sandbox whose current file is refused, with the problems found (never a
        secret value: problems name keys, variables and paths only)."""
        return dict(self._refused)


def _unreadable(exc: Exception) -> str:
    """What a parser failure other than a refusal says (its type only, never its text,
    which could quote the file)."""
    if isinstance(exc, RecursionError):
        return "cannot be read: nested too deeply"
    return f"cannot be read: {type(exc).__name__}"


def _repeats(network: NetworkConfig, source: str, node: frozenset[bytes]) -> list[Problem]:
    """Within what one sandbox sees (the node file and its own), a placeholder names one
    secret (D342): a sandbox file repeating the node's would not tell whose key a request
    carries. Another sandbox's file may use the same one (each swapped from its own)."""
    problems = []
    for entry in network.allowlist:
        for number, secret in enumerate(entry.secrets):
            if secret.placeholder.encode() in node:
                where = f"network.allowlist[{entry.index}].secrets[{number}].placeholder"
                message = "placeholder already used by the node file"
                problems.append(Problem(source, where, message))
    return problems


def check_node(
    path: str | os.PathLike[str], *, secrets: bool = True, node: NetworkConfig | None = None
) -> int | None:
    """`egress-proxy check`: the node's `sandboxes:` section and every file of its directory;
    the number of sandbox files (None without the section), or ConfigError with every problem.
    `secrets=False` checks tokens and transform values without looking them up."""
    section = node_section(path)
    if section is None:
        return None
    node = load(path, secrets=secrets) if node is None else node
    directory = SandboxDirectory(section.directory, section.secrets, secrets=secrets)
    directory.node_placeholders = frozenset(node.placeholders.owners)
    found = directory.scan()
    if found.problems:
        raise ConfigError(list(found.problems))
    return len(directory.sandboxes)
