"""`make try` (demo/tryout.py, issue 48): an operator's own environment file against a local
test upstream, with no network and no code. Run as the Makefile runs it (a child process
with the environment file's variables), the output is asserted line by line: the allowed
request with the injected header by name and length only, the refusal, the audit lines;
and nothing it built is left behind (namespaces, processes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.netns

REPO = Path(__file__).resolve().parents[2]
SECRET = "try-s3cret-" + "ab" * 10


def tryout(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "demo.tryout", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )


def namespaces() -> set[str]:
    done = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=15)
    return {line.split()[0] for line in done.stdout.splitlines() if line.strip()}


def test_the_default_configuration_shows_an_allowed_request_a_refusal_and_the_audit() -> None:
    before = namespaces()
    done = tryout("config/default.yaml", env={"DEMO_API_TOKEN": SECRET})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert (
        lines[0]
        == "make try: config/default.yaml against a test upstream in a network namespace of its own"
    )
    allowed = lines.index("allowed?  GET https://httpbin.org/ -> 200")
    assert lines[allowed + 1] == (
        f"          the upstream received Authorization: <{len('Bearer ' + SECRET)} characters "
        "from the proxy's environment or credentials>"
    )
    assert lines[allowed + 2] == (
        "refused?  GET https://not-in-your-allowlist.example/ -> 403 not_allowlisted: "
        "The destination host is not in network.allowlist."
    )
    audit = lines[lines.index("audit (the proxy's --audit-log, one JSON line per decision):") + 1 :]
    assert [line.split('"decision": ')[1].split(",")[0] for line in audit] == [
        '"allow"',
        '"allow"',
        '"deny"',
    ]
    assert '"injected": ["Authorization"]' in audit[1]
    assert SECRET not in done.stdout + done.stderr
    assert {ns for ns in namespaces() - before if ns.startswith("egy")} == set()  # all gone


def test_a_file_of_ones_own_with_a_url_a_port_and_star(tmp_path: Path) -> None:
    config = tmp_path / "mine.yaml"
    config.write_text(
        "network:\n  allowlist:\n"
        "    - domain: api.mine.test\n      ports: [8443]\n"
        '      transform: {X-Api-Key: "${MY_KEY}"}\n'
        '    - domain: "*"\n'
    )
    done = tryout(str(config), "https://api.mine.test:8443/v1/models", env={"MY_KEY": SECRET})
    assert done.returncode == 0, done.stderr
    assert "allowed?  GET https://api.mine.test:8443/v1/models -> 200" in done.stdout
    assert (
        f"the upstream received X-Api-Key: <{len(SECRET)} characters from the proxy's "
        "environment or credentials>"
    ) in done.stdout
    # `*` allows every name: the refusal shown is the metadata address, never reachable.
    assert (
        "refused?  GET http://169.254.169.254/latest/meta-data/ -> 403 internal_address"
        in done.stdout
    )
    assert SECRET not in done.stdout + done.stderr


def test_a_broken_file_is_refused_with_the_located_problem(tmp_path: Path) -> None:
    config = tmp_path / "broken.yaml"
    config.write_text("network:\n  allowlist:\n    - domain: localhost\n")
    done = tryout(str(config))
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: {config}:3:")
    assert done.stdout == ""
