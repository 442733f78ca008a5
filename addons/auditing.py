"""One audit record from what the addon knows about a decision (docs/configuration.md#audit-log,
issue 14).

A record names the client, what it asked for, the decision and its entry, the injected
header *names* (never values), the byte counts and the duration, and since issue 14 also
the client connection's id (tying a CONNECT to the requests inside it), the SNI, and the
address actually connected to (or pinned, before the connection exists).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from mitmproxy import connection

from sandbox_egress.proxy.audit.log import AuditRecord, McpNames
from sandbox_egress.proxy.decision import Decision


@dataclass(frozen=True, slots=True)
class Where:
    client: connection.Client
    method: str
    scheme: str
    host: str
    port: int | None
    upstream: str | None = None
    path: str | None = None  # an HTTP request's, already masked (`proxy.audit.audit_path`)


def address_text(address: tuple[str, int] | None) -> str | None:
    """`ip:port` (`[ip]:port` for IPv6), or None."""
    if not address:
        return None
    host, port = address[0], address[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def record(
    where: Where,
    decision: Decision,
    started: float,
    status: int | None,
    sent: int = 0,
    received: int = 0,
    injected: tuple[str, ...] = (),
    sandbox: str | None = None,
    mcp: McpNames | None = None,
    credentials: tuple[str, ...] = (),
) -> AuditRecord:
    peer = where.client.peername
    return AuditRecord(
        connection=where.client.id,
        sni=where.client.sni,
        upstream=where.upstream,
        client=address_text(peer) or "",
        method=where.method[:16],
        scheme=where.scheme,
        host=where.host,
        port=where.port,
        decision=decision.verdict,
        reason=decision.reason.value,
        rule=decision.entry.pattern if decision.entry else None,
        clause=decision.clause or None,
        injected=injected,
        status=status,
        bytes_sent=sent,
        bytes_received=received,
        duration_s=time.monotonic() - started,
        sandbox=sandbox,
        credentials=credentials,
        path=where.path,
        mcp=mcp,
        approval=decision.entry.approval if decision.entry else None,
    )
