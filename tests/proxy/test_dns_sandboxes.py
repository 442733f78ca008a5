"""The DNS responder on a node file with sandboxes: names per client address (D124)."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dns.message
import dns.rcode

from sandbox_egress.proxy.config import parse
from sandbox_egress.proxy.dns import DnsMetrics, Responder
from sandbox_egress.proxy.policy import Policy
from sandbox_egress.proxy.sandboxes import SandboxesSection, parse_sandbox
from sandbox_egress.proxy.tenancy import Tenancy
from tests.proxy.test_dns import TABLE_CHILD, Table, addresses, ask_until_up, free_port

ALPHA = ipaddress.ip_address("198.18.0.2")
BETA = ipaddress.ip_address("198.18.0.3")


def responder() -> Responder:
    node = Policy(parse({"network": {"allowlist": [{"domain": "*.example.com"}]}}, "n", {}))
    alpha = parse_sandbox(
        {"addresses": [str(ALPHA)], "network": {"allowlist": [{"domain": "api.example.com"}]}},
        "alpha.yaml", "alpha", secrets=False,
    )  # fmt: skip
    beta = parse_sandbox(
        {"addresses": [str(BETA)], "network": {"allowlist": [{"domain": "*"}]}},
        "beta.yaml", "beta", secrets=False,
    )  # fmt: skip
    found = Responder(node, Table(), DnsMetrics())
    sandboxes = {"alpha": alpha, "beta": beta}
    found.tenancy = Tenancy(SandboxesSection(Path("/d")), node).rebuilt(
        sandboxes, node, frozenset(sandboxes)
    )
    return found


def rcode(responder: Responder, name: str, client: object) -> int:
    query = dns.message.make_query(name, "A").to_wire()
    wire = asyncio.run(responder.answer(query, client))  # type: ignore[arg-type]
    return dns.message.from_wire(wire or b"").rcode()


def test_each_client_gets_its_own_sandboxes_names_inside_the_node() -> None:
    r = responder()
    assert rcode(r, "api.example.com", ALPHA) == dns.rcode.NOERROR
    assert rcode(r, "files.pypi.example", ALPHA) == dns.rcode.REFUSED
    assert rcode(r, "files.pypi.example", BETA) == dns.rcode.REFUSED  # beta's `*`, the node's not
    assert rcode(r, "other.example.com", BETA) == dns.rcode.NOERROR
    assert rcode(r, "other.example.com", ALPHA) == dns.rcode.REFUSED
    assert rcode(r, "api.example.com", ipaddress.ip_address("198.18.0.9")) == dns.rcode.REFUSED
    assert rcode(r, "api.example.com", None) == dns.rcode.REFUSED


def test_the_command_reads_the_sandbox_files_without_their_secrets(tmp_path: Path) -> None:
    directory = tmp_path / "sandboxes"
    directory.mkdir()
    (tmp_path / "secrets" / "local").mkdir(parents=True)
    fifo = tmp_path / "secrets" / "local" / "token"
    os.mkfifo(fifo)  # opening it would block: answering proves it was never read
    sandbox = directory / "local.yaml"
    sandbox.write_text(
        f'token: "${{file:{fifo}}}"\naddresses: [127.0.0.1]\n'
        "network:\n  allowlist:\n    - domain: api.example.com\n"
        f"      transform: {{Authorization: '${{file:{fifo}}}'}}\n"
    )
    config = tmp_path / "node.yaml"
    config.write_text(
        "network:\n  allowlist:\n    - domain: '*.example.com'\n"
        f"sandboxes:\n  directory: {directory}\n  secrets: {tmp_path / 'secrets'}\n"
    )
    port, metrics = free_port(), free_port()
    child = subprocess.Popen(
        [sys.executable, "-c", TABLE_CHILD, "dns", "--config", str(config),
         "--listen", f"127.0.0.1:{port}", "--metrics", f"127.0.0.1:{metrics}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        allowed = ask_until_up(port, "api.example.com", child)
        assert (allowed.rcode(), addresses(allowed)) == (dns.rcode.NOERROR, ["203.0.113.7"])
        assert ask_until_up(port, "www.example.com", child).rcode() == dns.rcode.REFUSED
        sandbox.write_text(sandbox.read_text().replace("127.0.0.1", "198.18.0.2"))
        child.send_signal(signal.SIGHUP)  # the file no longer claims this client
        deadline = time.monotonic() + 10
        while ask_until_up(port, "api.example.com", child).rcode() != dns.rcode.REFUSED:
            assert time.monotonic() < deadline, "the sandbox file was not read again"
            time.sleep(0.1)
    finally:
        child.terminate()
        assert child.wait(10) == 0
