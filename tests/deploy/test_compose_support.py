"""The compose example's own programs, run for real: the PKI script and the telemetry server.

The proxy verifies the telemetry server against the PKI's CA under the name
`telemetry.internal`; the server answers 200 only to the token the proxy injects.
"""

from __future__ import annotations

import json
import socket
import ssl
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.test_compose import ROOT, load_module

NAME = "telemetry.internal"
TOKEN = "support-test-token-41d2"
EVENT = {"tool_call": {"name": "read_file", "args": {"path": "a.txt"}}, "environment_id": "env_1"}


@pytest.fixture()
def pki(tmp_path: Path) -> dict[str, Path]:
    make_pki = load_module(ROOT / "deploy/compose/pki/make_pki.py")
    ca = tmp_path / "upstream-ca" / "ca.pem"
    tls = tmp_path / "telemetry-tls"
    assert make_pki.main(["--name", NAME, "--ca-out", str(ca), "--tls-dir", str(tls)]) == 0
    return {"ca": ca, "cert": tls / "server.pem", "key": tls / "server-key.pem"}


@pytest.fixture()
def telemetry(pki: dict[str, Path], tmp_path: Path) -> Iterator[int]:
    server_module = load_module(ROOT / "deploy/compose/telemetry/server.py")
    token_file = tmp_path / "telemetry_token"
    token_file.write_text(TOKEN + "\n")
    args = server_module.parser().parse_args(
        ["--listen", "127.0.0.1:0", "--cert", str(pki["cert"]), "--key", str(pki["key"]),
         "--token-file", str(token_file)]
    )  # fmt: skip
    server = server_module.build_server(args)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def post(
    port: int, ca: Path, authorization: str | None, path: str = "/api/v1/agent-events"
) -> tuple[int, Any]:
    context = ssl.create_default_context(cafile=str(ca))
    body = json.dumps(EVENT).encode()
    head = f"POST {path} HTTP/1.1\r\nHost: {NAME}:8443\r\nContent-Type: application/json\r\n"
    head += f"Content-Length: {len(body)}\r\nConnection: close\r\n"
    if authorization is not None:
        head += f"Authorization: {authorization}\r\n"
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=NAME) as tls,
    ):
        tls.sendall(head.encode() + b"\r\n" + body)
        response = b""
        while chunk := tls.recv(65536):
            response += chunk
    status_line, _, rest = response.partition(b"\r\n")
    return int(status_line.split()[1]), json.loads(rest.partition(b"\r\n\r\n")[2])


def test_pki_writes_a_private_key_only_for_the_server(pki: dict[str, Path]) -> None:
    assert stat.S_IMODE(pki["key"].stat().st_mode) == 0o600
    files = sorted(p.name for p in pki["ca"].parent.parent.rglob("*") if p.is_file())
    assert files == ["ca.pem", "server-key.pem", "server.pem"]  # no CA key anywhere
    assert b"PRIVATE KEY" not in pki["ca"].read_bytes()


def test_pki_is_idempotent(pki: dict[str, Path]) -> None:
    make_pki = load_module(ROOT / "deploy/compose/pki/make_pki.py")
    before = pki["cert"].read_bytes()
    assert make_pki.make(NAME, pki["ca"], pki["cert"].parent) is False
    assert pki["cert"].read_bytes() == before


def test_server_certificate_verifies_for_the_name_and_the_token_is_checked(
    telemetry: int, pki: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert post(telemetry, pki["ca"], f"Bearer {TOKEN}") == (200, {"received": True})
    assert post(telemetry, pki["ca"], "Bearer wrong") == (
        401,
        {"error": "missing or wrong bearer token"},
    )
    assert post(telemetry, pki["ca"], None) == (401, {"error": "missing or wrong bearer token"})
    assert post(telemetry, pki["ca"], f"Bearer {TOKEN}", path="/other") == (
        404,
        {"error": "not found"},
    )
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(x["path"], x["authorized"], x["tool"]) for x in lines] == [
        ("/api/v1/agent-events", True, "read_file"),
        ("/api/v1/agent-events", False, "read_file"),
        ("/api/v1/agent-events", False, "read_file"),
        ("/other", True, "read_file"),
    ]
    assert TOKEN not in json.dumps(lines)


def test_server_certificate_is_refused_under_another_name(
    telemetry: int, pki: dict[str, Path]
) -> None:
    context = ssl.create_default_context(cafile=str(pki["ca"]))
    with (
        socket.create_connection(("127.0.0.1", telemetry), timeout=5) as raw,
        pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"),
    ):
        context.wrap_socket(raw, server_hostname="telemetry.example.com")
