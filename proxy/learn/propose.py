"""The learning loop: turn refused and `would_deny` audit lines into a proposed allowlist
(`egress-proxy propose`, docs/configuration.md#learning-an-allowlist, docs/decisions.md D116).

Pure: audit lines (parsed JSON objects) in, `Proposal`s out, then YAML text. Only the
refusals an allowlist entry could lift are read: `not_allowlisted` (a new entry) and
`port_not_allowed` (a port for the entry that refused it), refused or reported
(`would_deny`), and `rule_mismatch` (rules for the entry that refused it,
`proxy.learn.rules`). Every other refusal (loopback, internal addresses, fronting, placeholders
sent elsewhere, ...) is a finding, never a proposal; it is only counted.

Invariants:
* Never proposed: a loopback, unspecified, private, link-local, metadata or otherwise
  non-public address, nor a loopback or metadata name. Those are counted as refused.
* A proposal names exactly what was seen (the host, the ports seen) unless
  `wildcards=True` groups two or more sibling names under `*.parent`, and that proposal
  is flagged as broader than what was seen, with the names it stands for. A parent that
  is a public suffix (the Public Suffix List: `github.io`, `co.uk`) is never grouped
  under: its names stay as seen (D177).
* The output is valid YAML for `egress-proxy check` (a `network.allowlist`); counts and
  flags are comments.
"""

from __future__ import annotations

import ipaddress
import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from publicsuffixlist import PublicSuffixList

from sandbox_egress.proxy.addresses import AddressClass, classify
from sandbox_egress.proxy.hosts import HostError, canonical_host
from sandbox_egress.proxy.learn.rules import (
    RuleFindings,
    render_rules,
    rule_proposals,
    take,
    unusable_note,
)

PROPOSABLE = frozenset({"not_allowlisted", "port_not_allowed"})
NEVER_NAMES = frozenset({"localhost", "localhost.localdomain", "metadata.google.internal"})


@dataclass(frozen=True)
class Proposal:
    domain: str
    ports: tuple[int, ...]
    refused: int  # lines refused
    reported: int  # lines reported (would_deny)
    extends: bool = False  # the entry exists: these ports are to be added to it
    covers: tuple[str, ...] = ()  # a wildcard: the names seen that it stands for


@dataclass
class Findings:
    """What the lines held besides proposals."""

    lines: int = 0  # lines read (after the sandbox filter)
    unreadable: int = 0
    never: Counter[str] = field(default_factory=Counter)  # internal/loopback hosts skipped
    other: Counter[str] = field(default_factory=Counter)  # refusals no entry can lift
    rules: RuleFindings = field(default_factory=RuleFindings)  # rule_mismatch lines
    # `--wildcards`: siblings not grouped because their parent is a public suffix (D177).
    public: Counter[str] = field(default_factory=Counter)


@dataclass
class _Seen:
    ports: set[int] = field(default_factory=set)
    refused: int = 0
    reported: int = 0
    extends: bool = False


def parse_lines(text: Iterable[str], findings: Findings) -> list[dict[str, Any]]:
    """JSON objects of the audit log; a line that is not one is counted, not fatal."""
    lines: list[dict[str, Any]] = []
    for raw in text:
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except ValueError:
            findings.unreadable += 1
            continue
        if isinstance(line, dict):
            lines.append(line)
        else:
            findings.unreadable += 1
    return lines


def propose(
    lines: Iterable[Mapping[str, Any]],
    findings: Findings,
    sandbox: str | None = None,
    wildcards: bool = False,
) -> list[Proposal]:
    """The proposals, most requested first. `sandbox`: only that sandbox's lines."""
    seen: dict[str, _Seen] = defaultdict(_Seen)
    for line in lines:
        if sandbox is not None and line.get("sandbox") != sandbox:
            continue
        findings.lines += 1
        decision, reason = line.get("decision"), str(line.get("reason", ""))
        if decision not in ("deny", "would_deny") or not reason:
            continue
        if reason not in PROPOSABLE:
            if not take(line, findings.rules):
                findings.other[reason] += 1
            continue
        domain, extends = _domain(line)
        if domain is None:
            findings.never[str(line.get("host", ""))[:255]] += 1
            continue
        entry = seen[domain]
        entry.extends = entry.extends or extends
        if decision == "would_deny":
            entry.reported += 1
        else:
            entry.refused += 1
        port = line.get("port")
        if isinstance(port, int) and 1 <= port <= 65535:
            entry.ports.add(port)
    proposals = [
        Proposal(d, tuple(sorted(s.ports)), s.refused, s.reported, s.extends)
        for d, s in seen.items()
    ]
    if wildcards:
        proposals = _grouped(proposals, findings)
    return sorted(proposals, key=lambda p: (-(p.refused + p.reported), p.domain))


def _domain(line: Mapping[str, Any]) -> tuple[str | None, bool]:
    """(the entry a line asks for, whether it extends an existing one); None: never."""
    rule = line.get("rule")
    if line.get("reason") == "port_not_allowed" and isinstance(rule, str) and rule:
        return (None if rule == "*" else rule), True
    try:
        host = canonical_host(str(line.get("host", "")))
    except HostError:
        return None, False
    if host.ip is not None:
        return (str(host.ip) if classify(host.ip) is AddressClass.PUBLIC else None), False
    name = host.name or ""
    if name in NEVER_NAMES or name.endswith(".localhost") or name == "metadata":
        return None, False
    return name, False


@cache
def _public_suffixes() -> PublicSuffixList:
    """The Public Suffix List as the `publicsuffixlist` package ships it (ICANN and private
    sections: `github.io` is public), read once, and only when `--wildcards` asks."""
    return PublicSuffixList()


def _parent(name: str) -> str | None:
    """The domain siblings of `name` share: at least two labels, never a wildcard."""
    labels = name.split(".")
    if len(labels) < 3 or name.startswith("*."):
        return None
    return ".".join(labels[1:])


def _is_address(domain: str) -> bool:
    try:
        ipaddress.ip_address(domain)
    except ValueError:
        return False
    return True


def _grouped(proposals: list[Proposal], findings: Findings) -> list[Proposal]:
    """Two or more new sibling names become one `*.parent`, flagged by what it covers,
    unless the parent is a public suffix (`*.github.io` is everyone's sites): those stay
    the names seen, counted in `findings.public`."""
    families: dict[str, list[Proposal]] = defaultdict(list)
    kept: list[Proposal] = []
    for proposal in proposals:
        parent = None if proposal.extends else _parent(proposal.domain)
        if parent is None or _is_address(proposal.domain):
            kept.append(proposal)
        else:
            families[parent].append(proposal)
    for parent, members in families.items():
        if len(members) < 2:
            kept += members
            continue
        if _public_suffixes().is_public(parent):
            findings.public[parent] += len(members)
            kept += members
            continue
        kept.append(
            Proposal(
                f"*.{parent}",
                tuple(sorted({p for m in members for p in m.ports})),
                sum(m.refused for m in members),
                sum(m.reported for m in members),
                covers=tuple(sorted(m.domain for m in members)),
            )
        )
    return kept


def render(proposals: list[Proposal], findings: Findings, source: str) -> str:
    """The proposals as an environment file, counts and flags as comments."""
    out = [f"# Proposed by `egress-proxy propose` from {source}: {findings.lines} audit lines."]
    out.append("# Review every entry before use: each one opens egress.")
    if findings.unreadable:
        out.append(f"# {findings.unreadable} lines were not JSON objects and were skipped.")
    for host, count in sorted(findings.never.items()):
        out.append(f"# never proposed (loopback, internal or metadata): {host!r} x{count}")
    for suffix, count in sorted(findings.public.items()):
        out.append(f"# not grouped under *.{suffix}: a public suffix, {count} names kept as seen")
    for reason, count in sorted(findings.other.items()):
        out.append(f"# refused as {reason} x{count}: no allowlist entry lifts it")
    out += unusable_note(findings.rules)
    rules = render_rules(rule_proposals(findings.rules))
    out += ["network:", "  allowlist:" if proposals or rules else "  allowlist: []"]
    out += rules
    for p in proposals:
        counts = [f"{p.refused} refused"] if p.refused else []
        counts += [f"{p.reported} would_deny"] if p.reported else []
        out.append(f"    - domain: {json.dumps(p.domain)}  # {', '.join(counts)}")
        if p.ports:
            out.append(f"      ports: [{', '.join(map(str, p.ports))}]")
        if p.extends:
            out.append("      # the entry exists: add these ports to it")
        if p.covers:
            out.append(f"      # BROADER than seen: any name under {p.domain[2:]}; seen:")
            out += [f"      #   {name}" for name in p.covers]
    return "\n".join(out) + "\n"
