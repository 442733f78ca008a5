"""The audit: one line per decision (`proxy.audit.log`), in a format of `AUDIT_FORMATS`
(`--audit-format`), and its spans exported as OTLP (`proxy.audit.otlp`). A new format
is a module here with an `AuditLog` subclass and a row below."""

from __future__ import annotations

from sandbox_egress.proxy.audit.log import AuditLog
from sandbox_egress.proxy.audit.ocsf import OcsfAuditLog

AUDIT_FORMATS: dict[str, type[AuditLog]] = {"jsonl": AuditLog, "ocsf": OcsfAuditLog}
