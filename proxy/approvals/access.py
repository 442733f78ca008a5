"""The reserved host `egress.invalid`, answered by the proxy itself: a sandbox asks ahead
for a destination (docs/configuration.md#asking-ahead-egressinvalid).

* `POST /v1/access-requests` `{"host", "port", "reason"}` → 202 `{"id", "state"}`: a
  pending approval for the caller's sandbox, asked of the approvers like a held request;
* `GET /v1/access-requests/{id}` → 200 `{"id", "host", "port", "state", "scope"}`.

Pure: the adapter (`addons.approvals`) gives the method, path, body and the caller's
sandbox, and a `Holdable` that says whether the policy would hold a destination. Nothing
is ever sent upstream; a caller sees only its own sandbox's approvals (404 otherwise).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from sandbox_egress.proxy.approvals.book import Source
from sandbox_egress.proxy.approvals.service import Approvals
from sandbox_egress.proxy.hosts import Host, HostError, canonical_host

RESERVED = "egress.invalid"
MAX_BODY = 4096
COLLECTION = "/v1/access-requests"
_ONE = re.compile(r"^/v1/access-requests/(ap-[0-9a-f]{16})$")

Holdable = Callable[[str | None, Host, int], bool]  # (sandbox, host, port)
Reply = tuple[int, dict[str, Any]]


def error(status: int, code: str) -> Reply:
    return status, {"error": code}


async def answer(
    service: Approvals,
    holdable: Holdable,
    sandbox: str | None,
    method: str,
    path: str,
    body: bytes,
) -> Reply:
    """The proxy's own answer to a request to `egress.invalid`."""
    if not service.config.hold:
        return error(404, "approvals_off")
    path = path.split("?", 1)[0]
    if path == COLLECTION:
        if method != "POST":
            return error(405, "method_not_allowed")
        return await _ask(service, holdable, sandbox, body)
    found = _ONE.match(path)
    if found is None:
        return error(404, "not_found")
    if method != "GET":
        return error(405, "method_not_allowed")
    approval = service.book.get(found[1])
    if approval is None or approval.sandbox != sandbox:
        return error(404, "not_found")
    return 200, {
        "id": approval.id,
        "host": approval.host,
        "port": approval.port,
        "state": approval.state.value,
        "scope": approval.scope.text if approval.scope else None,
    }


async def _ask(service: Approvals, holdable: Holdable, sandbox: str | None, body: bytes) -> Reply:
    if len(body) > MAX_BODY:
        return error(400, "bad_request")
    try:
        document = json.loads(body)
    except ValueError:
        return error(400, "bad_request")
    if not isinstance(document, dict):
        return error(400, "bad_request")
    raw, port, reason = document.get("host"), document.get("port", 443), document.get("reason")
    if not isinstance(raw, str) or isinstance(port, bool) or not isinstance(port, int):
        return error(400, "bad_request")
    if not 1 <= port <= 65535 or (reason is not None and not isinstance(reason, str)):
        return error(400, "bad_request")
    try:
        host = canonical_host(raw)
    except HostError:
        return error(400, "bad_request")
    if str(host) == RESERVED or not holdable(sandbox, host, port):
        return error(400, "not_holdable")
    approval = await service.ask_ahead(
        (sandbox, str(host), port), Source.ACCESS_REQUEST, (reason or "")[:200] or None
    )
    if approval is None:
        return error(429, "approval_limit")
    return 202, {"id": approval.id, "state": approval.state.value}
