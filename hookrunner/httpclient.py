"""POSTing an event to an https handler, with one total deadline.

Invariants (docs/hooks.md#execution-and-decisions; docs/hooks.md#command-line):
* the host is spelled as the egress proxy spells it (`hookrunner.handlerhost`):
  the CONNECT authority, the resolved name, SNI and ``Host`` are one A-label;
* https only; the certificate is verified against ``--ca-file``, else the
  bundle named by ``SSL_CERT_FILE``, else the system store;
* the proxy comes from ``https_proxy`` / ``HTTPS_PROXY`` (lower case wins) and
  is skipped for hosts matched by ``no_proxy`` / ``NO_PROXY``; the tunnel is a
  CONNECT to the proxy, TLS runs end to end inside it (so the egress proxy can
  intercept it and inject its transform headers);
* redirects are never followed: a 3xx is just a non-2xx status;
* the deadline covers everything (DNS, connect, CONNECT, TLS, request,
  response): a watchdog shuts the socket down when it passes, so a server that
  trickles bytes cannot keep the runner past it; a resolver that hangs is left
  behind in a daemon thread and not waited for;
* at most ``cap`` bytes of body are read; failures come back as a result,
  never as an exception, and their text never contains the proxy's credentials;
* an unusable proxy setting is ``PROXY_UNUSABLE``, not a network error: the
  session reports it once, when it opens (`proxyroute.proxy_problem`).
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from sandbox_egress.common.process import OUTPUT_CAP
from sandbox_egress.hookrunner.handlerhost import HostError, handler_host
from sandbox_egress.hookrunner.proxyroute import (
    ProxyConfigError,
    ProxyError,
    ProxyRefused,
    open_tunnel,
    route_for,
)


class HttpFailure(StrEnum):
    TIMEOUT = "timeout"
    NETWORK = "network"
    TLS = "tls"
    PROXY_REFUSED = "proxy_refused"
    PROXY_UNUSABLE = "proxy_unusable"  # HTTPS_PROXY cannot be used: a configuration problem


@dataclass(frozen=True)
class HttpResult:
    status: int | None
    body: bytes
    truncated: bool
    duration: float
    failure: HttpFailure | None = None
    detail: str = ""
    location: str | None = None


class _Failed(Exception):
    def __init__(self, failure: HttpFailure, detail: str) -> None:
        super().__init__(detail)
        self.failure = failure
        self.detail = detail


class HttpClient:
    """Sends handler requests; holds the TLS context so the CA is loaded once."""

    def __init__(self, environ: Mapping[str, str], ca_file: str | None = None) -> None:
        self.environ = dict(environ)
        self.ca_file = ca_file or self.environ.get("SSL_CERT_FILE") or None
        self._context: ssl.SSLContext | None = None
        self._context_error: str | None = None

    def context(self) -> ssl.SSLContext:
        if self._context is None and self._context_error is None:
            try:
                self._context = ssl.create_default_context(cafile=self.ca_file)
            except (OSError, ssl.SSLError) as exc:
                self._context_error = f"cannot load the CA file: {exc.strerror or exc}"
        if self._context is None:
            raise _Failed(HttpFailure.TLS, self._context_error or "no TLS context")
        return self._context

    def post(
        self,
        url: str,
        body: bytes,
        headers: tuple[tuple[str, str], ...],
        timeout: float,
        *,
        read_body: bool = True,
        cap: int = OUTPUT_CAP,
    ) -> HttpResult:
        started = time.monotonic()
        watchdog = _Watchdog(started + timeout)
        try:
            status, data, truncated, location = self._exchange(
                _Request(url, body, headers, read_body, cap), watchdog
            )
        except _Failed as exc:
            return _failed(watchdog, exc.failure, exc.detail, started)
        except ProxyConfigError as exc:
            detail = f"{exc}; reported once as a configuration problem"
            return _failed(watchdog, HttpFailure.PROXY_UNUSABLE, detail, started)
        except ProxyRefused as exc:
            return _failed(watchdog, HttpFailure.PROXY_REFUSED, str(exc), started)
        except ProxyError as exc:
            return _failed(watchdog, HttpFailure.NETWORK, str(exc), started)
        except ssl.SSLError as exc:
            return _failed(watchdog, HttpFailure.TLS, f"TLS failed: {_reason(exc)}", started)
        except (OSError, http.client.HTTPException, ValueError) as exc:
            return _failed(watchdog, HttpFailure.NETWORK, _describe(exc), started)
        return HttpResult(status, data, truncated, time.monotonic() - started, location=location)

    def _exchange(
        self, request: _Request, watchdog: _Watchdog
    ) -> tuple[int, bytes, bool, str | None]:
        parts = urlsplit(request.url)
        if parts.scheme != "https" or not parts.hostname:
            raise _Failed(HttpFailure.NETWORK, "not an https URL")
        try:
            host = handler_host(parts)
        except HostError:
            raise _Failed(HttpFailure.NETWORK, "invalid host name") from None
        port = parts.port or 443
        route = route_for(host, port, self.environ)
        context = self.context()
        target = (route.proxy_host, route.proxy_port) if route.proxy else (host, port)
        raw = _connect(target[0], target[1], watchdog)
        with contextlib.ExitStack() as closing:
            closing.callback(raw.close)
            watchdog.arm(raw)
            try:
                if route.proxy:
                    open_tunnel(raw, host, port, route, watchdog.remaining)
                raw.settimeout(watchdog.remaining())
                tls = context.wrap_socket(raw, server_hostname=host)
                closing.callback(tls.close)
                connection = http.client.HTTPSConnection(host, port, context=context)
                connection.sock = tls
                closing.callback(connection.close)
                target_path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
                sent = {"Content-Type": "application/json", **dict(request.headers)}
                connection.request("POST", target_path, body=request.body, headers=sent)
                tls.settimeout(watchdog.remaining())
                response = connection.getresponse()
                location = response.getheader("Location")
                data, truncated = b"", False
                if request.read_body and 200 <= response.status < 300:
                    data, truncated = _read_capped(response, request.cap, tls, watchdog)
                return response.status, data, truncated, location
            finally:
                watchdog.disarm()  # before anything is closed: the watchdog holds the fd number


@dataclass(frozen=True)
class _Request:
    url: str
    body: bytes
    headers: tuple[tuple[str, str], ...]
    read_body: bool
    cap: int


class _Watchdog:
    """Shuts the connection's socket down at the deadline, from a timer thread."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.fired = False
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._timer: threading.Timer | None = None

    def remaining(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise _Failed(HttpFailure.TIMEOUT, "deadline passed")
        return left

    def arm(self, sock: socket.socket) -> None:
        with self._lock:
            self._fd = sock.fileno()
        self._timer = threading.Timer(max(0.0, self.deadline - time.monotonic()), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            if self._fd is None:
                return
            self.fired = True
            # A socket object borrowed by fd: the fd stays open (the owner closes
            # it after disarm), only the connection is shut down.
            borrowed = socket.socket(fileno=self._fd)
            try:
                borrowed.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            finally:
                borrowed.detach()

    def disarm(self) -> None:
        with self._lock:
            self._fd = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer.join()


def _connect(host: str, port: int, watchdog: _Watchdog) -> socket.socket:
    addresses = _resolve(host, port, watchdog)
    last: OSError | None = None
    for family, kind, proto, _, address in addresses:
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(watchdog.remaining())
            sock.connect(address)
            return sock
        except TimeoutError:
            sock.close()
            raise _Failed(HttpFailure.TIMEOUT, "connect timed out") from None
        except OSError as exc:
            sock.close()
            last = exc
        except BaseException:
            sock.close()
            raise
    raise _Failed(HttpFailure.NETWORK, f"cannot connect to {host}:{port}: {_describe(last)}")


def _resolve(host: str, port: int, watchdog: _Watchdog) -> list[tuple[Any, ...]]:
    found: list[list[tuple[Any, ...]]] = []
    errors: list[OSError] = []

    def lookup() -> None:
        try:
            found.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except OSError as exc:
            errors.append(exc)

    resolver = threading.Thread(target=lookup, name="hookrunner-resolve", daemon=True)
    resolver.start()
    resolver.join(watchdog.remaining())
    if resolver.is_alive():
        raise _Failed(HttpFailure.TIMEOUT, f"resolving {host} timed out")
    if errors or not found:
        raise _Failed(HttpFailure.NETWORK, f"cannot resolve {host}: {_describe(errors[0])}")
    return found[0]


def _read_capped(
    response: http.client.HTTPResponse, cap: int, tls: socket.socket, watchdog: _Watchdog
) -> tuple[bytes, bool]:
    data = bytearray()
    while len(data) <= cap:
        tls.settimeout(watchdog.remaining())
        chunk = response.read1(64 * 1024)
        if not chunk:
            break
        data += chunk
    if watchdog.fired:
        raise _Failed(HttpFailure.TIMEOUT, "deadline passed while reading the body")
    return bytes(data[:cap]), len(data) > cap


def _failed(watchdog: _Watchdog, failure: HttpFailure, detail: str, started: float) -> HttpResult:
    if failure is not HttpFailure.TIMEOUT and (
        watchdog.fired or time.monotonic() >= watchdog.deadline
    ):
        failure, detail = HttpFailure.TIMEOUT, f"deadline passed ({detail})"
    return HttpResult(None, b"", False, time.monotonic() - started, failure, detail)


def _reason(exc: ssl.SSLError) -> str:
    return str(getattr(exc, "verify_message", None) or exc.reason or exc)


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "no address"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
