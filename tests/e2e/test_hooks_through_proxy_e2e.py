"""HTTP hooks travel through the real egress proxy and get its credentials (docs/hooks.md#execution-and-decisions; docs/configuration.md#transform).

The hook runner runs as the sandbox would: `HTTPS_PROXY` names the proxy,
`SSL_CERT_FILE` the proxy CA, and hooks.json holds no secret. The upstream must
receive the transform header anyway; a hook aimed at a refused destination fails
open (the tool still runs) with the proxy's reason in the warning.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.expect import Observed, header_values
from testbed.harness import Harness

pytestmark = pytest.mark.netns

HOOKRUNNER = Path(sys.executable).parent / "hookrunner"


def run_exec(
    harness: Harness, workspace: Path, tool: str, args: dict[str, object]
) -> tuple[dict[str, object], str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HTTPS_PROXY": f"http://{harness.proxy_host}:{harness.proxy_port}",
        "SSL_CERT_FILE": str(harness.proxy_ca),
    }
    done = subprocess.run(
        [
            str(HOOKRUNNER),
            "exec",
            tool,
            "--workspace",
            str(workspace),
            "--system-config",
            str(workspace / "none.json"),
            "--environment-id",
            "env_e2e",
        ],
        input=json.dumps(args),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    return json.loads(done.stdout), done.stderr


def write_hooks(workspace: Path, hooks: dict[str, object]) -> None:
    (workspace / ".agents").mkdir(parents=True)
    (workspace / ".agents" / "hooks.json").write_text(json.dumps(hooks))
    (workspace / "none.json").write_text("{}")


def test_post_hook_reaches_the_upstream_with_the_injected_credential(
    harness: Harness, obs: Observed, tmp_path: Path
):
    write_hooks(
        tmp_path,
        {
            "audit-logging": {
                "post_tool_execution": [
                    {
                        "matcher": "read_file|write_file",
                        "hooks": [
                            {
                                "type": "http",
                                "url": "https://api.allowed.test/api/v1/agent-events",
                                "timeout": 10,
                            }
                        ],
                    }
                ]
            }
        },
    )
    (tmp_path / "notes.txt").write_text("event 1")

    result, stderr = run_exec(harness, tmp_path, "read_file", {"path": "notes.txt"})

    assert result["status"] == "ok", (result, stderr)
    assert result["output"] == "event 1"
    (record,) = [r for r in obs.requests() if r["target"] == "/api/v1/agent-events"]
    assert record["method"] == "POST"
    assert header_values(record, "Authorization") == [f"Bearer {harness.secrets[0]}"]
    assert header_values(record, "Content-Type") == ["application/json"]
    for secret in harness.secrets:
        assert secret not in (tmp_path / ".agents" / "hooks.json").read_text()
        assert secret not in stderr


def test_hook_to_a_refused_destination_fails_open_and_the_tool_runs(
    harness: Harness, obs: Observed, tmp_path: Path
):
    write_hooks(
        tmp_path,
        {
            "gate": {
                "pre_tool_execution": [
                    {
                        "matcher": "write_file",
                        "hooks": [
                            {"type": "http", "url": "https://notlisted.test/gate", "timeout": 10}
                        ],
                    },
                    {
                        "matcher": "write_file",
                        "hooks": [{"type": "http", "url": "https://localhost/gate", "timeout": 10}],
                    },
                ]
            }
        },
    )

    result, stderr = run_exec(
        harness, tmp_path, "write_file", {"path": "out.txt", "content": "written"}
    )

    assert result["status"] == "ok", (result, stderr)
    assert (tmp_path / "out.txt").read_text() == "written"
    assert "not_allowlisted" in stderr, stderr
    assert "loopback" in stderr, stderr
    obs.assert_nothing_reached()
