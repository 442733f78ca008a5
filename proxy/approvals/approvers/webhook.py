"""The `webhook` approver: an HMAC-signed POST of the approval's JSON; the answer comes
back through the admin API (docs/configuration.md#approvals).

The body is signed with the approver's secret: `X-Egress-Signature: sha256=<hex
HMAC-SHA256 of the exact body>`. A 2xx answer means "asked" (`pending`): the held
request keeps waiting for `POST /approvals/{id}`. Anything else (an error status, a
refused connection, or no status line within `TIMEOUT_S`, one deadline for
the whole exchange: D545) is no answer: the next approver is asked. The
URL is https, or http to a loopback address (a receiver beside the proxy). Redirects are
not followed. The secret is never logged.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import json
import logging
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from sandbox_egress.proxy.approvals.approvers.base import Answer, Approver, Report

TIMEOUT_S = 10.0
HEADER = "X-Egress-Signature"
_STATUS = re.compile(rb"HTTP/1\.[01] ([0-9]{3})[ \r\n]")

log = logging.getLogger("sandbox_egress.approvals")


def signature(secret: bytes, body: bytes) -> str:
    """The header's value for `body`: `sha256=<hex>`."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


@dataclass(frozen=True, slots=True)
class WebhookApprover:
    url: str
    secret: bytes = field(repr=False)
    kind: str = "webhook"

    async def ask(self, approval: Mapping[str, Any]) -> Answer | None:
        body = json.dumps(dict(approval), separators=(",", ":")).encode()
        try:
            async with asyncio.timeout(TIMEOUT_S):
                status = await self._post(body)
        except (OSError, TimeoutError, ValueError):
            status = None
        if status is None or not 200 <= status < 300:
            log.warning("approver webhook %s gave no answer (status %s)", self.url, status)
            return None
        return Answer("pending")

    async def _post(self, body: bytes) -> int | None:
        """The answer's status: one POST on a connection of its own (no proxy, no
        redirect followed), read up to its status line, within the caller's deadline."""
        parts = urlsplit(self.url)
        host, https = parts.hostname or "", parts.scheme == "https"
        context = ssl.create_default_context() if https else None
        reader, writer = await asyncio.open_connection(
            host, parts.port or (443 if https else 80), ssl=context
        )
        try:
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            authority = parts.netloc.rpartition("@")[2]
            head = (
                f"POST {target} HTTP/1.1\r\nHost: {authority}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                f"{HEADER}: {signature(self.secret, body)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode("ascii") + body)
            await writer.drain()
            match = _STATUS.match(await reader.readline())
            return int(match[1]) if match else None
        finally:
            writer.close()


def _acceptable(url: Any) -> bool:
    if not isinstance(url, str):
        return False
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    if parts.scheme == "https" and parts.hostname:
        return True
    if parts.scheme != "http" or not parts.hostname:
        return False
    if parts.hostname == "localhost":
        return True
    try:
        return ipaddress.ip_address(parts.hostname).is_loopback
    except ValueError:
        return False


class _Kind:
    def parse(
        self, item: dict[str, Any], where: str, report: Report, environ: Mapping[str, str] | None
    ) -> Approver | None:
        raw = item.get("webhook")
        if not isinstance(raw, dict):
            report(f"{where}.webhook", "expected a mapping {url, secret}")
            return None
        for key in raw:
            if key not in ("url", "secret"):
                report(f"{where}.webhook.{key}", "unknown key (expected: url, secret)")
        if not _acceptable(raw.get("url")):
            report(f"{where}.webhook.url", "expected an https:// URL (http:// only to loopback)")
            return None
        secret = raw.get("secret")
        if not isinstance(secret, str) or not secret:
            report(f"{where}.webhook.secret", "expected a string, e.g. ${file:/run/secrets/hook}")
            return None
        from sandbox_egress.proxy.config.references import secret_value
        from sandbox_egress.proxy.values.secret import Unresolved

        value = secret_value(secret, f"{where}.webhook.secret", environ, report)
        if value is None:
            return None
        text = "" if isinstance(value, Unresolved) else value.reveal()
        return WebhookApprover(str(raw["url"]), text.encode())


KIND = _Kind()
