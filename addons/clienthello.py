"""The TLS ClientHello stage: relay or intercept, and what the connection's requests name.

Turns the ClientHello into plain values, asks `proxy.stages.decide_clienthello` once, and
applies the answer: relay (`ignore_connection`) a pass-through entry, complete the
upstream handshake first when the client offers a choice of ALPN (D19), record the
connection's target. An exception leaves the connection intercepted, so every request
inside is still decided (and refused readably).
"""

from __future__ import annotations

import time

from mitmproxy import tls

from sandbox_egress.addons.auditing import Where
from sandbox_egress.addons.shared import Shared
from sandbox_egress.addons.targets import is_transparent
from sandbox_egress.proxy.decision import Stage
from sandbox_egress.proxy.stages import Hello, decide_clienthello


class ClientHello:
    def __init__(self, shared: Shared) -> None:
        self.shared = shared

    async def tls_clienthello(self, data: tls.ClientHelloData) -> None:
        shared, client = self.shared, data.context.client
        started = time.monotonic()
        hello = data.client_hello
        with shared.failclosed(Stage.TLS):
            answer = await decide_clienthello(
                shared.policy_for(client),
                shared.resolve_for(client),
                shared.facts(client),
                Hello(
                    transparent=is_transparent(client),
                    sni=hello.sni,
                    sni_sent=any(kind == 0 for kind, _ in hello.extensions),
                    alpn=tuple(hello.alpn_protocols),
                    destination=data.context.server.address,
                ),
            )
            shared.learned(client, answer.facts)
            shared.pin(client, *answer.pins)
            if answer.server_address is not None:
                data.context.server.address = answer.server_address
            if answer.relay:
                data.ignore_connection = True
            if answer.upstream_first:
                data.establish_server_tls_first = True
            if answer.decision is not None and answer.facts.target is not None:
                shared.count(Stage.TLS, answer.decision)
                host, port = answer.facts.target
                where = Where(client, "TLS", "https", str(host), port)
                shared.write_audit(where, answer.decision, started, status=None)
