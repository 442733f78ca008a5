"""The egress policy as mitmproxy addons: one thin addon per connection stage.

`EgressPolicy` is the one addon the launcher adds. It owns what the stages share
(`addons.shared`: the policy snapshot, the facts per client connection, the pins) and
hands mitmproxy its stage addons as sub-addons. Each stage addon turns its hook's flow
into plain values, asks its one function of `proxy.stages`, and applies the answer,
inside the one fail-closed wrapper (`Shared.failclosed`).

A client connection has a *target* once it is known: the CONNECT authority in
regular mode, the TLS SNI (or, without SNI, the original destination address)
with the original port in transparent mode. Every request on that connection
must name the target in its Host/:authority and its request-target, which an
upstream then receives in origin-form (domain fronting; `proxy.targets`).

Life of a request:
1. (regular) `addons.connect` decides the CONNECT target and refuses with 403 before
   any tunnel. `addons.clienthello` relays a pass-through tunnel whose SNI names its
   target. (transparent) `addons.clienthello` records the SNI as the target.
2. `addons.request` decides every request again (each one on a kept-alive connection
   or HTTP/2 stream), pins the first permitted address, writes the transform headers.
3. `addons.pinning` connects only to the pinned address (no second lookup), and
   refuses a connection that nothing pinned. `addons.tcp` pins raw TCP to IP entries.
4. `addons.response` cleans the answer and writes the audit line.
"""

from __future__ import annotations

from collections.abc import Callable

from mitmproxy import connection

from sandbox_egress.addons.approvals import ApprovalHooks
from sandbox_egress.addons.clienthello import ClientHello
from sandbox_egress.addons.connect import Connect
from sandbox_egress.addons.pinning import Pinning
from sandbox_egress.addons.request import Requests
from sandbox_egress.addons.response import Responses
from sandbox_egress.addons.sandboxes import SandboxIdentity
from sandbox_egress.addons.shared import Shared
from sandbox_egress.addons.tcp import RawTcp
from sandbox_egress.proxy.audit.log import AuditSink
from sandbox_egress.proxy.metrics import ProxyMetrics
from sandbox_egress.proxy.policy import Policy
from sandbox_egress.proxy.resolver import FairResolver, Resolve, system_resolve


class EgressPolicy:
    def __init__(
        self,
        policy: Policy,
        metrics: ProxyMetrics,
        audit: AuditSink,
        on_running: Callable[[], None] | None = None,
        resolver: Resolve | FairResolver = system_resolve,
    ) -> None:
        self.pinning = Pinning(metrics)
        self.shared = Shared(policy, metrics, audit, resolver, self.pinning)
        self._on_running = on_running
        self.identity = SandboxIdentity(self.shared)  # a node proxy's sandboxes (1.12)
        self.connect = Connect(self.shared)
        self.clienthello = ClientHello(self.shared)
        self.requests = Requests(self.shared)
        self.responses = Responses(self.shared)
        self.tcp = RawTcp(self.shared)
        # mitmproxy calls each sub-addon's hooks after this one's.
        self.addons = [
            self.pinning,
            self.identity,
            self.connect,
            self.clienthello,
            self.requests,
            ApprovalHooks(self.shared),  # after the request stage (addons.approvals)
            self.responses,
            self.tcp,
        ]

    @property
    def policy(self) -> Policy:
        return self.shared.policy

    @policy.setter
    def policy(self, policy: Policy) -> None:
        self.shared.policy = policy  # one assignment: a reload never splits a decision (D24)

    def running(self) -> None:
        if self._on_running is not None:
            self._on_running()

    def client_connected(self, client: connection.Client) -> None:
        self.shared.opened(client)
        self.shared.metrics.active_connections.inc()

    def client_disconnected(self, client: connection.Client) -> None:
        if self.shared.closed(client):
            self.shared.metrics.active_connections.dec()
