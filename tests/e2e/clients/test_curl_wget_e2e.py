"""curl and wget through the proxy, with the proxy variables and with their own options.

CA recipes (README): curl reads `CURL_CA_BUNDLE` (or `--cacert`), wget `--ca-certificate`
(or `ca_certificate` in wgetrc); both honour `https_proxy`. Each test checks what the
upstream (nginx) logged and what the client printed, not only the exit status.
"""

from __future__ import annotations

import hashlib

import pytest

from testbed import registries
from tests.e2e.clients.conftest import BASE_URL, HTTPS_PORT, Clients
from tests.e2e.clients.expect import assert_injected_once, assert_no_secret

pytestmark = pytest.mark.netns

OWN = "Authorization: Bearer sandbox-own-token"


def test_curl_https_proxy_env_injects_once(clients: Clients) -> None:
    mark = clients.nginx.mark()
    result = clients.run(
        ["curl", "-sS", "-D", "-", "-H", OWN, "--http1.1", f"{BASE_URL}/headers"],
        clients.proxy_env(CURL_CA_BUNDLE=clients.ca),
    )
    assert result.returncode == 0, result.stderr
    assert "HTTP/1.1 200" in result.stdout
    entry = assert_injected_once(clients, mark, "/headers")
    assert entry["proto"] == "HTTP/1.1"
    assert_no_secret(clients, result.stdout, result.stderr)


def test_curl_proxy_option_http2_inside_the_tunnel(clients: Clients) -> None:
    mark = clients.nginx.mark()
    result = clients.run(
        ["curl", "-sS", "--proxy", clients.proxy_url, "--cacert", clients.ca, "--http2",
         "-H", OWN, "-w", "%{http_version}\n", "-o", "/dev/null", f"{BASE_URL}/headers"],
        clients.env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "2"
    entry = assert_injected_once(clients, mark, "/headers")
    assert (entry["proto"], entry["alpn"]) == ("HTTP/2.0", "h2")
    assert_no_secret(clients, result.stdout, result.stderr)


def test_curl_refused_host_shows_the_403(clients: Clients) -> None:
    mark = clients.nginx.mark()
    result = clients.run(
        ["curl", "-sS", "-o", "/dev/null", f"https://notlisted.test:{HTTPS_PORT}/headers"],
        clients.proxy_env(CURL_CA_BUNDLE=clients.ca),
    )
    assert result.returncode == 56  # CURLE_RECV_ERROR: the proxy refused the tunnel
    assert "CONNECT tunnel failed, response 403" in result.stderr
    assert clients.nginx.since(mark) == []


def test_curl_download_arrives_intact(clients: Clients) -> None:
    output = clients.home / "curl-big.bin"
    result = clients.run(
        ["curl", "-sS", "-o", str(output), f"{BASE_URL}/big.bin"],
        clients.proxy_env(CURL_CA_BUNDLE=clients.ca),
    )
    assert result.returncode == 0, result.stderr
    assert hashlib.sha256(output.read_bytes()).hexdigest() == clients.content.big_sha256
    output.unlink()


def test_curl_http2_download_arrives_intact_over_http2_on_both_legs(clients: Clients) -> None:
    """A 32 MiB body over HTTP/2 on both legs (curl offers `h2`, nginx picks it), the path
    whose DATA frames the proxy merges per upstream read (runtime/engine/h2data.py, D289)."""
    mark = clients.nginx.mark()
    output = clients.home / "curl-h2-big.bin"
    result = clients.run(
        ["curl", "-sS", "--proxy", clients.proxy_url, "--cacert", clients.ca, "--http2",
         "-w", "%{http_version} %{size_download}\n", "-o", str(output), f"{BASE_URL}/big.bin"],
        clients.env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2", str(registries.BIG_BYTES)]
    assert output.stat().st_size == registries.BIG_BYTES
    assert hashlib.sha256(output.read_bytes()).hexdigest() == clients.content.big_sha256
    entries = [e for e in clients.nginx.since(mark) if e["uri"] == "/big.bin"]
    assert [(e["proto"], e["alpn"], e["status"], e["bytes"]) for e in entries] == [
        ("HTTP/2.0", "h2", 200, registries.BIG_BYTES)
    ]
    output.unlink()


def test_wget_injects_once_and_downloads_intact(clients: Clients) -> None:
    mark = clients.nginx.mark()
    headers, big = clients.home / "wget-headers.txt", clients.home / "wget-big.bin"
    result = clients.run(
        ["wget", "-q", "--ca-certificate", clients.ca, "--header", OWN,
         "-O", str(headers), f"{BASE_URL}/headers"],
        clients.proxy_env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert headers.read_text() == "ok\n"
    assert_injected_once(clients, mark, "/headers")
    result = clients.run(
        ["wget", "-q", "--ca-certificate", clients.ca, "-O", str(big), f"{BASE_URL}/big.bin"],
        clients.proxy_env(),
    )
    assert result.returncode == 0, result.stderr
    assert hashlib.sha256(big.read_bytes()).hexdigest() == clients.content.big_sha256
    assert_no_secret(clients, result.stdout, result.stderr, headers.read_text())
    big.unlink()


def test_wget_refused_host_shows_the_403(clients: Clients) -> None:
    mark = clients.nginx.mark()
    result = clients.run(
        ["wget", "--ca-certificate", clients.ca, "-O", "/dev/null",
         f"https://notlisted.test:{HTTPS_PORT}/headers"],
        clients.proxy_env(),
    )  # fmt: skip
    assert result.returncode == 4  # wget: network failure
    assert "Proxy tunneling failed: Forbidden" in result.stderr
    assert clients.nginx.since(mark) == []
