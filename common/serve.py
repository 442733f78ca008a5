"""The metrics and health server of both halves: `/metrics` and `/healthz` on one port
(and the proxy's `/status`, when its owner sets `status`).

`MetricsServer` serves a Prometheus registry from a daemon thread. `/healthz` is 200
once `ready` is set, unless the process is draining (SIGTERM) or the owner's event
loop stopped stamping `heartbeat` for `STALL_S` seconds (a wedged loop): then 503
with the cause as the body. Scrapes are not logged.

The server is bounded (issue 21): at most `max_connections` connections are served at
once (one thread each; more are closed at once and reported to `on_refused`), and a
connection that has not sent its request within `request_timeout` seconds, or stalls
reading the answer that long, is closed. A peer that hangs up early (a probe giving up
mid-request, a reset) is not news: nothing is printed (issue 43); any other failure of a
handler is still reported, as `socketserver` does.

`add_build_info` registers `<area>_build_info{version}` (always 1) and, on a registry
of the process's own, the `process_*` series (CPU, memory, open files, start time);
prometheus_client's default registry already carries those.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
import weakref
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import metadata
from typing import Any, Protocol

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Gauge,
    ProcessCollector,
    generate_latest,
)

from sandbox_egress.common.endpoint import format_endpoint

# /healthz fails when the event loop has not stamped its heartbeat for this long.
STALL_S = 10.0
# Connections served at once, and how long one may take (docs/configuration.md#fair-sharing).
MAX_CONNECTIONS = 32
REQUEST_TIMEOUT_S = 5.0
ADMIN_BODY = 64 * 1024  # the largest admin request body read
DISTRIBUTION = "sandbox-egress"


def version() -> str:
    """The installed version of this project ("unknown" when run from a bare checkout)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


_build_infos: weakref.WeakKeyDictionary[CollectorRegistry, Gauge] = weakref.WeakKeyDictionary()
_build_infos_lock = threading.Lock()


def add_build_info(registry: CollectorRegistry, area: str, *, process: bool = True) -> Gauge:
    """`<area>_build_info{version}` = 1, and `process_*` unless the registry has them.

    Once per registry: a second call returns the gauge of the first (a program that
    serves the process-wide registry may start its server more than once).
    """
    with _build_infos_lock:
        found = _build_infos.get(registry)
        if found is None:
            found = _build_infos[registry] = _add_build_info(registry, area, process)
        return found


def _add_build_info(registry: CollectorRegistry, area: str, process: bool) -> Gauge:
    info = Gauge(
        f"{area}_build_info",
        "Always 1; the label says which version of the program is running.",
        ["version"],
        registry=registry,
        multiprocess_mode="max",
    )
    info.labels(version()).set(1)
    if process and registry is not REGISTRY:
        ProcessCollector(registry=registry)
    return info


class _Handler(BaseHTTPRequestHandler):
    server: MetricsServer

    def setup(self) -> None:
        self.request.settimeout(self.server.request_timeout)  # reads and writes alike
        super().setup()

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._reply(200, generate_latest(self.server.registry), CONTENT_TYPE_LATEST)
        elif path == "/healthz":
            problem = self.server.problem()
            if problem is None:
                self._reply(200, b"ok\n", "text/plain")
            else:
                self._reply(503, problem.encode() + b"\n", "text/plain")
        elif path == "/status" and self.server.status is not None:
            body = json.dumps(self.server.status(), indent=1).encode() + b"\n"
            self._reply(200, body, "application/json")
        elif not self._admin("GET", path):
            self._reply(404, b"not found\n", "text/plain")

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        if not self._admin("POST", self.path.split("?", 1)[0]):
            self._reply(404, b"not found\n", "text/plain")

    def _admin(self, method: str, path: str) -> bool:
        """The owner's admin API (`admin`: the proxy's /approvals, /usage), when it serves
        `path`."""
        admin = self.server.admin
        if admin is None or not admin.serves(path):
            return False
        size = self.headers.get("Content-Length", "0")
        length = int(size) if size.isascii() and size.isdigit() else -1  # not "²" (D544)
        if not 0 <= length <= ADMIN_BODY:
            self._reply(400, b'{"error": "bad_request"}\n', "application/json")
            return True
        body = self.rfile.read(length) if length else b""
        authorization = self.headers.get("Authorization")
        status, answer = admin.answer(method, self.path, authorization, body)  # with its query
        self._reply(status, answer, "application/json")
        return True

    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass  # scrapes are not news


class Admin(Protocol):
    """An API served beside the metrics (the proxy's `runtime.admin`), from this thread:
    `serves` sees the bare path, `answer` the request target (its query too)."""

    def serves(self, path: str) -> bool: ...

    def answer(
        self, method: str, path: str, authorization: str | None, body: bytes
    ) -> tuple[int, bytes]: ...


class MetricsServer(ThreadingHTTPServer):
    """Serves `/metrics` and `/healthz` from a daemon thread (see the module docstring).

    Binding happens in the constructor (OSError when the port is taken); `start` begins
    serving, `stop` ends it and joins the thread.
    """

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        registry: CollectorRegistry,
        *,
        max_connections: int = MAX_CONNECTIONS,
        request_timeout: float = REQUEST_TIMEOUT_S,
        on_refused: Callable[[], None] = lambda: None,
    ) -> None:
        self.registry = registry
        self.request_timeout = request_timeout
        self._slots = threading.BoundedSemaphore(max_connections)
        self._on_refused = on_refused
        self.ready = threading.Event()
        self.draining = threading.Event()  # SIGTERM: no longer a place to send traffic
        self.heartbeat: float | None = None  # time.monotonic() of the loop's last stamp
        self.status: Callable[[], dict[str, Any]] | None = None  # GET /status (runtime.status)
        self.admin: Admin | None = None  # the proxy's approvals API (runtime.admin, issue 47)
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)
        self._thread = threading.Thread(target=self.serve_forever, name="metrics", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        """The bound (host, port): the real port when 0 was asked for."""
        host, port = self.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        return f"http://{format_endpoint(*self.address)}/metrics"

    def problem(self) -> str | None:
        """Why the process is not healthy (the /healthz body), or None when it is."""
        if not self.ready.is_set():
            return "starting"
        if self.draining.is_set():
            return "draining"
        beat = self.heartbeat
        if beat is not None and time.monotonic() - beat > STALL_S:
            return "event loop stalled"
        return None

    def process_request(self, request: Any, client_address: Any) -> None:
        """One thread per connection, up to the bound; past it the connection is closed."""
        if not self._slots.acquire(blocking=False):
            self._on_refused()
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A peer that hung up (reset, broken pipe, timed out) is silent; anything else is
        printed with its traceback, as `socketserver` does."""
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self.shutdown()
            self._thread.join()
        self.server_close()
