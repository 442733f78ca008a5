"""Allowlists other sandboxes already have, as an environment file (`egress-proxy import`).

* sandbox-runtime (`@anthropic-ai/sandbox-runtime`, its settings JSON):
  `{"network": {"allowedDomains": [...], "deniedDomains": [...]}}`;
* Codex (`config.toml` permission profiles): `[permissions.NAME.network.domains]` whose
  keys are domains and values `"allow"` or `"deny"`; the profile `default_permissions`
  names, else every profile.

Both write the same patterns (`example.com`, `*.example.com`). The allowlist has no deny
entry, so a denied domain is dropped from the allowed ones when it is one of them, and
otherwise named in a comment of the output (it stays allowed by a wildcard). What the
allowlist can never hold (loopback names and addresses) and what is not the egress proxy's
to decide (sandbox-runtime's local sockets and local binding) become comments too, so the
output always passes `egress-proxy check`. A Codex `config.toml` from before permission
profiles (`sandbox_mode`) has nothing to import: full network gets a starting allowlist,
no network an empty one.

Invariant: only domains and key names are copied; nothing else of the source file is
written (these files can hold credentials, e.g. Codex's `env` tables).
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from typing import Any

from sandbox_egress.proxy.config.patterns import parse_pattern

FORMATS = ("sandbox-runtime", "codex")
_LOOPBACK = " (a service the sandbox needs on loopback runs inside the sandbox)"


class ImportRefused(ValueError):
    """The file is not of the format asked for; the message says what is missing."""


@dataclass(frozen=True, slots=True)
class Imported:
    allowed: tuple[str, ...]
    notes: tuple[str, ...] = ()


def read(kind: str, text: str) -> Imported:
    """The allowlist in `text`, a file of format `kind` (one of FORMATS)."""
    if kind == "sandbox-runtime":
        return _sandbox_runtime(_json(text))
    if kind == "codex":
        return _codex(_toml(text))
    raise ImportRefused(f"unknown format {kind!r}; one of {', '.join(FORMATS)}")


def as_environment_file(imported: Imported, source: str, kind: str) -> str:
    """YAML for `egress-proxy check`/`run`: bare domain strings, notes as comments."""
    lines = [f"# Imported from {source} ({kind}) by `egress-proxy import`."]
    lines += [f"# {note}" for note in imported.notes]
    lines += ["network:", "  allowlist:" + ("" if imported.allowed else " []")]
    lines += [f"    - {json.dumps(domain)}" for domain in imported.allowed]
    return "\n".join(lines) + "\n"


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ImportRefused(f"line {exc.lineno}, column {exc.colno}: not valid JSON") from None


def _toml(text: str) -> Any:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ImportRefused(f"not valid TOML: {exc}") from None


def _strings(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ImportRefused(f"{where} must be a list of domain strings")
    return value


# A starting point for a sandbox that had the whole network: the hosts agents' tools reach
# first (source hosting, package indexes). Pruned by the operator, grown by `propose`.
STARTER = (
    "github.com",
    "api.github.com",
    "*.githubusercontent.com",
    "pypi.org",
    "files.pythonhosted.org",
    "registry.npmjs.org",
    "crates.io",
    "static.crates.io",
    "proxy.golang.org",
)


def _sandbox_runtime(document: Any) -> Imported:
    network = document.get("network") if isinstance(document, dict) else None
    if not isinstance(network, dict) or "allowedDomains" not in network:
        raise ImportRefused("no network.allowedDomains: not a sandbox-runtime settings file")
    allowed = _strings(network.get("allowedDomains"), "network.allowedDomains")
    denied = _strings(network.get("deniedDomains"), "network.deniedDomains")
    imported = _subtract(allowed, denied)
    notes: list[str] = []
    sockets = network.get("allowUnixSockets")
    if sockets:
        notes.append(
            f"allowUnixSockets {sockets!r}: a local socket never passes the egress proxy; "
            "nothing to import (the sandbox's mounts decide what it can reach)"
        )
    if network.get("allowLocalBinding"):
        notes.append(
            "allowLocalBinding: listening on a local port is the sandbox's own business, not "
            "the egress proxy's; nothing to import"
        )
    return Imported(imported.allowed, (*imported.notes, *notes))


def _codex(document: Any) -> Imported:
    profiles = document.get("permissions") if isinstance(document, dict) else None
    if not isinstance(profiles, dict) and isinstance(document, dict) and "sandbox_mode" in document:
        return _codex_legacy(document)
    if not isinstance(profiles, dict):
        raise ImportRefused("no [permissions.NAME.network.domains]: not a Codex config.toml")
    chosen = document.get("default_permissions")
    names = [chosen] if isinstance(chosen, str) and chosen in profiles else sorted(profiles)
    allowed: list[str] = []
    denied: list[str] = []
    for name in names:
        profile = profiles[name]
        network = profile.get("network") if isinstance(profile, dict) else None
        domains = network.get("domains") if isinstance(network, dict) else None
        for domain, verdict in (domains if isinstance(domains, dict) else {}).items():
            (allowed if verdict == "allow" else denied).append(domain)
    if not allowed and not denied:
        raise ImportRefused("no [permissions.NAME.network.domains]: not a Codex config.toml")
    return _subtract(allowed, denied)


def _codex_legacy(document: dict[str, Any]) -> Imported:
    """A config.toml of `sandbox_mode` (before permission profiles): all or nothing."""
    mode = document.get("sandbox_mode")
    settings = document.get("sandbox_workspace_write")
    network = isinstance(settings, dict) and settings.get("network_access") is True
    learn = "prune it, and learn the rest with report-only and `egress-proxy propose`"
    if mode == "danger-full-access":
        said = f"sandbox_mode {mode!r}"
    elif mode == "workspace-write" and network:
        said = f"sandbox_mode {mode!r} with network_access = true"
    else:
        why = "without network_access" if mode == "workspace-write" else ""
        said = f"sandbox_mode {mode!r} {why}".strip()
        empty = f"this config.toml gives the sandbox no network ({said}): an empty allowlist"
        return Imported((), (empty,))
    return Imported(
        STARTER,
        (
            f"this config.toml gives the sandbox the full network ({said}): nothing to "
            f"import. Below is a starting allowlist: {learn}",
        ),
    )


def _subtract(allowed: list[str], denied: list[str]) -> Imported:
    kept: list[str] = []
    notes: list[str] = []
    for domain in dict.fromkeys(d.strip().lower() for d in allowed):
        try:
            parse_pattern(domain)
        except ValueError as exc:
            notes.append(f"{domain}: left out: {exc}{_LOOPBACK if 'loopback' in str(exc) else ''}")
        else:
            kept.append(domain)
    for domain in dict.fromkeys(d.strip().lower() for d in denied):
        if domain in kept:
            kept.remove(domain)
            notes.append(f"denied {domain}: left out")
        else:
            notes.append(
                f"denied {domain}: not expressible (the allowlist has no deny entry); "
                "check that no wildcard above allows it"
            )
    return Imported(tuple(kept), tuple(notes))
