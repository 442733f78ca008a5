"""`--audit-format ocsf` (issue 34, docs/configuration.md#audit-log): each audit record as
one OCSF 1.5.0 event with the `security_control` profile, for SIEMs.

* HTTP decisions are HTTP Activity (class 4002, activity by method: 1 Connect ... 8
  Trace, 99 Other); CONNECT, SNI passthrough (`TLS`) and raw TCP decisions are Network
  Activity (4001: 1 Open when allowed, 5 Refuse when not). `type_uid` is
  `class_uid * 100 + activity_id`.
* The decision is `action_id` (1 Allowed, 2 Denied) and `disposition_id` (1 Allowed,
  2 Blocked, 15 Detected for report-only `would_deny`); the reason is `status_detail`,
  the deciding entry `firewall_rule.name` (its clause `firewall_rule.desc`), the sandbox
  `metadata.tenant_uid`; the rest of the project's fields are under `unmapped.egress`.
* A record holds no secret (`proxy.audit`: header names only), and neither does this:
  nothing is added that the JSON line does not carry; the request's path and query are
  in neither (`url.url_string` is the origin).
"""

from __future__ import annotations

import ipaddress
from datetime import UTC, datetime
from typing import Any

from sandbox_egress.common.jsonlines import json_line
from sandbox_egress.common.serve import version
from sandbox_egress.proxy.audit.log import AuditLog, AuditRecord

OCSF_VERSION = "1.5.0"
PROFILES = ["security_control"]
HTTP_ACTIVITY, NETWORK_ACTIVITY = 4002, 4001
_NETWORK_METHODS = frozenset({"CONNECT", "TLS", "TCP"})
_HTTP_ACTIVITIES = {
    "CONNECT": 1, "DELETE": 2, "GET": 3, "HEAD": 4, "OPTIONS": 5, "POST": 6, "PUT": 7, "TRACE": 8,
}  # fmt: skip
_VERSION = version()  # read once: the installed distribution does not change
_CLASS_NAMES = {HTTP_ACTIVITY: "HTTP Activity", NETWORK_ACTIVITY: "Network Activity"}
# decision -> (action_id, action, disposition_id, disposition, status_id, severity_id)
_DECISIONS = {
    "allow": (1, "Allowed", 1, "Allowed", 1, 1),
    "would_deny": (1, "Allowed", 15, "Detected", 1, 2),
    "deny": (2, "Denied", 2, "Blocked", 2, 3),
}


def _endpoint(text: str | None, port: int | None = None, host: str = "") -> dict[str, Any]:
    """`ip:port`/`[v6]:port` (and a host name) as an OCSF network endpoint."""
    found: dict[str, Any] = {}
    if host:
        found["hostname"] = host
    address, _, number = (text or "").rpartition(":")
    try:
        found["ip"] = str(ipaddress.ip_address(address.strip("[]").split("%")[0]))
    except ValueError:
        number = ""  # not an address the proxy wrote: the text stays in `unmapped`
    if number.isdigit() and int(number) <= 65535:
        found["port"] = int(number)
    if port is not None and 0 <= port <= 65535:
        found["port"] = port
    if set(found) == {"port"}:
        del found["port"]  # an endpoint names an address or a host
    return found


def event(record: AuditRecord, at: datetime, worker: int | None = None) -> dict[str, Any]:
    """The OCSF event of one audit record decided at `at`."""
    network = record.method in _NETWORK_METHODS
    class_uid = NETWORK_ACTIVITY if network else HTTP_ACTIVITY
    allowed = record.decision != "deny"
    if network:
        activity_id, activity = (1, "Open") if allowed else (5, "Refuse")
    else:
        activity_id = _HTTP_ACTIVITIES.get(record.method, 99)
        activity = record.method.title() if activity_id != 99 else "Other"
    action_id, action, disposition_id, disposition, status_id, severity_id = _DECISIONS.get(
        record.decision, _DECISIONS["deny"]
    )
    out: dict[str, Any] = {
        "class_uid": class_uid,
        "class_name": _CLASS_NAMES[class_uid],
        "category_uid": 4,
        "category_name": "Network Activity",
        "activity_id": activity_id,
        "activity_name": activity,
        "type_uid": class_uid * 100 + activity_id,
        "time": int(at.timestamp() * 1000),
        "severity_id": severity_id,
        "action_id": action_id,
        "action": action,
        "disposition_id": disposition_id,
        "disposition": disposition,
        "status_id": status_id,
        "status_detail": record.reason,
        "message": f"{record.decision} {record.host}: {record.reason}",
        "duration": int(record.duration_s * 1000),
        "metadata": {
            "version": OCSF_VERSION,
            "profiles": PROFILES,
            "product": {"name": "sandbox-egress", "vendor_name": "sandbox-egress",
                        "version": _VERSION},
            "correlation_uid": record.connection or None,
            "tenant_uid": record.sandbox,
        },  # fmt: skip
        "src_endpoint": _endpoint(record.client),
        "dst_endpoint": _endpoint(record.upstream, record.port, record.host),
        "connection_info": {"uid": record.connection or None, "direction_id": 2,
                            "direction": "Outbound", "protocol_name": "tcp"},  # fmt: skip
        "traffic": {"bytes_out": record.bytes_sent, "bytes_in": record.bytes_received},
        "unmapped": {"egress": {
            "decision": record.decision, "reason": record.reason, "rule": record.rule,
            "method": record.method, "client": record.client, "upstream": record.upstream,
            "clause": record.clause, "sandbox": record.sandbox, "sni": record.sni,
            "injected": list(record.injected), "worker": worker, **dict(record.extra),
        }},
    }  # fmt: skip
    if record.rule is not None:
        out["firewall_rule"] = {"name": record.rule, "desc": record.clause}
    if not network:
        scheme = record.scheme or "http"
        origin = f"{scheme}://{record.host}" + (f":{record.port}" if record.port else "")
        port = record.port if record.port is not None and 0 <= record.port <= 65535 else None
        url = {"url_string": origin, "hostname": record.host, "scheme": scheme, "port": port}
        out["http_request"] = {"url": url}
        if activity_id != 99:  # the schema lists eight methods; others are `unmapped`
            out["http_request"]["http_method"] = record.method
        if record.status is not None:
            out["http_response"] = {"code": record.status}
    for side in ("src_endpoint", "dst_endpoint"):
        if not out[side]:
            del out[side]  # an endpoint names at least an address or a host
    cleaned: dict[str, Any] = _without_nulls(out)
    return cleaned


def _without_nulls(value: Any) -> Any:
    """OCSF leaves an unknown attribute out rather than null (the schema types say so)."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    return value


class OcsfAuditLog(AuditLog):
    """`--audit-format ocsf`: each record as one OCSF event per line."""

    def line(self, record: AuditRecord, at: datetime | None = None) -> str:
        return json_line(event(record, at or datetime.now(UTC), self._worker))
