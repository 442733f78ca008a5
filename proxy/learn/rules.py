"""Rules the learning loop proposes: `rule_mismatch` audit lines become the methods and
paths to add to the entry that refused them (`egress-proxy propose`, docs/configuration.md
#learning-an-allowlist).

Pure: audit lines in, `RuleProposal`s out. A line counts when it names the deciding entry
(`rule`), a method and a `path` (audit lines carry it since issue 35).

Invariants:
* A proposed path is exactly a path seen, without its query, and a valid path pattern
  (`proxy.rules.path_pattern_problem`): one holding `*`, a masked or cut path, or any
  path a pattern could not say literally is counted, never proposed; so is a method
  outside the method registry.
* At most `MAX_PATHS` paths per entry and method, the most requested first; the rest
  is counted in a comment, never silently dropped.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sandbox_egress.proxy.audit.log import MASK
from sandbox_egress.proxy.clauses.rules import method_problem, path_pattern_problem

MAX_PATHS = 20


@dataclass(frozen=True)
class RuleProposal:
    entry: str  # the pattern of the entry that refused (its `domain`)
    method: str
    paths: tuple[str, ...]  # exact paths seen, most requested first
    count: int  # lines behind it
    more: int = 0  # paths beyond MAX_PATHS, not listed


@dataclass
class RuleFindings:
    seen: dict[tuple[str, str], Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    unusable: int = 0  # rule_mismatch lines whose path or method no rule can say literally


def take(line: Mapping[str, Any], found: RuleFindings) -> bool:
    """Record a `rule_mismatch` line; False when it is not one this module reads."""
    entry, method, target = line.get("rule"), line.get("method"), line.get("path")
    if line.get("reason") != "rule_mismatch" or not isinstance(entry, str) or not entry:
        return False
    if not isinstance(method, str) or not isinstance(target, str):
        return False  # a line from before issue 35: no path to propose
    path = target.partition("?")[0]
    unusable = MASK in path or "*" in path or path_pattern_problem(path) is not None
    if unusable or method_problem(method) is not None:
        found.unusable += 1
        return True
    found.seen[(entry, method)][path] += 1
    return True


def rule_proposals(found: RuleFindings) -> list[RuleProposal]:
    """One proposal per entry and method, the most requested first."""
    proposals = []
    for (entry, method), paths in found.seen.items():
        ranked = [p for p, _ in sorted(paths.items(), key=lambda kv: (-kv[1], kv[0]))]
        proposals.append(
            RuleProposal(
                entry,
                method,
                tuple(ranked[:MAX_PATHS]),
                sum(paths.values()),
                max(0, len(ranked) - MAX_PATHS),
            )
        )
    return sorted(proposals, key=lambda p: (p.entry, -p.count, p.method))


def unusable_note(found: RuleFindings) -> list[str]:
    """The comment (at the file's top) counting lines no rule could be proposed from."""
    if not found.unusable:
        return []
    return [
        f"# refused as rule_mismatch x{found.unusable}: a path or method no rule can say "
        "literally (a '*', a masked or cut path, an unknown method): not proposed"
    ]


def render_rules(proposals: list[RuleProposal]) -> list[str]:
    """Allowlist items (YAML lines at the allowlist's indentation): per entry, the rules to
    add to it, each a method and the exact paths seen."""
    out: list[str] = []
    by_entry: dict[str, list[RuleProposal]] = defaultdict(list)
    for proposal in proposals:
        by_entry[proposal.entry].append(proposal)
    for entry, items in by_entry.items():
        total = sum(p.count for p in items)
        out.append(f"    - domain: {json.dumps(entry)}  # {total} rule_mismatch")
        out.append("      # the entry exists: add these rules to its `rules`")
        out.append("      rules:")
        for p in items:
            out.append(f"        - methods: [{p.method}]  # {p.count} refused")
            out.append("          paths:")
            out += [f"            - {json.dumps(path)}" for path in p.paths]
            if p.more:
                out.append(f"            # and {p.more} more paths: a pattern may say them")
    return out
