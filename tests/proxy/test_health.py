"""`egress-proxy health` against real local HTTP servers on 127.0.0.1."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sandbox_egress.proxy import health
from sandbox_egress.runtime.cli import main


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    status = 200
    paths: list[str]


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self.server.paths.append(self.path)
        body = b"ok\n" if self.server.status == 200 else b"draining\n"
        self.send_response(self.server.status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture
def server() -> Iterator[_Server]:
    httpd = _Server(("127.0.0.1", 0), _Handler)
    httpd.paths = []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_healthy_on_200_exit_0(server: _Server, capsys: pytest.CaptureFixture[str]) -> None:
    port = server.server_address[1]
    assert main(["health", "--metrics", f"127.0.0.1:{port}"]) == 0
    assert server.paths == ["/healthz"]
    assert capsys.readouterr().out == f"http://127.0.0.1:{port}/healthz: 200 OK\n"


def test_unhealthy_on_503_exit_1(server: _Server, capsys: pytest.CaptureFixture[str]) -> None:
    server.status = 503
    port = server.server_address[1]
    assert main(["health", "--metrics", f"127.0.0.1:{port}"]) == 1
    captured = capsys.readouterr()
    assert captured.err == f"http://127.0.0.1:{port}/healthz: 503 Service Unavailable\n"
    assert captured.out == ""


def test_unhealthy_when_nothing_listens(capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    assert main(["health", "--metrics", f"127.0.0.1:{port}"]) == 1
    assert capsys.readouterr().err == f"http://127.0.0.1:{port}/healthz: Connection refused\n"


def test_unhealthy_when_the_answer_does_not_come_within_the_timeout() -> None:
    with socket.socket() as silent:  # accepts (backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        port = silent.getsockname()[1]
        outcome = health.probe("127.0.0.1", port, timeout=0.2)
    assert outcome == health.Health(False, f"http://127.0.0.1:{port}/healthz: timed out")


def test_a_wildcard_listen_address_is_probed_on_loopback(server: _Server) -> None:
    port = server.server_address[1]
    assert health.probe("0.0.0.0", port) == health.Health(
        True, f"http://127.0.0.1:{port}/healthz: 200 OK"
    )


def test_proxy_environment_is_not_used(server: _Server, monkeypatch: pytest.MonkeyPatch) -> None:
    # A proxy that refuses everything: the probe would fail if it went there.
    refusing = f"http://127.0.0.1:{free_port()}"
    for variable in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY"):
        monkeypatch.setenv(variable, refusing)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert main(["health", "--metrics", f"127.0.0.1:{server.server_address[1]}"]) == 0
    assert server.paths == ["/healthz"]
