"""Scenario 2: the cost of deciding a host as the allowlist grows (pure Python, no network).

For allowlists of 10, 100, 1,000 and 10,000 entries (the proportions of
`bench.allowlist`), parsed by the real loader into a real `Policy`, one decision
is `Policy.decide(host, 443, tls=True)` the first time a snapshot is asked the name
(`Policy._decision`: `decide` remembers it, D293), followed by `Policy.pick_address(...)` on
one public address, for three hosts: one an exact entry names, one only a
wildcard matches (two labels deeper than the wildcard), one no entry matches.

Also timed, because the addon does it once per response and it grows with the
list: `NetworkConfig.secrets()` (the redaction list of every transform).

Timing: the loop count is calibrated to ~40 ms per measurement, the garbage
collector is off while timing, and the rounds go through every (size, host) pair
in a rotated order; the report is the median and the range over the rounds.
"""

from __future__ import annotations

import functools
import gc
import ipaddress
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench.allowlist import BULK_HOST, HOOK_HOST, generate, sample_hosts
from sandbox_egress.proxy.config.loader import parse
from sandbox_egress.proxy.decision import Reason
from sandbox_egress.proxy.hosts import canonical_host
from sandbox_egress.proxy.policy import Policy

SIZES = (10, 100, 1_000, 10_000)
PUBLIC_ADDRESS = [ipaddress.ip_address("93.184.215.14")]
TARGET_S = 0.04


def _calibrate(op: Callable[[], object]) -> int:
    loops = 1
    while True:
        started = time.perf_counter()
        for _ in range(loops):
            op()
        if time.perf_counter() - started >= TARGET_S / 4 or loops >= 1 << 22:
            return max(1, int(loops * TARGET_S / max(time.perf_counter() - started, 1e-9)))
        loops *= 4


def _time_ns(op: Callable[[], object], loops: int) -> float:
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        started = time.perf_counter_ns()
        for _ in range(loops):
            op()
        return (time.perf_counter_ns() - started) / loops
    finally:
        if gc_was_enabled:
            gc.enable()


def _operations() -> dict[tuple[int, str], Callable[[], object]]:
    """(entries, what) -> one operation to time."""
    ops: dict[tuple[int, str], Callable[[], object]] = {}
    for size in SIZES:
        allowlist = generate(size, (HOOK_HOST, BULK_HOST))
        config = parse(allowlist.document(), f"bench-{size}", allowlist.environ)
        policy = Policy(config)
        for kind, name in sample_hosts(allowlist).items():
            host = canonical_host(name)
            decision, _ = policy.pick_address(
                policy.decide(host, 443, tls=True), PUBLIC_ADDRESS, 443
            )
            expected = kind != "not_listed"
            if decision.allowed != expected or (
                not expected and decision.reason is not Reason.NOT_ALLOWLISTED
            ):
                raise RuntimeError(f"{size} entries, {kind} host {name}: {decision}")

            # `decide` remembers each name's decision per policy snapshot (D293): timed as
            # the first decision of a name (`_decision`, what the list's size costs) and
            # as a name asked again (what each kept-alive request costs).
            def decide_only(policy: Policy = policy, host: Any = host) -> object:
                return policy._decision(host, 443, True)

            def decide_and_pick(policy: Policy = policy, host: Any = host) -> object:
                return policy.pick_address(policy._decision(host, 443, True), PUBLIC_ADDRESS, 443)

            def decide_again(policy: Policy = policy, host: Any = host) -> object:
                return policy.decide(host, 443, tls=True)

            ops[(size, f"{kind}: decide")] = decide_only
            ops[(size, f"{kind}: decide + pick_address")] = decide_and_pick
            ops[(size, f"{kind}: decide, remembered")] = decide_again
        # What a response costs now: one header scanned for the redactions of the entry
        # that injected into its request (precomputed at load; was secrets() per response).
        redactions = next(e.redactions for e in config.allowlist if e.transform)
        ops[(size, "redact one response header")] = functools.partial(
            redactions.header, b"application/json; charset=utf-8"
        )
    return ops


def measure(rounds: int = 7) -> dict[str, Any]:
    ops = _operations()
    keys = list(ops)
    loops = {key: _calibrate(op) for key, op in ops.items()}
    samples: dict[tuple[int, str], list[float]] = {key: [] for key in keys}
    for round_number in range(rounds):
        shift = round_number % len(keys)
        for key in keys[shift:] + keys[:shift]:
            samples[key].append(_time_ns(ops[key], loops[key]))
    results: dict[str, Any] = {"sizes": list(SIZES), "rounds": rounds, "operations": {}}
    for kind in dict.fromkeys(label for _, label in keys):
        rows = []
        base = statistics.median(samples[(SIZES[0], kind)])
        for size in SIZES:
            values = samples[(size, kind)]
            median = statistics.median(values)
            rows.append(
                {
                    "entries": size,
                    "ns": median,
                    "min_ns": min(values),
                    "max_ns": max(values),
                    "ratio_to_10": median / base,
                }
            )
        results["operations"][kind] = rows
    return results
