"""Generated allowlists: one policy, written for egress-proxy (YAML) and for squid.

Shape of an allowlist of `size` entries (the proportions hold for every size):
* one CIDR entry opening the upstream's range (198.18.0.0/15 is reserved, so names
  resolving there are refused without it);
* 10 % with a `transform` (an `Authorization` from its own environment variable),
  half exact names, half wildcards;
* of the rest, two thirds exact names and one third wildcards.

The host under test (`TARGET`) is an exact entry with a transform and
`allow_plaintext`, so the header is injected over plain HTTP too; `HOOK_HOST` and
`BULK_HOST` are plain exact entries.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

TARGET = "api-0000.tx.bench.test"
HOOK_HOST = "hook.bench.test"
BULK_HOST = "bulk.bench.test"
CHAT_HOST = "chat.bench.test"  # scenario 13's model server (bench/llmcost.py)
NOT_LISTED = "nope.unlisted.example"
UPSTREAM_CIDR = "198.18.77.0/24"


@dataclass(frozen=True)
class Rule:
    pattern: str  # "name", "*.suffix" or a CIDR
    token_env: str | None = None  # the transform's variable, if any
    allow_plaintext: bool = False


@dataclass
class Allowlist:
    rules: list[Rule]
    environ: dict[str, str] = field(default_factory=dict)  # the transforms' variables

    def __len__(self) -> int:
        return len(self.rules)

    def document(self) -> dict[str, Any]:
        """The environment file egress-proxy reads."""
        entries: list[dict[str, Any]] = []
        for rule in self.rules:
            entry: dict[str, Any] = {"domain": rule.pattern}
            if rule.token_env:
                entry["transform"] = {"Authorization": f"Bearer ${{{rule.token_env}}}"}
            if rule.allow_plaintext:
                entry["allow_plaintext"] = True
            entries.append(entry)
        return {"network": {"allowlist": entries}}

    def authorization(self, host: str) -> str:
        """The header value the proxy must inject for `host` (an exact transform entry)."""
        for rule in self.rules:
            if rule.pattern == host and rule.token_env:
                return f"Bearer {self.environ[rule.token_env]}"
        raise KeyError(host)

    def squid_lines(self) -> list[str]:
        """The same policy as squid ACLs: names, wildcards, header replacement."""
        names = [_squid_domain(r.pattern) for r in self.rules if not _is_cidr(r.pattern)]
        lines = [
            f"acl allowlist dstdomain {' '.join(names[i : i + 50])}"
            for i in range(0, len(names), 50)
        ]
        transformed = [r for r in self.rules if r.token_env]
        if transformed:
            every = " ".join(_squid_domain(r.pattern) for r in transformed)
            lines.append(f"acl transformed dstdomain {every}")
            # Replace, never add to, whatever Authorization the client sent.
            lines.append("request_header_access Authorization deny transformed")
        for number, rule in enumerate(transformed):
            assert rule.token_env is not None
            lines.append(f"acl tx{number} dstdomain {_squid_domain(rule.pattern)}")
            value = f"Bearer {self.environ[rule.token_env]}"
            lines.append(f'request_header_add Authorization "{value}" tx{number}')
        return lines


def _is_cidr(pattern: str) -> bool:
    return "/" in pattern


def _squid_domain(pattern: str) -> str:
    # squid's ".suffix" also matches the bare suffix; no generated name is a bare suffix.
    return "." + pattern[2:] if pattern.startswith("*.") else pattern


def generate(size: int, extra_exact: tuple[str, ...] = ()) -> Allowlist:
    """An allowlist of `size` entries (at least 10) containing TARGET and `extra_exact`."""
    if size < 10:
        raise ValueError("size must be at least 10")
    rules = [Rule(UPSTREAM_CIDR)]
    environ: dict[str, str] = {}
    transforms = max(2, size // 10)
    for i in range(transforms):
        variable = f"BENCH_TOKEN_{i:05d}"
        environ[variable] = secrets.token_urlsafe(24)
        if i % 2 == 0:
            pattern = f"api-{i:04d}.tx.bench.test"
            rules.append(Rule(pattern, variable, allow_plaintext=pattern == TARGET))
        else:
            rules.append(Rule(f"*.txw-{i:04d}.bench.test", variable))
    for name in extra_exact:
        rules.append(Rule(name))
    i = 0
    while len(rules) < size:
        pattern = f"*.zone-{i:05d}.bench.test" if i % 3 == 2 else f"svc-{i:05d}.bench.test"
        rules.append(Rule(pattern))
        i += 1
    return Allowlist(rules, environ)


def sample_hosts(allowlist: Allowlist) -> dict[str, str]:
    """One host per decision path: exact entry, wildcard entry, not listed (middle of the list)."""
    exact = [r.pattern for r in allowlist.rules if r.pattern.startswith("svc-")]
    wild = [r.pattern for r in allowlist.rules if r.pattern.startswith("*.zone-")]
    return {
        "exact": exact[len(exact) // 2],
        "wildcard": "deep.a." + wild[len(wild) // 2][2:],
        "not_listed": NOT_LISTED,
    }
