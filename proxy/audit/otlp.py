"""`--otlp-endpoint` (issue 34, docs/configuration.md#audit-log): an audit record as an
OpenTelemetry log record, in the JSON encoding of OTLP (`ExportLogsServiceRequest`; OTLP/HTTP
accepts it with `Content-Type: application/json`, and it needs no protobuf dependency).

Attributes use the OpenTelemetry semantic conventions where one exists —
`http.request.method`, `url.full` (the origin only: a path may carry a token),
`url.scheme`, `server.address`, `server.port`, `client.address`, `client.port`,
`network.peer.address`, `http.response.status_code`, `tls.client.server_name` — and the
project's own under `egress.*` (decision, reason, rule, clause, sandbox, injected header
names, bytes, duration, connection, worker). No secret is in a record (`proxy.audit`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sandbox_egress.common.serve import version
from sandbox_egress.proxy.audit.log import AuditRecord

SCOPE = "sandbox_egress.audit"
_VERSION = version()
# decision -> (severityNumber, severityText): INFO, WARN (report-only), WARN2 (refused)
_SEVERITY = {"allow": (9, "INFO"), "would_deny": (13, "WARN"), "deny": (14, "WARN2")}


def _value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}  # int64 is a string in OTLP/JSON
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, list | tuple):
        return {"arrayValue": {"values": [_value(v) for v in value]}}
    return {"stringValue": str(value)}


def _split(address: str | None) -> tuple[str | None, int | None]:
    """`ip:port` / `[v6]:port` as (address, port)."""
    if not address:
        return None, None
    host, _, port = address.rpartition(":")
    return (host.strip("[]") or address), (int(port) if port.isdigit() else None)


def log_record(record: AuditRecord, at: datetime, worker: int | None = None) -> dict[str, Any]:
    client, client_port = _split(record.client)
    peer, _ = _split(record.upstream)
    origin = None
    if record.scheme and record.method not in ("CONNECT", "TLS", "TCP"):
        origin = f"{record.scheme}://{record.host}" + (f":{record.port}" if record.port else "")
    attributes = {
        "http.request.method": None if record.method in ("TLS", "TCP") else record.method,
        "url.full": origin,
        "url.scheme": record.scheme or None,
        "server.address": record.host,
        "server.port": record.port,
        "client.address": client,
        "client.port": client_port,
        "network.peer.address": peer,
        "http.response.status_code": record.status,
        "tls.client.server_name": record.sni,
        "egress.decision": record.decision,
        "egress.reason": record.reason,
        "egress.rule": record.rule,
        "egress.clause": record.clause,
        "egress.sandbox": record.sandbox,
        "egress.injected": list(record.injected) or None,
        "egress.bytes_sent": record.bytes_sent,
        "egress.bytes_received": record.bytes_received,
        "egress.duration_s": round(record.duration_s, 6),
        "egress.connection": record.connection or None,
        "egress.worker": worker,
    }
    number, text = _SEVERITY.get(record.decision, _SEVERITY["deny"])
    nanos = str(int(at.timestamp() * 1_000_000) * 1000)
    return {
        "timeUnixNano": nanos,
        "observedTimeUnixNano": nanos,
        "severityNumber": number,
        "severityText": text,
        "body": {"stringValue": f"{record.decision} {record.host}: {record.reason}"},
        "attributes": [
            {"key": k, "value": _value(v)} for k, v in attributes.items() if v is not None
        ],
    }


def export_request(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """An `ExportLogsServiceRequest` carrying `records` (from `log_record`)."""
    resource = [
        {"key": "service.name", "value": {"stringValue": "sandbox-egress"}},
        {"key": "service.version", "value": {"stringValue": _VERSION}},
    ]
    return {
        "resourceLogs": [
            {
                "resource": {"attributes": resource},
                "scopeLogs": [{"scope": {"name": SCOPE}, "logRecords": list(records)}],
            }
        ]
    }
