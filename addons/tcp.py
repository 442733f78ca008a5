"""The raw TCP stage: a non-HTTP stream only reaches an explicit IP/CIDR entry.

Turns the TCP flow into plain values, asks `proxy.stages.decide_tcp` once, and applies
the answer: pin the checked address, or refuse (`addons.workarounds.refuse_raw_tcp`).
"""

from __future__ import annotations

from mitmproxy import tcp

from sandbox_egress.addons.layers.workarounds import refuse_raw_tcp
from sandbox_egress.addons.shared import Shared
from sandbox_egress.addons.targets import is_transparent
from sandbox_egress.proxy.decision import Decision, Reason, Stage
from sandbox_egress.proxy.stages import TcpAnswer, decide_tcp


class RawTcp:
    def __init__(self, shared: Shared) -> None:
        self.shared = shared

    def tcp_start(self, flow: tcp.TCPFlow) -> None:
        shared, client = self.shared, flow.client_conn
        answer = TcpAnswer(Decision.deny(Reason.POLICY_ERROR))
        with shared.failclosed(Stage.TCP):
            decided = decide_tcp(
                shared.policy_for(client),
                shared.facts(client),
                is_transparent(client),
                flow.server_conn.address,
            )
            if decided.pin is not None:
                shared.pin(client, decided.pin)
            answer = decided
        shared.count(Stage.TCP, answer.decision)
        if answer.pin is None:
            refuse_raw_tcp(shared.pinning, flow)
