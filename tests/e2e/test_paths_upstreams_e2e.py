"""The path canonicaliser (proxy/paths.py) against how real servers resolve the same bytes.

Property: whenever `canonical_path` accepts a raw path as P, an upstream that receives the
raw bytes resolves them to exactly P decoded once: the segments the rules matched are the
segments the server serves. Checked against nginx (`$uri`: decoded, slashes merged, dot
segments resolved) and Python's WSGI reference server (`PATH_INFO`). Both listen on
loopback; no proxy is involved.
"""

from __future__ import annotations

import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote_to_bytes
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox_egress.proxy.paths import canonical_path
from testbed import nginx, procs

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
CONF = """\
daemon off;
master_process off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 64; }}
http {{
    access_log off;
{temp_paths}    server {{
        listen 127.0.0.1:{port};
        location / {{
            default_type application/octet-stream;
            return 200 "$uri";
        }}
    }}
}}
"""

# Characters whose spellings servers read differently, and plain ones around them.
ALPHABET = list("/.%;\\~-ab") + ["%2e", "%2E", "%2f", "%2F", "%5c", "%00", "%25", "%41", "%7e"]
RAW_PATHS = st.lists(st.sampled_from(ALPHABET), max_size=12).map(lambda parts: "/" + "".join(parts))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def resolved(port: int, raw: str) -> tuple[int, bytes]:
    """(status, body) of `GET raw` sent as these exact bytes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"GET {raw} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


@pytest.fixture(scope="module")
def nginx_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    if not Path(NGINX).exists():
        pytest.fail("nginx is needed (scripts/install-test-deps installs it)")
    work = tmp_path_factory.mktemp("nginx-paths")
    port = free_port()
    conf = work / "nginx.conf"
    conf.write_text(CONF.format(dir=work, port=port, temp_paths=nginx.temp_paths(work)))
    child = procs.start(
        "nginx-paths", [NGINX, "-c", str(conf), "-e", str(work / "error.log")], work
    )

    def accepting() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return False
        return True

    try:
        procs.wait_until("nginx accepting", accepting, timeout=20, child=child)
        yield port
    finally:
        child.stop()


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def path_info(environ: dict[str, object], start_response: object) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "application/octet-stream")])  # type: ignore[operator]
    return [str(environ["PATH_INFO"]).encode("latin-1")]


@pytest.fixture(scope="module")
def wsgi_port() -> Iterator[int]:
    server: WSGIServer = make_server("127.0.0.1", 0, path_info, handler_class=QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


PROPERTY = settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def assert_served_as_accepted(port: int, raw: str) -> None:
    canonical = canonical_path(raw)
    if canonical is not None:
        assert resolved(port, raw) == (200, unquote_to_bytes(canonical)), raw


@PROPERTY
@given(raw=RAW_PATHS)
def test_nginx_resolves_an_accepted_path_to_itself(nginx_port: int, raw: str) -> None:
    assert_served_as_accepted(nginx_port, raw)


@PROPERTY
@given(raw=RAW_PATHS)
def test_wsgi_resolves_an_accepted_path_to_itself(wsgi_port: int, raw: str) -> None:
    assert_served_as_accepted(wsgi_port, raw)


@pytest.mark.parametrize("raw", ["/a/../b", "/a/%2e%2e/b", "/a//b", "/a%2fb", "/a/./b"])
def test_the_refused_spellings_are_ones_nginx_reads_as_another_path(
    nginx_port: int, raw: str
) -> None:
    # The canonicaliser refuses them because nginx does not serve them as written.
    assert canonical_path(raw) is None
    status, body = resolved(nginx_port, raw)
    assert status != 200 or body != raw.encode()
