"""`egress-proxy check` through the real executable: the one syntax wording, no value echoed."""

from __future__ import annotations

import asyncio
import ipaddress
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from proxy.config import load
from proxy.hosts import IPAddress
from proxy.policy import Policy
from proxy.stages import ConnectionFacts, decide_request
from tests.proxy.test_stages import ask

EGRESS_PROXY = Path(sys.executable).parent / "egress-proxy"
SECRET = "tok-9b2e4f-never-print-me"


def check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(EGRESS_PROXY), "check", str(path)],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        timeout=60,
    )


def test_a_yaml_syntax_error_reads_like_a_json_one(tmp_path: Path) -> None:
    path = tmp_path / "env.yaml"
    path.write_text("network:\n  allowlist:\n    - domain: [a\n")
    result = check(path)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        f"error: {path}: line 4, column 1: not valid YAML: expected ',' or ']', "
        "but got '<stream end>'\n"
    )


def test_secrets_pasted_in_the_wrong_field_are_not_printed(tmp_path: Path) -> None:
    path = tmp_path / "env.yaml"
    path.write_text(
        "network:\n"
        "  allowlist:\n"
        f"    - {{domain: a.example, ports: [{SECRET}]}}\n"
        f"    - {{domain: b.example, transform: {{X-Key: [{SECRET}]}}}}\n"
        f"    - {{domain: c.example, token: {SECRET}}}\n"
        f"  token: {SECRET}\n"
    )
    result = check(path)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.splitlines() == [
        f"error: {path}: network.token: unknown key (expected: allowlist, report_only)",
        f"error: {path}: network.allowlist[0].ports[0]: port must be an integer in 1-65535",
        f"error: {path}: network.allowlist[1].transform.X-Key: value must be a string",
        f"error: {path}: network.allowlist[2]: unknown key 'token' (expected: allow_encoded_slash, "
        "allow_plaintext, budget, deny, domain, git, passthrough, ports, report_only, rules, "
        "secrets, transform)",
    ]


def test_the_agent_example_checks_and_says_what_it_means() -> None:
    # config/agent-rules.yaml: the operator's sentence of issue 22 in one file.
    path = Path(__file__).resolve().parents[2] / "config" / "agent-rules.yaml"
    result = check(path)
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    policy = Policy(load(path, {}))

    async def resolve(name: str, port: int) -> list[IPAddress]:
        return [ipaddress.ip_address("93.184.216.34")]

    def reason(host: str, method: str, target: str) -> tuple[str, bool]:
        base = ask(host, method=method)
        request = replace(base, names=replace(base.names, path=target))
        answer = asyncio.run(decide_request(policy, resolve, ConnectionFacts(), request))
        return answer.decision.reason.value, answer.push is not None

    assert reason("github.com", "POST", "/acme/web.git/git-upload-pack") == ("allowlisted", False)
    assert reason("github.com", "POST", "/other/x.git/git-upload-pack") == ("rule_mismatch", False)
    assert reason("github.com", "POST", "/acme/a/b.git/git-receive-pack") == ("allowlisted", True)
    assert reason("github.com", "DELETE", "/acme/web") == ("rule_mismatch", False)
    assert reason("example.org", "GET", "/") == ("allowlisted", False)
    assert reason("example.org", "POST", "/") == ("rule_mismatch", False)
    hf = policy.config.allowlist[1]
    assert hf.budget is not None and hf.budget.upload is not None
    assert (hf.budget.upload.amount, hf.budget.upload.window_s) == (100 * 1024**2, 86400)
