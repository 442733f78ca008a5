"""The bench's product configuration (bench/staged.py): every stage configured, and the
host under test's request still decided and injected as squid does it."""

from __future__ import annotations

import asyncio
import ipaddress
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from bench import allowlist, staged
from sandbox_egress.proxy.config import load
from sandbox_egress.proxy.decision import Reason
from sandbox_egress.proxy.hosts import IPAddress
from sandbox_egress.proxy.policy import Policy
from sandbox_egress.proxy.sandboxes import check_node, load_sandbox, node_section
from sandbox_egress.proxy.stages import ConnectionFacts, decide_request
from sandbox_egress.proxy.tenancy import SandboxPolicy
from sandbox_egress.runtime import cli
from tests.proxy.test_stages import ask

UPSTREAM = "198.18.77.1"


async def resolve(name: str, port: int) -> list[IPAddress]:
    return [ipaddress.ip_address(UPSTREAM)]


def test_the_staged_configuration_loads_and_keeps_squids_injected_header(tmp_path: Path) -> None:
    policy = allowlist.generate(1000, (allowlist.HOOK_HOST, allowlist.BULK_HOST))
    node_file = staged.write(policy, tmp_path)
    environ = {**policy.environ, **staged.environ()}
    node = Policy(load(node_file, environ))
    entries = node.config.allowlist
    assert len(entries) == 1000
    assert sum(1 for e in entries if e.rules.active) > 40
    assert sum(1 for e in entries if e.git is not None) > 20
    section = node_section(node_file)
    assert section is not None and section.max_connections >= 1000  # scenario 6's tunnels
    files = sorted((tmp_path / "sandboxes").glob("*.yaml"))
    assert len(files) == staged.OTHERS + 1
    # What the proxy checks at start: every file accepted (a placeholder shared with the
    # node file is refused, D342; a variable is refused, D340: the bench reads files).
    assert check_node(node_file, secrets=False) == staged.OTHERS + 1
    bench = load_sandbox(tmp_path / "sandboxes" / "bench.yaml", section.secrets)
    assert [str(a) for a in bench.addresses] == [staged.CLIENT_ADDRESS]
    sandbox = SandboxPolicy(bench, node)

    def decided(method: str, path: str) -> tuple[Reason, str, tuple[tuple[str, str], ...]]:
        base = ask(allowlist.TARGET, method=method)
        request = replace(base, names=replace(base.names, path=path))
        answer = asyncio.run(decide_request(sandbox, resolve, ConnectionFacts(), request))
        headers = tuple((t.header, t.value.reveal()) for t in answer.transforms)
        return answer.decision.reason, answer.decision.clause, headers

    reason, clause, headers = decided("GET", "/")
    assert (reason, clause) == (Reason.ALLOWLISTED, "rules[0]")
    # The header squid writes, and nothing else: the placeholder is not in the request.
    assert headers == (("Authorization", policy.authorization(allowlist.TARGET)),)
    assert decided("GET", "/admin/x")[:2] == (Reason.RULE_DENIED, "deny[0]")
    assert decided("POST", "/")[0] is Reason.RULE_MISMATCH


def test_egress_proxy_check_accepts_the_staged_configuration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What `make bench` starts the product with is what `egress-proxy check` accepts,
    secrets looked up: every file's placeholder its own (D179, D264)."""
    policy = allowlist.generate(1000, (allowlist.HOOK_HOST, allowlist.BULK_HOST))
    node_file = staged.write(policy, tmp_path)
    for name, value in {**policy.environ, **staged.environ()}.items():
        monkeypatch.setenv(name, value)
    assert cli.main(["check", str(node_file)]) == 0
    out, err = capsys.readouterr()
    assert out == f"{node_file}: ok, 1000 allowlist entries, {staged.OTHERS + 1} sandbox files\n"
    assert "error" not in err
    document = yaml.safe_load(node_file.read_text())
    assert document["state"] == {"backend": "memory"}
    assert document["credentials"] == {staged.CREDENTIAL: {"env": staged.SECRET_ENV}}
    (target,) = [e for e in document["network"]["allowlist"] if e["domain"] == allowlist.TARGET]
    assert {"rules", "deny", "mcp", "budget", "secrets", "transform"} <= target.keys()
    placeholders = [staged.placeholder("node")]
    for path in sorted((tmp_path / "sandboxes").glob("*.yaml")):
        entries = yaml.safe_load(path.read_text())["network"]["allowlist"]
        placeholders += [s["placeholder"] for e in entries for s in e.get("secrets", [])]
    assert len(placeholders) == len(set(placeholders)) == staged.OTHERS + 2
