"""What one kept-alive request costs the pure request stage, in process (no network).

`make bench`'s scenario 1 (b) times the whole proxy; this times the parts of it the
request stage does per request, so that a change to one of them can be measured on a
shared, noisy host: the same operations, in alternating rounds, median and range.

Operations (each on the bench's own allowlist, `bench.allowlist.generate(100)`, parsed by
the real loader into a real `Policy`; the request is hey's kept-alive GET's head):
* `decide_request`: `proxy.stages.decide_request` for the host under test (an entry with
  a transform, as in scenario 1) and for an entry with `rules` and `mcp:` (the clauses'
  head rules do more there);
* `override_methods`, `head_problem`: the two passes over the header fields;
* `streams_filter`: what an MCP entry's request builds for its answer's event streams.

Run: `.venv/bin/python -m bench.micro_request [--rounds N]` (prints ns per operation).
To compare two trees, run it in alternation from each tree's own directory
(`cd <tree> && PYTHONPATH=<tree> python -m bench.micro_request`: `-m` puts the working
directory first on the import path).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import ipaddress
import statistics
import time
from collections.abc import Awaitable, Callable

from bench.allowlist import TARGET, generate
from sandbox_egress.proxy.clauses.rules import override_methods
from sandbox_egress.proxy.config.loader import parse
from sandbox_egress.proxy.fields import head_problem
from sandbox_egress.proxy.hosts import canonical_host
from sandbox_egress.proxy.mcp import entry_policies
from sandbox_egress.proxy.mcp.tools_list import streams_filter
from sandbox_egress.proxy.policy import Policy
from sandbox_egress.proxy.stages import ConnectionFacts, RequestAsk, decide_request
from sandbox_egress.proxy.targets import RequestNames

RULED = "ruled.bench.test"
LOOPS = 4000
UPSTREAM = [ipaddress.ip_address("198.18.77.10")]

# hey's request head (Go's net/http), as mitmproxy hands it over.
FIELDS = (
    (b"Host", TARGET.encode()),
    (b"User-Agent", b"hey/0.0.1"),
    (b"Content-Type", b"text/html"),
    (b"Accept-Encoding", b"gzip"),
)


def _policy() -> Policy:
    allowlist = generate(100)
    document = allowlist.document()
    document["network"]["allowlist"].append(
        {
            "domain": RULED,
            "rules": [{"methods": ["GET", "POST"], "paths": ["/api/**", "/"]}],
            "deny": [{"paths": ["/api/admin/**"]}],
            "mcp": {"endpoint": ["/mcp"], "tools": ["search"], "filter_tools_list": True},
        }
    )
    return Policy(parse(document, "micro", allowlist.environ))


async def _resolve(name: str, port: int) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    return list(UPSTREAM)


def _ask(host: str) -> RequestAsk:
    fields = ((b"Host", host.encode()), *FIELDS[1:])
    target = (canonical_host(host), 443)  # inside the CONNECT tunnel opened for it
    names = RequestNames(False, host, 443, host, host, True, target, method="GET", path="/")
    return RequestAsk(b"GET", fields, names, https=True)


def _operations() -> dict[str, Callable[[], float]]:
    """Each operation: run `LOOPS` times, answer ns per run."""
    policy = _policy()
    loop = asyncio.new_event_loop()
    ops: dict[str, Callable[[], float]] = {}
    for label, host in (
        ("decide_request, transform entry", TARGET),
        ("decide_request, rules+mcp", RULED),
    ):
        ask = _ask(host)
        facts = ConnectionFacts(target=ask.names.target)
        check = loop.run_until_complete(decide_request(policy, _resolve, facts, ask))
        if not check.decision.allowed:
            raise RuntimeError(f"{host}: {check.decision}")

        async def many(ask: RequestAsk = ask, facts: ConnectionFacts = facts) -> float:
            started = time.perf_counter_ns()
            for _ in range(LOOPS):
                await decide_request(policy, _resolve, facts, ask)
            return (time.perf_counter_ns() - started) / LOOPS

        ops[label] = functools.partial(_awaited, loop, many)
    ask = _ask(RULED)
    ruled = loop.run_until_complete(
        decide_request(policy, _resolve, ConnectionFacts(target=ask.names.target), ask)
    )
    policies = entry_policies(ruled.decision)
    if not policies:
        raise RuntimeError("the ruled entry has no mcp policy")
    singles: dict[str, Callable[[], object]] = {
        "override_methods": functools.partial(override_methods, FIELDS),
        "head_problem": functools.partial(head_problem, b"GET", FIELDS),
        # streams_filter's input is made per request too: timed with it, then alone.
        "streams_filter": lambda: streams_filter(entry_policies(ruled.decision)),
        "entry_policies (streams_filter's input)": lambda: entry_policies(ruled.decision),
    }
    for label, op in singles.items():
        ops[label] = functools.partial(_timed, op)
    return ops


def _awaited(loop: asyncio.AbstractEventLoop, many: Callable[[], Awaitable[float]]) -> float:
    return loop.run_until_complete(many())


def _timed(op: Callable[[], object]) -> float:
    started = time.perf_counter_ns()
    for _ in range(LOOPS):
        op()
    return (time.perf_counter_ns() - started) / LOOPS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    rounds = parser.parse_args().rounds
    ops = _operations()
    samples: dict[str, list[float]] = {key: [] for key in ops}
    gc.disable()
    for number in range(rounds):
        keys = list(ops)
        shift = number % len(keys)
        for key in keys[shift:] + keys[:shift]:
            samples[key].append(ops[key]())
    gc.enable()
    for key, values in samples.items():
        print(
            f"{key:45s} {statistics.median(values):9.0f} ns [{min(values):.0f}-{max(values):.0f}]"
        )


if __name__ == "__main__":
    main()
