"""`egress-proxy check` through the real executable: the one syntax wording, no value echoed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
        "transform)",
    ]
