"""The approvals admin API on the metrics address (docs/configuration.md#approvals).

* `GET /approvals` → 200 `{"approvals": [...], "grants": [...]}`;
* `POST /approvals/{id}` `{"decision", "scope", "reason"}` → 200 the decided approval;
  400 a bad body or scope, 404 an unknown id, 409 already decided;
* `POST /approvals` `{"sandbox", "host", "port", "decision": "allow", "scope"}` → 200: a
  grant made ahead (the hook runner's bridge: the user's yes in Claude Code).

Pure and async, run on the proxy's event loop; the caller (`runtime.admin`) checked the
bearer token first. Every answer is JSON.
"""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

from sandbox_egress.proxy.approvals.access import Holdable, Reply, error
from sandbox_egress.proxy.approvals.book import AlreadyDecided, Source
from sandbox_egress.proxy.approvals.service import Approvals
from sandbox_egress.proxy.hosts import HostError, canonical_host

PREFIX = "/approvals"
MAX_BODY = 4096
_ONE = re.compile(r"^/approvals/(ap-[0-9a-f]{16})$")


async def handle(
    service: Approvals, holdable: Holdable, method: str, path: str, body: bytes
) -> Reply:
    path = path.split("?", 1)[0].rstrip("/") or "/"
    if path == PREFIX:
        if method == "GET":
            return 200, service.documents()
        if method == "POST":
            return await _ahead(service, holdable, _document(body))
        return error(405, "method_not_allowed")
    found = _ONE.match(path)
    if found is None:
        return error(404, "not_found")
    if method != "POST":
        return error(405, "method_not_allowed")
    document = _document(body)
    if document is None:
        return error(400, "bad_request")
    decision, scope, reason = (
        document.get("decision"),
        document.get("scope"),
        document.get("reason"),
    )
    if not isinstance(decision, str) or (scope is not None and not isinstance(scope, str)):
        return error(400, "bad_request")
    if reason is not None and (not isinstance(reason, str) or len(reason) > 200):
        return error(400, "bad_request")
    try:
        approval = await service.decide(found[1], decision, scope, "api", reason)
    except LookupError:
        return error(404, "not_found")
    except AlreadyDecided:
        return error(409, "already_decided")
    except ValueError:
        return error(400, "bad_decision_or_scope")
    return 200, approval.document()


def _document(body: bytes) -> dict[str, Any] | None:
    if len(body) > MAX_BODY:
        return None
    try:
        document = json.loads(body or b"{}")
    except ValueError:
        return None
    return document if isinstance(document, dict) else None


async def _ahead(service: Approvals, holdable: Holdable, document: dict[str, Any] | None) -> Reply:
    """A grant made before any request waits: an approval opened and allowed at once."""
    if document is None or document.get("decision") != "allow":
        return error(400, "bad_request")
    sandbox, raw, port = document.get("sandbox"), document.get("host"), document.get("port", 443)
    scope = document.get("scope", "once")
    if sandbox is not None and not isinstance(sandbox, str):
        return error(400, "bad_request")
    if not isinstance(raw, str) or isinstance(port, bool) or not isinstance(port, int):
        return error(400, "bad_request")
    if not 1 <= port <= 65535 or service.config.scope(scope) is None:
        return error(400, "bad_decision_or_scope")
    try:
        host = canonical_host(raw)
    except HostError:
        return error(400, "bad_request")
    if not service.config.hold:
        return error(404, "approvals_off")
    if not holdable(sandbox, host, port):
        return error(400, "not_holdable")
    approval = await service.ask_ahead((sandbox, str(host), port), Source.API)
    if approval is None:
        return error(429, "approval_limit")
    with contextlib.suppress(AlreadyDecided):  # answered meanwhile: its answer stands
        approval = await service.decide(approval.id, "allow", scope, "api")
    return 200, approval.document()
