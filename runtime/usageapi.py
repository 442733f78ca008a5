"""`GET /usage[?sandbox=ID]` on the admin API of the metrics address: the running proxy's
model API spending (issue 46, docs/decisions.md D570-D572).

The spending is read from the proxy's own state backend (`shared.state`) on its event
loop, as `proxy.llm.ledger.report` lays it out. Only memory is read here: the single
proxy's `MemoryState`, or, for `--workers N`, the node's memory that the parent holds
(`NodeUsage`, the parent's admin API: `/usage` alone, under the node service's lock).
A Redis store is read by `egress-proxy usage` itself, so a proxy on Redis answers 409
`state_in_store` (a Fallback's local memory is not the truth).

The token is checked by the caller (`runtime.admin.AdminApi`, `NodeUsage`) before any of
this runs; nothing is served without `--admin-token-file`.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sandbox_egress.proxy.llm import ledger
from sandbox_egress.proxy.llm.config import LlmClause
from sandbox_egress.proxy.state.memory import MemoryState

if TYPE_CHECKING:
    from sandbox_egress.addons.shared import Shared
    from sandbox_egress.proxy.config.loader import NetworkConfig
    from sandbox_egress.proxy.state.node import NodeService

Answer = tuple[int, dict[str, Any]]
IN_STORE: Answer = (409, {"error": "state_in_store"})
BAD_QUERY: Answer = (400, {"error": "bad_request"})


def clauses(network: NetworkConfig) -> list[tuple[str, LlmClause]]:
    """The `llm:` clauses of a configuration, by entry pattern."""
    return [
        (e.pattern, c)
        for e in network.allowlist
        if isinstance(c := e.clauses.get("llm"), LlmClause)
    ]


def sandbox(target: str) -> str | None:
    """The `sandbox` of `/usage?sandbox=ID` (ValueError: any other query)."""
    return ledger.sandbox_of(target.partition("?")[2])


async def answer(shared: Shared, target: str) -> Answer:
    """The proxy's side, run on its event loop."""
    try:
        only = sandbox(target)
    except ValueError:
        return BAD_QUERY
    state = shared.state
    if not isinstance(state, MemoryState):
        return IN_STORE
    return 200, ledger.report(state.budgets, scopes(shared), only, state.clock())


def scopes(shared: Shared) -> list[ledger.Scope]:
    """A node proxy's sandboxes by their own files' clauses, then everyone (a sandbox,
    `client-ADDRESS`) by the node file's: a sandbox's call is judged and charged by both
    entries, each under its own pattern (docs/configuration.md#model-apis)."""
    tenancy = shared.tenancy
    found: list[ledger.Scope] = []
    if tenancy is not None:
        for name, policy in sorted(tenancy.policies.items()):
            found.append((name.__eq__, clauses(policy.config)))
    found.append((_anyone, clauses(shared.policy.config)))
    return found


class NodeUsage:
    """The admin API of the parent of `--workers N`: `/usage` from the node's memory."""

    def __init__(self, node: NodeService, token: str, current: Callable[[], NetworkConfig]):
        self._node = node
        self._expected = f"Bearer {token}".encode()
        self._current = current  # the file as the workers run it (re-read: SIGHUP reloads)

    def serves(self, path: str) -> bool:
        return path == ledger.PATH

    def answer(
        self, method: str, path: str, authorization: str | None, body: bytes
    ) -> tuple[int, bytes]:
        if not authorized(self._expected, authorization):
            return 401, b'{"error": "unauthorized"}\n'
        if method != "GET":
            return 405, b'{"error": "method_not_allowed"}\n'
        try:
            only = sandbox(path)
        except ValueError:
            return BAD_QUERY[0], json.dumps(BAD_QUERY[1]).encode() + b"\n"
        found = [(_anyone, clauses(self._current()))]
        document = self._node.read(lambda m: ledger.report(m.budgets, found, only, m.clock()))
        return 200, json.dumps(document).encode() + b"\n"


def _anyone(_name: str) -> bool:
    return True


def authorized(expected: bytes, authorization: str | None) -> bool:
    """The bearer token, compared in constant time."""
    given = (authorization or "").encode("utf-8", "surrogateescape")
    return hmac.compare_digest(given, expected)
