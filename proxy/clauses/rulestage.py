"""The rules stage (docs/configuration.md#rules, docs/configuration.md#git-over-https):
an allowed request's method, path and query against its entry's `rules` and `deny`, a
smart-HTTP git request against its `git`, and, for a sandbox, the same against its node's
entry (the node's ceiling, D148, D174). Pure, like `proxy.stages`, which calls it once
per request (`decide_request`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sandbox_egress.proxy.clauses.base import Deciding, Fields, Head, Report, Ruling
from sandbox_egress.proxy.clauses.git import PushItem, judge_git, parse_git, smart_http
from sandbox_egress.proxy.clauses.rules import (
    NO_RULES,
    Verdict,
    judge,
    override_methods,
    parse_rules,
)
from sandbox_egress.proxy.decision import Decision, Reason, bounded
from sandbox_egress.proxy.paths import canonical_path, split_target
from sandbox_egress.proxy.targets import Location


def parse(
    raw: Mapping[str, Any], where: str, report: Report, failed: frozenset[str]
) -> tuple[bool, dict[str, Any]]:
    """The clause's keys: `rules` and `deny` (`proxy.clauses.rules`), `git`
    (`proxy.clauses.git`); one the schema refused is not parsed again."""
    rules = None if failed & {"rules", "deny"} else parse_rules(dict(raw), where, report)
    git_ok, git = (
        (False, None) if "git" in failed else parse_git(raw.get("git"), f"{where}.git", report)
    )
    return rules is not None and git_ok, {"rules": rules or NO_RULES, "git": git}


def head(ask: Head) -> Ruling:
    """The head rule: the entry's (and its node's) rules and git; the part is the push
    items a receive-pack's command list must then match (`addons.clauses.rules`)."""
    decision, pushes = rules_within_ceiling(
        ask.policy, ask.decision, ask.located, ask.method, ask.fields, ask.https
    )
    return Ruling(decision, pushes or None)


def decide_rules(
    policy: Deciding, decision: Decision, method: str, target: str, overrides: tuple[str, ...] = ()
) -> tuple[Decision, PushItem | None]:
    """The rules stage (docs/configuration.md#rules, docs/configuration.md#git-over-https):
    a smart-HTTP git request against its entry's `git`, any other allowed request's
    method, path and query against its `rules` and `deny`; the decision names the
    clause that decided. A push allowed by repository comes with the item its command
    list must then match.

    An ambiguous path is `bad_request` (never reported through); a rule refusal is
    reportable like allowlist membership (report-only lets it through as `would_deny`).
    """
    entry = decision.entry
    if not decision.allowed or entry is None:
        return decision, None
    if entry.git is not None and canonical_path(split_target(target)[0]) is None:
        return Decision.deny(Reason.BAD_REQUEST, entry), None  # no push hides in a spelling
    git = smart_http(method, target) if entry.git is not None else None
    if entry.git is not None and git is not None:
        verdict, clause, item = judge_git(entry.git, git)
        if verdict is Verdict.ALLOW:
            return decision.with_clause(clause), item if git.rpc else None
        if verdict is Verdict.PUSH_DENIED:
            return Decision.deny(Reason.GIT_PUSH_DENIED, entry, clause), None
        return policy.reported(Decision.deny(Reason.RULE_MISMATCH, entry, clause)), None
    if not entry.rules.active:
        return decision, None
    verdict, clause = judge(entry.rules, method, target, overrides)
    if verdict is Verdict.ALLOW:
        return decision.with_clause(clause), None
    if verdict is Verdict.AMBIGUOUS:
        return Decision.deny(Reason.BAD_REQUEST, entry), None
    reason = Reason.RULE_DENIED if verdict is Verdict.DENIED else Reason.RULE_MISMATCH
    return policy.reported(Decision.deny(reason, entry, clause)), None


def rules_within_ceiling(
    policy: Deciding,
    decision: Decision,
    located: Location,
    method: str,
    fields: Fields,
    https: bool,
) -> tuple[Decision, tuple[PushItem, ...]]:
    """The rules stage of the deciding policy and, for a sandbox, of its node: the node's
    entry's `rules`, `deny` and `git` are a ceiling too (`proxy.tenancy.bounded`). The
    node's decision of the host is the one the sandbox's `decide` made (`Decision.node`)."""
    path, over = located.path, override_methods(fields)
    decision, push = decide_rules(policy, decision, method, path, over)
    pushes = () if push is None else (push,)
    node = policy.ceiling()
    if node is None or not decision.allowed:
        return decision, pushes
    ceiling = decision.node or node.decide(located.host, located.port, tls=https)
    judged, node_push = decide_rules(node, ceiling, method, path, over)
    combined = bounded(judged, decision)
    if not combined.allowed:
        return combined, ()
    return combined, pushes if node_push is None else (*pushes, node_push)
