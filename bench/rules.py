"""Scenario 2b: the cost of an entry's rules per request (docs/configuration.md#rules).

One request is decided as the request stage decides it, without the network: the
name stage (`Policy.decide`) and then the rules stage (`proxy.rulestage.decide_rules`,
the path canonicalised and matched). Three entries in the same run: one without rules
(the baseline), one with 50 rules whose last one admits the request (the longest
allow), and the same 50 rules with a request none admits (`rule_mismatch`). Each rule
has methods and two path patterns with `*` and `**`, like an API's allowlist.

Timing as `bench.decide`: calibrated loops, the collector off, rotated rounds; the
report is the median, with the added cost over the entry without rules.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from bench.decide import _calibrate, _time_ns
from sandbox_egress.proxy.clauses.rulestage import decide_rules
from sandbox_egress.proxy.config.loader import parse
from sandbox_egress.proxy.decision import Decision, Reason
from sandbox_egress.proxy.hosts import canonical_host
from sandbox_egress.proxy.policy import Policy

RULES = 50
TARGET = "/repos/acme/web/issues/42/comments?per_page=100"


def _policy() -> Policy:
    rules = [
        {"methods": ["GET", "POST"], "paths": [f"/area{i}/*/items", f"/area{i}/**/detail"]}
        for i in range(RULES - 1)
    ]
    rules.append({"methods": ["POST"], "paths": ["/repos/acme/*/issues/**"]})
    document = {
        "network": {
            "allowlist": [
                {"domain": "plain.example"},
                {"domain": "ruled.example", "rules": rules,
                 "deny": [{"paths": ["/user/keys", "/user/keys/**"]}]},
            ]
        }
    }  # fmt: skip
    return Policy(parse(document, "bench-rules", {}))


def _operations() -> dict[str, Callable[[], object]]:
    policy = _policy()
    cases = {
        "no rules": ("plain.example", "POST", Reason.ALLOWLISTED),
        f"{RULES} rules, the last admits": ("ruled.example", "POST", Reason.ALLOWLISTED),
        f"{RULES} rules, none admits": ("ruled.example", "DELETE", Reason.RULE_MISMATCH),
    }
    ops: dict[str, Callable[[], object]] = {}
    for label, (name, method, expected) in cases.items():
        host = canonical_host(name)

        def decide(host: Any = host, method: str = method) -> tuple[Decision, object]:
            return decide_rules(policy, policy.decide(host, 443, tls=True), method, TARGET)

        decision, _ = decide()
        if decision.reason is not expected:
            raise RuntimeError(f"{label}: {decision}")
        ops[label] = decide
    return ops


def measure(rounds: int = 7) -> dict[str, Any]:
    ops = _operations()
    keys = list(ops)
    loops = {key: _calibrate(op) for key, op in ops.items()}
    samples: dict[str, list[float]] = {key: [] for key in keys}
    for round_number in range(rounds):
        shift = round_number % len(keys)
        for key in keys[shift:] + keys[:shift]:
            samples[key].append(_time_ns(ops[key], loops[key]))
    base = statistics.median(samples[keys[0]])
    return {
        "rounds": rounds,
        "rules": RULES,
        "cases": [
            {
                "case": key,
                "ns": statistics.median(samples[key]),
                "min_ns": min(samples[key]),
                "max_ns": max(samples[key]),
                "added_ns": statistics.median(samples[key]) - base,
            }
            for key in keys
        ],
    }


def lines(section: dict[str, Any], grid: Callable[..., list[str]]) -> list[str]:
    header = ["request decided (name + rules stage)", "median", "added over no rules"]
    rows = [
        [c["case"], f"{c['ns'] / 1000:.2f} us", f"{c['added_ns'] / 1000:+.2f} us"]
        for c in section["cases"]
    ]
    return [
        "",
        f"Scenario 2b: an entry's rules per request (median of {section['rounds']} rounds)",
        *grid(header, rows),
    ]
