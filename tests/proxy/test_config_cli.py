"""`egress-proxy check` through the real executable: the one syntax wording, no value echoed."""

from __future__ import annotations

import asyncio
import ipaddress
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from sandbox_egress.proxy.config.loader import load
from sandbox_egress.proxy.hosts import IPAddress
from sandbox_egress.proxy.policy import Policy
from sandbox_egress.proxy.stages import ConnectionFacts, decide_request
from tests.proxy.test_stages import ask

EGRESS_PROXY = Path(sys.executable).parent / "egress-proxy"
SECRET = "tok-9b2e4f-never-print-me"


REPO = Path(__file__).resolve().parents[2]
PASTED = "sk-ant-api03-" + "Zx9" * 12  # the shape of an Anthropic key; never printed


def check(path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(EGRESS_PROXY), "check", *options, str(path)],
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
        f"error: {path}:3:35: network.allowlist[0].ports[0]: port must be an integer in 1-65535",
        f"error: {path}:4:39: network.allowlist[1].transform.X-Key: value must be a string",
        f"error: {path}:5:7: network.allowlist[2]: unknown key 'token' (expected: "
        "allow_encoded_slash, allow_plaintext, budget, credential, deny, domain, git, llm, mcp, "
        "passthrough, ports, report_only, rules, secrets, transform)",
        f"error: {path}:6:3: network.token: unknown key (expected: allowlist, report_only)",
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
        return answer.decision.reason.value, bool(answer.push)

    assert reason("github.com", "POST", "/acme/web.git/git-upload-pack") == ("allowlisted", False)
    assert reason("github.com", "POST", "/other/x.git/git-upload-pack") == ("rule_mismatch", False)
    assert reason("github.com", "POST", "/acme/a/b.git/git-receive-pack") == ("allowlisted", True)
    assert reason("github.com", "DELETE", "/acme/web") == ("rule_mismatch", False)
    assert reason("example.org", "GET", "/") == ("allowlisted", False)
    assert reason("example.org", "POST", "/") == ("rule_mismatch", False)
    hf = policy.config.allowlist[1]
    assert hf.budget is not None and hf.budget.upload is not None
    assert (hf.budget.upload.amount, hf.budget.upload.window_s) == (100 * 1024**2, 86400)


NOT_AN_ENVIRONMENT_FILE = {
    "misspelt section": (
        "netwrok:\n  allowlist: []\n",
        "{path}:1:1: no 'network' section; did you mean 'network' (not 'netwrok')?",
    ),
    "empty file": (
        "",
        "{path}: the file is empty: no 'network' section "
        "(write `network: {{allowlist: []}}` to refuse everything)",
    ),
    "claude code settings": (
        '{"permissions": {"allow": ["Bash(ls)"]}, "hooks": {}}\n',
        "{path}:1:1: no 'network' section (write `network: {{allowlist: []}}` to refuse "
        "everything); this looks like a Claude Code settings file, which the hook runner "
        "reads (`hookrunner fire`), not the proxy",
    ),
}


@pytest.mark.parametrize("case", sorted(NOT_AN_ENVIRONMENT_FILE))
def test_a_file_without_a_network_section_fails_the_check(tmp_path: Path, case: str) -> None:
    text, expected = NOT_AN_ENVIRONMENT_FILE[case]
    path = tmp_path / "env.yaml"
    path.write_text(text)
    result = check(path)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == "error: " + expected.format(path=path) + "\n"


def test_every_problem_names_its_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "env.yaml"
    path.write_text(
        "network:\n"
        "  allowlist:\n"
        "    - domain: a.example\n"
        "      port: [443]\n"
        "    - domain: 'bad host'\n"
        "  alowlist: []\n"
    )
    result = check(path)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.splitlines() == [
        f"error: {path}:3:7: network.allowlist[0]: unknown key 'port' (expected: "
        "allow_encoded_slash, allow_plaintext, budget, credential, deny, domain, git, llm, mcp, "
        "passthrough, ports, report_only, rules, secrets, transform); did you mean 'ports'?",
        f"error: {path}:5:7: network.allowlist[1].domain: invalid host: whitespace or control "
        "character not allowed (got 'bad host')",
        f"error: {path}:6:3: network.alowlist: unknown key (expected: allowlist, report_only); "
        "did you mean 'allowlist'?",
    ]


def test_no_secrets_checks_the_shipped_default_without_its_token() -> None:
    default = REPO / "config" / "default.yaml"
    assert check(default).returncode == 1  # DEMO_API_TOKEN is not in the environment
    result = check(default, "--no-secrets")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == (
        f"{default}: ok, 5 allowlist entries (references not looked up: --no-secrets)\n"
    )


def test_no_secrets_still_refuses_what_needs_no_secret(tmp_path: Path) -> None:
    path = tmp_path / "env.yaml"
    path.write_text(
        "network:\n  allowlist:\n    - {domain: a.example, transform: {X-Key: '${bad name}'}}\n"
    )
    result = check(path, "--no-secrets")
    assert result.returncode == 1
    assert result.stderr == (
        f"error: {path}:3:39: network.allowlist[0].transform.X-Key: invalid reference "
        "${bad name} (expected ${NAME} or ${file:/path})\n"
    )


def test_a_pasted_credential_is_never_echoed(tmp_path: Path) -> None:
    path = tmp_path / "env.yaml"
    path.write_text(
        "network:\n"
        "  allowlist:\n"
        f"    - domain: 'Bearer {PASTED}'\n"
        f"    - {{domain: a.example, {PASTED}: x}}\n"
        f"    - {{domain: b.example, transform: {{'Bearer {PASTED}': x}}}}\n"
        f"  {PASTED}: 1\n"
    )
    result = check(path)
    assert result.returncode == 1
    assert PASTED not in result.stderr and "Zx9Zx9" not in result.stderr
    assert result.stderr.splitlines() == [
        f"error: {path}:3:7: network.allowlist[0].domain: invalid host: whitespace or control "
        "character not allowed (got <not shown: a credential (bearer-credential)>)",
        f"error: {path}:4:7: network.allowlist[1]: unknown key <not shown: a credential "
        "(openai-or-anthropic-key)> (expected: allow_encoded_slash, allow_plaintext, budget, "
        "credential, deny, domain, git, llm, mcp, passthrough, ports, report_only, rules, secrets, "
        "transform)",
        f"error: {path}:5:27: network.allowlist[2].transform: invalid header name "
        "<not shown: a credential (bearer-credential)>",
        f"error: {path}:6:3: network.<key not shown>: unknown key (expected: allowlist, "
        "report_only)",
    ]


def test_a_literal_credential_in_a_transform_is_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "env.yaml"
    path.write_text(
        "network:\n"
        "  allowlist:\n"
        "    - domain: api.example\n"
        "      transform:\n"
        f"        X-Api-Key: {PASTED}\n"
        "        Authorization: Bearer ${TOKEN}\n"
    )
    result = subprocess.run(
        [str(EGRESS_PROXY), "check", str(path)],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "TOKEN": "t0ken"},
        timeout=60,
    )
    assert (result.returncode, result.stdout) == (0, f"{path}: ok, 1 allowlist entries\n")
    assert result.stderr == (
        f"warning: {path}:5:9: network.allowlist[0].transform.X-Api-Key: a literal "
        "openai-or-anthropic-key credential: the file is now a secret; put it in the "
        "environment or a file and write ${NAME} or ${file:/path}\n"
    )


def test_problems_are_reported_in_file_order(tmp_path: Path) -> None:
    """The `state:` section is checked after the allowlist, but it comes first in the file:
    so does its problem (issue 35)."""
    path = tmp_path / "env.yaml"
    path.write_text(
        "state:\n"
        "  backend: bogus\n"
        "network:\n"
        "  allowlist:\n"
        "    - domain: a.example\n"
        "      ports: [0]\n"
        "    - domain: 'https://b.example/x'\n"
    )
    result = check(path)
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert [int(line.split(":")[2]) for line in lines] == sorted(
        int(line.split(":")[2]) for line in lines
    )
    assert len(lines) == 3 and ":2:" in lines[0]
