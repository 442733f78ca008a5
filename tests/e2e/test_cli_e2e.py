"""End to end, the command line (README.md#command-line): `check`, `ca`, and `run` refusing a bad configuration.

These run the real `egress-proxy` executable. A bad configuration must be reported with
the file name, the entry index and the problem, and never with a secret value, whether
the secret comes from the environment or from a file. `run` must exit non-zero before
listening; it is given loopback addresses (nothing here needs a namespace).
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from testbed import procs

EGRESS_PROXY = Path(sys.executable).parent / "egress-proxy"
TIMEOUT = 60

GOOD_ENTRIES = """\
network:
  allowlist:
    - domain: api.example.test
      transform:
        Authorization: "Bearer ${E2E_CLI_SECRET}"
    - domain: "*.example.test"
"""

# Each bad entry is entry index 2 of its file.
BAD_ENTRIES = {
    "unknown_key": "    - {domain: b.test, domian: c.test}\n",
    "leading_star_without_dot": '    - domain: "*foo.test"\n',
    "double_star": '    - domain: "**"\n',
    "wildcard_in_the_middle": '    - domain: "a.*.test"\n',
    "empty_domain": '    - domain: ""\n',
    "loopback_cidr": "    - domain: 127.0.0.0/8\n",
    "localhost": "    - domain: localhost\n",
    "ports_not_a_list": '    - {domain: b.test, ports: "443"}\n',
    "port_out_of_range": "    - {domain: b.test, ports: [70000]}\n",
    "allow_plaintext_not_bool": '    - {domain: b.test, allow_plaintext: "yes"}\n',
    "unset_variable": '    - {domain: b.test, transform: {X-Key: "${E2E_CLI_UNSET}"}}\n',
    "secret_with_crlf_from_env": '    - {domain: b.test, transform: {X-Key: "${E2E_CLI_CRLF}"}}\n',
    "secret_with_nul_from_file": '    - {domain: b.test, transform: {X-Key: "${file:FILE}"}}\n',
    "header_name_with_cr": '    - {domain: b.test, transform: {"X-Bad\\rName": v}}\n',
    "literal_value_with_lf": '    - {domain: b.test, transform: {X-Key: "a\\nb"}}\n',
}
RUN_CASES = ["leading_star_without_dot", "unset_variable", "secret_with_crlf_from_env"]


def names_entry_2(output: str) -> bool:
    return re.search(r"allowlist\[2\]|\bentry #?2\b|\bindex 2\b", output) is not None


@pytest.fixture
def env_secrets(tmp_path: Path) -> tuple[dict[str, str], list[str], Path]:
    """(environment for the proxy, secret values that must never be printed, NUL file)."""
    good = f"s3cr3t-cli-{secrets.token_hex(6)}"
    crlf = f"s3cr3t-crlf-{secrets.token_hex(6)}"
    nul = f"s3cr3t-nul-{secrets.token_hex(6)}"
    nul_file = tmp_path / "nul-secret"
    nul_file.write_bytes(nul.encode() + b"\x00tail\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("E2E_")}
    env.update(E2E_CLI_SECRET=good, E2E_CLI_CRLF=f"{crlf}\r\nX-Evil: 1")
    return env, [good, crlf, nul], nul_file


def write_bad(tmp_path: Path, case: str, nul_file: Path) -> Path:
    path = tmp_path / f"bad-{case}.yaml"
    path.write_text(GOOD_ENTRIES + BAD_ENTRIES[case].replace("FILE", str(nul_file)))
    return path


def egress(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(EGRESS_PROXY), *args], capture_output=True, text=True, env=env, timeout=TIMEOUT
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_check_accepts_a_valid_file(tmp_path: Path, env_secrets):
    env, values, _ = env_secrets
    path = tmp_path / "good.yaml"
    path.write_text(GOOD_ENTRIES)

    result = egress(["check", str(path)], env)

    assert result.returncode == 0, result.stderr
    assert all(v not in result.stdout + result.stderr for v in values)


@pytest.mark.parametrize("case", sorted(BAD_ENTRIES))
def test_check_names_file_entry_and_never_the_secret(tmp_path: Path, env_secrets, case: str):
    env, values, nul_file = env_secrets
    path = write_bad(tmp_path, case, nul_file)

    result = egress(["check", str(path)], env)

    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert str(path) in output or path.name in output, output
    assert names_entry_2(output), output
    assert all(v not in output for v in values), output


def test_check_reports_a_missing_file(tmp_path: Path, env_secrets):
    env, _, _ = env_secrets
    path = tmp_path / "absent.yaml"

    result = egress(["check", str(path)], env)

    assert result.returncode == 1
    assert path.name in result.stdout + result.stderr


@pytest.mark.parametrize("case", RUN_CASES)
def test_run_refuses_a_bad_file_before_listening(tmp_path: Path, env_secrets, case: str):
    env, values, nul_file = env_secrets
    path = write_bad(tmp_path, case, nul_file)
    listen, metrics = free_port(), free_port()
    argv = [str(EGRESS_PROXY), "run", "--config", str(path)]
    argv += ["--listen", f"127.0.0.1:{listen}", "--metrics", f"127.0.0.1:{metrics}"]
    argv += ["--certs", str(tmp_path / "certs"), "--audit-log", str(tmp_path / "audit.jsonl")]
    child = procs.start(f"proxy-{case}", argv, tmp_path, env=env)
    try:
        code = child.popen.wait(timeout=TIMEOUT)
    finally:
        child.stop()

    output = child.stdout.read_text() + child.stderr.read_text()
    assert code != 0, output
    assert str(path) in output or path.name in output, output
    assert names_entry_2(output), output
    assert all(v not in output for v in values), output
    assert not (tmp_path / "audit.jsonl").exists() or (tmp_path / "audit.jsonl").stat().st_size == 0


def test_ca_creates_once_and_prints_the_public_certificate(tmp_path: Path):
    certs = tmp_path / "certs"
    env = dict(os.environ)

    first = egress(["ca", "--certs", str(certs)], env)
    assert first.returncode == 0, first.stderr
    path = Path(first.stdout.strip().splitlines()[-1])
    pem = path.read_text()
    second = egress(["ca", "--certs", str(certs)], env)
    assert second.returncode == 0, second.stderr
    assert Path(second.stdout.strip().splitlines()[-1]) == path

    assert "BEGIN CERTIFICATE" in pem
    assert "PRIVATE KEY" not in pem
    assert path.resolve().parent == certs.resolve()
    keys = [p for p in certs.iterdir() if p.is_file() and b"PRIVATE KEY" in p.read_bytes()]
    assert keys, "no private key kept in the certs directory"
    for key in keys:
        assert key.stat().st_mode & 0o077 == 0, f"{key} is readable by others"
    assert path.read_text() == pem  # the second call did not regenerate it


@pytest.mark.parametrize(("flags", "selected"), [([], "h2"), (["--no-http2"], None)])
def test_run_offers_http2_to_clients_unless_no_http2(
    tmp_path: Path, flags: list[str], selected: str | None
):
    """D76: `--no-http2` keeps the client leg on HTTP/1.1. The client offers `h2` alone, so
    the proxy answers the handshake itself (D19 asks the upstream only when the client
    offers a choice); the tunnel goes to an address entry, so nothing is resolved and,
    connections being lazy, nothing is connected upstream."""
    config = tmp_path / "env.yaml"
    config.write_text("network:\n  allowlist:\n    - domain: 198.18.0.5/32\n")
    listen, metrics = free_port(), free_port()
    argv = [str(EGRESS_PROXY), "run", "--config", str(config), *flags]
    argv += ["--listen", f"127.0.0.1:{listen}", "--metrics", f"127.0.0.1:{metrics}"]
    argv += ["--certs", str(tmp_path / "certs"), "--audit-log", str(tmp_path / "audit.jsonl")]
    child = procs.start("proxy-http2", argv, tmp_path)
    try:
        procs.wait_until(
            "listening", lambda: "listening on" in child.stderr.read_text(), TIMEOUT, child
        )
        with socket.create_connection(("127.0.0.1", listen), timeout=TIMEOUT) as sock:
            sock.sendall(b"CONNECT 198.18.0.5:443 HTTP/1.1\r\nHost: 198.18.0.5:443\r\n\r\n")
            assert sock.recv(4096).startswith(b"HTTP/1.1 200 ")
            context = ssl.create_default_context(
                cafile=tmp_path / "certs" / "mitmproxy-ca-cert.pem"
            )
            context.set_alpn_protocols(["h2"])
            with context.wrap_socket(sock, server_hostname="198.18.0.5") as tls:
                assert tls.selected_alpn_protocol() == selected
                assert tls.version() == "TLSv1.3"
    finally:
        child.stop()
