"""Grants kept in the state backend (`proxy.state`), so that every worker and every replica
sharing it admits a granted destination (docs/configuration.md#approvals).

One value per (sandbox, host, port) under `<key_prefix>:grant:<sandbox>:<host>:<port>`:
`{"approval": id, "scope": text, "expires": unix seconds}`, lapsing with the backend's
own TTL. A `once` grant is one admission (D540): the first request to find it claims it
(`claim`, the store's atomic lock on `<key>:used:<approval>`), every later one finds it
used. A store that cannot answer (`StateUnavailable`, or `on_error: deny` turning it
into one) finds no grant: the request is held or refused, never let through (fail closed).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from sandbox_egress.proxy.approvals.book import Destination
from sandbox_egress.proxy.state import StateBackend, StateUnavailable

# How long a claim outlives the grant it took: longer than any `once` grant is kept (its
# approval's timeout, at most an hour), so a used grant never becomes usable again.
CLAIM_TTL_S = 2 * 3600.0


@dataclass(frozen=True, slots=True)
class Grant:
    approval: str
    scope: str
    expires: float  # unix seconds

    def document(self, destination: Destination) -> dict[str, object]:
        sandbox, host, port = destination
        return {
            "approval": self.approval,
            "sandbox": sandbox,
            "host": host,
            "port": port,
            "scope": self.scope,
            "expires": round(self.expires, 3),
        }


def grant_key(prefix: str, destination: Destination) -> str:
    sandbox, host, port = destination
    return f"{prefix}:grant:{sandbox or '-'}:{host}:{port}"


async def find(state: StateBackend, prefix: str, destination: Destination) -> Grant | None:
    """The destination's grant, when one is kept and has not lapsed."""
    try:
        raw = await state.get(grant_key(prefix, destination))
    except (StateUnavailable, OSError):
        return None
    if raw is None:
        return None
    try:
        value = json.loads(raw)
        grant = Grant(str(value["approval"]), str(value["scope"]), float(value["expires"]))
    except (ValueError, KeyError, TypeError):
        return None
    return grant if grant.expires > time.time() else None


async def keep(state: StateBackend, prefix: str, destination: Destination, grant: Grant) -> bool:
    """Store `grant` until it expires; False when the store did not take it."""
    ttl = grant.expires - time.time()
    if ttl <= 0:
        return False
    value = json.dumps({"approval": grant.approval, "scope": grant.scope, "expires": grant.expires})
    try:
        await state.put(grant_key(prefix, destination), value, ttl)
    except (StateUnavailable, OSError):
        return False
    return True


async def claim(state: StateBackend, prefix: str, destination: Destination, approval: str) -> bool:
    """Take the one admission of the `once` grant `approval` of `destination`: True for
    the first caller only (across every replica sharing the store); False after, and when
    the store cannot answer (fail closed)."""
    key = f"{grant_key(prefix, destination)}:used:{approval}"
    try:
        return await state.lock(key, CLAIM_TTL_S)
    except (StateUnavailable, OSError):
        return False
