"""The approvals admin API on the metrics address, and the gate's wiring at start
(docs/configuration.md#the-admin-api-on-the-metrics-address, issue 47).

`read_token` reads `--admin-token-file` once at start (at least `MIN_TOKEN` characters,
whitespace stripped). `AdminApi` answers `/approvals` and `GET /usage` (the model API
spending, `runtime.usageapi`, whether approvals are on or not) from the metrics server's
thread:
the bearer token is checked there (constant time; nothing without it: 401), then the
request runs on the proxy's event loop (`proxy.approvals.admin.handle`), bounded by
`ANSWER_S`. Without a token file the paths are not served at all (404).

`wire` builds the service and the adapter (`addons.approvals.ApprovalGate`) and hands
it to the shared state of the stage addons. A worker of `--workers N` holds nothing
(D487): its approvals would be out of reach of the parent's metrics address.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox_egress.proxy.approvals import admin
from sandbox_egress.proxy.approvals.service import Approvals
from sandbox_egress.proxy.approvals.settings import NO_APPROVALS, ApprovalsConfig
from sandbox_egress.proxy.llm import ledger
from sandbox_egress.runtime import usageapi
from sandbox_egress.runtime.startup import LaunchError, Settings

if TYPE_CHECKING:
    from sandbox_egress.addons.approvals import ApprovalGate
    from sandbox_egress.addons.egress import EgressPolicy
    from sandbox_egress.common.serve import MetricsServer

MIN_TOKEN = 16
ANSWER_S = 10.0

log = logging.getLogger("sandbox_egress.approvals")


def read_token(path: Path) -> str:
    try:
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise LaunchError(f"--admin-token-file {path}: cannot read it") from exc
    if len(token) < MIN_TOKEN or any(c.isspace() for c in token):
        raise LaunchError(
            f"--admin-token-file {path}: expected one token of at least {MIN_TOKEN} characters"
        )
    return token


class AdminApi:
    def __init__(self, gate: ApprovalGate, token: str, loop: asyncio.AbstractEventLoop) -> None:
        self._gate = gate
        self._expected = f"Bearer {token}".encode()
        self._loop = loop

    def serves(self, path: str) -> bool:
        if path == ledger.PATH:
            return True  # with approvals off too: only the token is needed (D571)
        return path == admin.PREFIX or path.startswith(admin.PREFIX + "/")

    def answer(
        self, method: str, path: str, authorization: str | None, body: bytes
    ) -> tuple[int, bytes]:
        given = (authorization or "").encode("utf-8", "surrogateescape")
        if not hmac.compare_digest(given, self._expected):
            return 401, b'{"error": "unauthorized"}\n'
        gate, bare = self._gate, path.partition("?")[0]
        if bare == ledger.PATH:
            if method != "GET":
                return 405, b'{"error": "method_not_allowed"}\n'
            work = usageapi.answer(gate.shared, path)
        else:
            work = admin.handle(gate.service, gate.holdable, method, bare, body)
        future = asyncio.run_coroutine_threadsafe(work, self._loop)
        try:
            status, document = future.result(ANSWER_S)
        except Exception:  # the loop's failure is the proxy's, never the caller's detail
            future.cancel()
            log.exception("admin API: %s %s failed", method, bare)
            return 500, b'{"error": "internal"}\n'
        return status, json.dumps(document).encode() + b"\n"


async def wire(
    addon: EgressPolicy, settings: Settings, metrics_server: MetricsServer | None
) -> None:
    """The service and its adapter in the stage addons' shared state, the admin API on the
    metrics address (with a token); runs until cancelled, then ends the asking tasks."""
    from sandbox_egress.addons.approvals import ApprovalGate

    shared, worker = addon.shared, settings.worker

    def current() -> ApprovalsConfig:  # the policy is replaced whole on a reload (D24)
        return effective(shared.policy.config.approvals, worker)

    prefix = shared.policy.config.state.key_prefix
    service = Approvals(shared.state, shared.metrics.approvals, current, prefix)
    gate = ApprovalGate(shared, service)
    shared.approvals = gate
    if metrics_server is not None and settings.admin_token is not None:
        metrics_server.admin = AdminApi(gate, settings.admin_token, asyncio.get_running_loop())
    try:
        await asyncio.Event().wait()
    finally:
        if metrics_server is not None:
            metrics_server.admin = None
        shared.approvals = None
        await service.close()


def effective(config: ApprovalsConfig, worker: int | None) -> ApprovalsConfig:
    """A worker of `--workers N` holds nothing (D487)."""
    return NO_APPROVALS if worker is not None else config
