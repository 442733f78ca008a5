"""What an end-to-end test holds: the running proxy, its upstreams, and ways to observe them.

`Harness` is the sandbox's view (requests through the proxy, as raw bytes) plus the
observer's view (the upstream and trap event logs, the audit log, /metrics, the
proxy's own output). Every response obtained through the proxy is remembered so
that a final test can check that no secret ever reached the sandbox in a header
or a refusal body.
"""

from __future__ import annotations

import http.client
import json
import ssl
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox_egress.proxy.audit.log import GATHER_S
from testbed.rawhttp import Conn, Response

REASONS = frozenset(
    {
        "allowlisted",
        "not_allowlisted",
        "loopback",
        "proxy_host",
        "internal_address",
        "port_not_allowed",
        "plaintext_credentials",
        "host_mismatch",
        "no_sni",
        "bad_request",
        "dns_failure",
        "policy_error",
        "method_not_allowed",
        "rule_mismatch",
        "rule_denied",
        "git_push_denied",
        "budget_exceeded",
        "credential_required",
        "placeholder_elsewhere",
        "unknown_sandbox",
        "connection_limit",
        "upstream_tls",
        "mcp_bad_request",
        "mcp_method_denied",
        "mcp_tool_denied",
        "mcp_argument_denied",
        # issue 32
        "credential_unavailable",
        "sigv4_scope_denied",
        "sigv4_unsupported",
        "secret_elsewhere",
        # issue 34
        "budget_unavailable",
        # issues 43, 48
        "upstream_refused",
        "upstream_reset",
        "upstream_timeout",
        # issue 47
        "approval_denied",
        "approval_timeout",
        "approval_limit",
        # issue 46
        "llm_model_denied",
        "llm_bad_request",
        "llm_budget_exceeded",
        "llm_model_unpriced",
    }
)
AUDIT_KEYS = frozenset(
    {
        "time",
        "client",
        "method",
        "scheme",
        "host",
        "port",
        "decision",
        "reason",
        "rule",
        "injected",
        "status",
        "bytes_sent",
        "bytes_received",
        "duration_s",
    }
)


class TunnelRefused(Exception):
    def __init__(self, response: Response) -> None:
        super().__init__(f"CONNECT refused:\n{response.describe()}")
        self.response = response


class JsonLines:
    """An append-only JSON-lines file read from a mark (a line count)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def all(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        # A writer appends a long line in several writes: the part after the last newline
        # is a line still being written, read with the next call.
        text = self.path.read_text(encoding="utf-8").rpartition("\n")[0]
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def mark(self) -> int:
        return len(self.all())

    def since(self, mark: int) -> list[dict[str, Any]]:
        return self.all()[mark:]

    def wait_count(self, mark: int, count: int, timeout: float = 5.0) -> list[dict[str, Any]]:
        """The lines after `mark` once there are at least `count` of them (bounded wait).

        The proxy writes a request's audit line when mitmproxy's `response` hook runs,
        which can be just after the client already holds the whole response.
        """
        deadline = time.monotonic() + timeout
        while len(lines := self.since(mark)) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        return lines

    def wait_for(
        self,
        mark: int,
        predicate: Callable[[dict[str, Any]], bool],
        timeout: float = 5.0,
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            for record in self.since(mark):
                if predicate(record):
                    return record
            if time.monotonic() > deadline:
                lines = "\n".join(json.dumps(r) for r in self.since(mark))
                raise AssertionError(f"no matching line in {self.path.name} after mark:\n{lines}")
            time.sleep(0.05)


class AuditLines(JsonLines):
    """The proxy's audit log. Its writer gathers lines for up to `GATHER_S` before each
    write (D296), so a line can reach the file just after the client holds its response:
    a read first waits until the file has not grown for a few gathering periods."""

    SETTLE_S = 2.5 * GATHER_S
    SETTLE_LIMIT_S = 5.0

    def settle(self) -> None:
        """Wait (bounded) until the file has not grown for `SETTLE_S`."""
        deadline = time.monotonic() + self.SETTLE_LIMIT_S
        size = -1
        while time.monotonic() < deadline:
            now = self.path.stat().st_size if self.path.exists() else 0
            if now == size:
                return
            size = now
            time.sleep(self.SETTLE_S)

    def all(self) -> list[dict[str, Any]]:
        self.settle()
        return super().all()

    def text(self) -> str:
        self.settle()
        return self.path.read_text(encoding="utf-8")


@dataclass
class Harness:
    proxy_host: str
    proxy_port: int
    metrics_host: str
    metrics_port: int
    client_ip: str
    client_net: str
    proxy_ca: Path
    upstream_log: JsonLines
    trap_log: JsonLines
    audit_log: JsonLines
    proxy_stdout: Path
    proxy_stderr: Path
    secrets: tuple[str, ...]
    # Log lengths when the proxy started (the harness probe wrote before that).
    trap_baseline: int = 0
    upstream_baseline: int = 0
    responses: list[Response] = field(default_factory=list)

    # -- the sandbox's side -----------------------------------------------------

    def conn(self) -> Conn:
        return Conn(self.proxy_host, self.proxy_port)

    def remember(self, response: Response) -> Response:
        self.responses.append(response)
        return response

    def client_tls(self, alpn: list[str] | None = None) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.proxy_ca))
        if alpn:
            ctx.set_alpn_protocols(alpn)
        return ctx

    def plain(
        self,
        target: str,
        headers: list[tuple[str, str]] | None = None,
        *,
        host: str | None = None,
        method: str = "GET",
        body: bytes = b"",
    ) -> Response:
        """One absolute-form request on a fresh connection; Host defaults to the URL's."""
        if host is None:
            host = target.split("://", 1)[1].split("/", 1)[0]
        with self.conn() as conn:
            hdrs = [("Host", host), *(headers or []), ("Connection", "close")]
            return self.remember(conn.request(method, target, hdrs, body))

    def connect(self, authority: str) -> Response:
        """A CONNECT on a fresh connection; the response only."""
        with self.conn() as conn:
            return self.remember(conn.connect(authority))

    @contextmanager
    def tunnel(
        self,
        authority: str,
        sni: str | None = "",
        alpn: list[str] | None = None,
        check_hostname: bool = True,
    ) -> Iterator[Conn]:
        """CONNECT then TLS (trusting the proxy CA). `sni=""` means the CONNECT host."""
        conn = self.conn()
        try:
            response = self.remember(conn.connect(authority))
            if response.status != 200:
                raise TunnelRefused(response)
            if sni == "":
                sni = authority.rsplit(":", 1)[0].strip("[]")
            ctx = self.client_tls(alpn)
            if not check_hostname or sni is None:
                ctx.check_hostname = False
            conn.start_tls(ctx, sni)
            yield conn
        finally:
            conn.close()

    def https(
        self,
        authority: str,
        path: str = "/",
        headers: list[tuple[str, str]] | None = None,
        *,
        host: str | None = None,
        method: str = "GET",
        body: bytes = b"",
    ) -> Response:
        """One request inside a fresh intercepted tunnel; Host defaults to the CONNECT host."""
        if host is None:
            host = authority.rsplit(":", 1)[0]
            if not authority.endswith(":443"):
                host = authority
        with self.tunnel(authority) as conn:
            hdrs = [("Host", host), *(headers or [])]
            return self.remember(conn.request(method, path, hdrs, body))

    # -- the observer's side ----------------------------------------------------

    def _metrics_get(self, path: str) -> tuple[int, str, str]:
        conn = http.client.HTTPConnection(self.metrics_host, self.metrics_port, timeout=5)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            return response.status, response.getheader("Content-Type", ""), response.read().decode()
        finally:
            conn.close()

    def metrics_text(self) -> str:
        status, _ctype, text = self._metrics_get("/metrics")
        assert status == 200, f"/metrics answered {status}"
        return text

    def healthz(self) -> int:
        return self._metrics_get("/healthz")[0]

    def status(self) -> dict[str, Any]:
        """`GET /status`, parsed (runtime/status.py)."""
        status, _ctype, text = self._metrics_get("/status")
        assert status == 200, f"/status answered {status}"
        found: dict[str, Any] = json.loads(text)
        return found

    def upstream_requests_since(self, mark: int) -> list[dict[str, Any]]:
        return [r for r in self.upstream_log.since(mark) if r["event"] == "request"]
