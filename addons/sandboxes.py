"""Which sandbox a client connection belongs to, on a node proxy (docs/configuration.md#sandboxes).

Runs before the stage addons and does nothing without `sandboxes:` (`Shared.tenancy`).
Identity is decided once per client connection (`proxy.identity.identify`) and kept in
its `ConnectionFacts.sandbox`, which every later stage reads through `Shared.policy_for`:
* transparent mode: by source address, when the client connects;
* regular mode: at the first CONNECT or absolute-form request, by proxy credentials or
  source address. The requests inside a tunnel, and later requests on a kept-alive
  connection, inherit it. A failure answers that request (407 with only
  `Proxy-Authenticate`, or 403 `unknown_sandbox`) and stops the chain (`AddonHalt`), so no
  stage decides it; the client may retry with credentials on the same connection.

A `Proxy-Authorization` header is removed from every request (never sent upstream, never
logged). An identified connection counts against its sandbox's connection bound
(`ConnectionQuota`, `sandboxes.max_connections`): over it, a transparent connection is
closed at once and a regular one is answered 429 `connection_limit`.
"""

from __future__ import annotations

import ipaddress
import time
from dataclasses import replace

from mitmproxy import connection, exceptions, http

from sandbox_egress.addons.auditing import Where
from sandbox_egress.addons.layers import linger
from sandbox_egress.addons.refusal import refusal_response
from sandbox_egress.addons.request import unread
from sandbox_egress.addons.shared import Shared
from sandbox_egress.addons.targets import is_transparent
from sandbox_egress.proxy.audit.log import audit_path
from sandbox_egress.proxy.decision import Decision, Reason, Stage
from sandbox_egress.proxy.hosts import IPAddress
from sandbox_egress.proxy.tenancy.identity import PROXY_AUTHENTICATE, Failure, Identity, identify
from sandbox_egress.proxy.tenancy.tenants import ConnectionQuota, Tenancy

AUTHORIZATION = "Proxy-Authorization"


class SandboxIdentity:
    def __init__(self, shared: Shared) -> None:
        self.shared = shared
        self.quota = ConnectionQuota()
        self._held: dict[str, tuple[str, str]] = {}  # client id -> (sandbox, class) counted

    # -- connections ------------------------------------------------------------------------

    def client_connected(self, client: connection.Client) -> None:
        tenancy = self.shared.tenancy
        if tenancy is None or not is_transparent(client):
            return
        found = identify(tenancy, None, _peer(client), transparent=True)
        if found.sandbox is None:
            self._count("unknown_sandbox")  # its requests are refused: unknown_sandbox
        elif not self._admit(tenancy, client, found.sandbox):
            client.error = "egress: the sandbox is at its connection bound"

    def client_disconnected(self, client: connection.Client) -> None:
        held = self._held.pop(client.id, None)
        if held is not None:
            self.quota.release(held[0])
            self.shared.metrics.sandboxes.connections.labels(held[1]).dec()

    # -- regular mode: the first CONNECT or request ------------------------------------------

    def http_connect(self, flow: http.HTTPFlow) -> None:
        if self.shared.tenancy is not None:
            self._identify(flow, Stage.CONNECT)

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        if self.shared.tenancy is None:
            return
        if not is_transparent(flow.client_conn):
            self._identify(flow, Stage.REQUEST)
        flow.request.headers.pop(AUTHORIZATION, None)

    def _identify(self, flow: http.HTTPFlow, stage: Stage) -> None:
        shared, client = self.shared, flow.client_conn
        tenancy = shared.tenancy
        if tenancy is None or shared.facts(client).sandbox is not None:
            return  # decided once per connection
        started = time.monotonic()
        found = Identity(failure=Failure.UNKNOWN)
        with shared.failclosed(stage):
            header = flow.request.headers.get(AUTHORIZATION)
            found = identify(tenancy, header, _peer(client), transparent=False)
        flow.request.headers.pop(AUTHORIZATION, None)
        if found.sandbox is not None and self._admit(tenancy, client, found.sandbox):
            return
        if found.sandbox is not None:
            decision = Decision.deny(Reason.CONNECTION_LIMIT)
            response = refusal_response(
                decision, shared.masked(flow.request.host), flow.request.method
            )
            response.headers["Retry-After"] = "1"
        elif found.failure is Failure.AUTH_REQUIRED:
            self._count("auth_required")
            decision = Decision.deny(Reason.UNKNOWN_SANDBOX)
            response = http.Response.make(407, b"", {"Proxy-Authenticate": PROXY_AUTHENTICATE})
        else:
            self._count("unknown_sandbox")
            decision = Decision.deny(Reason.UNKNOWN_SANDBOX)
            response = refusal_response(
                decision, shared.masked(flow.request.host), flow.request.method
            )
        self._refuse(flow, stage, decision, response, started)

    def _refuse(
        self,
        flow: http.HTTPFlow,
        stage: Stage,
        decision: Decision,
        response: http.Response,
        started: float,
    ) -> None:
        """Answer the request without any stage deciding it, and stop the chain."""
        shared, request = self.shared, flow.request
        shared.count(stage, decision)
        request.stream = False
        if stage is Stage.REQUEST and unread(flow):
            linger.answer_early(flow, response)  # never buffer a refused upload (D350)
        else:
            flow.response = response
        method = "CONNECT" if stage is Stage.CONNECT else request.method
        scheme = "" if stage is Stage.CONNECT else request.scheme
        path = None if stage is Stage.CONNECT else audit_path(request.path, shared.held_values())
        where = Where(
            flow.client_conn, method, scheme, request.host[:255], request.port, None, path
        )
        shared.write_audit(where, decision, started, response.status_code)
        raise exceptions.AddonHalt

    # -- the connection bound -----------------------------------------------------------------

    def _admit(self, tenancy: Tenancy, client: connection.Client, sandbox: str) -> bool:
        """Tie the connection to `sandbox` if its bound allows one more connection."""
        sandbox_class = tenancy.sandbox_class(sandbox) or ""
        metrics = self.shared.metrics.sandboxes
        if not self.quota.acquire(sandbox, tenancy.section.max_connections):
            self._count("connection_limit")
            metrics.connection_refusals.labels(sandbox_class).inc()
            return False
        self._count("identified")
        self._held[client.id] = (sandbox, sandbox_class)
        metrics.connections.labels(sandbox_class).inc()
        shared = self.shared
        shared.learned(client, replace(shared.facts(client), sandbox=sandbox))
        return True

    def _count(self, result: str) -> None:
        self.shared.metrics.sandboxes.identifications.labels(result).inc()


def _peer(client: connection.Client) -> IPAddress | None:
    peer = client.peername
    if not peer:
        return None
    try:
        return ipaddress.ip_address(str(peer[0]).partition("%")[0])
    except ValueError:
        return None
