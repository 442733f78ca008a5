"""The bridge's two doors on a real egress proxy serving two sandboxes (issue 47,
D502-D504): ``proxyapi.ask_ahead`` from inside a sandbox (``egress.invalid``, the sandbox
named by its proxy credentials) and ``proxyapi.allow_once`` on the admin API, then real
requests from each sandbox (curl through the proxy) to show what the yes opened: that
destination, for that sandbox, once.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox_egress.hookrunner.bridge.proxyapi import Granted, Held, allow_once, ask_ahead
from testbed.netns import netns_available
from testbed.nsock import in_namespace
from tests.hookrunner.bridge.world import METRICS_PORT, PROXY_PORT, UPSTREAM, World

pytestmark = pytest.mark.netns

A_TOKEN, B_TOKEN = "sandbox-a-proxy-token-0123456789", "sandbox-b-proxy-token-9876543210"
# The node's allowlist does not name egress.invalid: the proxy answers it for every
# sandbox (it once checked the node's ceiling first and refused it not_allowlisted).
NODE = f"""
network:
  allowlist:
    - domain: "*.example"
    - domain: "{UPSTREAM}/32"
sandboxes:
  directory: {{root}}/sandboxes
  identify: [proxy_auth]
approvals:
  unknown: hold
  timeout: 2s
  max_pending: 5
  scopes: [once]
"""
SANDBOX = """
token: "{token}"
network:
  allowlist:
    - domain: "{upstream}/32"
"""
ADMIN = f"http://127.0.0.1:{METRICS_PORT}"


def proxy_env(sandbox: str, token: str) -> dict[str, str]:
    url = f"http://{sandbox}:{token}@127.0.0.1:{PROXY_PORT}"
    return {"http_proxy": url, "https_proxy": url}


A, B = proxy_env("sbx-a", A_TOKEN), proxy_env("sbx-b", B_TOKEN)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    if (reason := netns_available()) is not None:
        pytest.fail(reason)
    (tmp_path / "sandboxes").mkdir()
    for name, token in (("sbx-a", A_TOKEN), ("sbx-b", B_TOKEN)):
        text = SANDBOX.format(token=token, upstream=UPSTREAM)
        (tmp_path / "sandboxes" / f"{name}.yaml").write_text(text)
    made = World(tmp_path, NODE)
    try:
        yield made
    finally:
        made.close()


def inside(world: World, call: Any, *args: Any) -> Any:
    """``call(*args)`` with its sockets made in the world's namespace."""
    with in_namespace(world.ns):
        return call(*args)


def curl(world: World, env: dict[str, str], url: str) -> int:
    done = subprocess.run(
        ["ip", "netns", "exec", world.ns, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
         "--max-time", "20", "-x", env["http_proxy"], url],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    return int(done.stdout or 0)


def admin(world: World, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        ADMIN + path, data=data, method=method,
        headers={"Authorization": f"Bearer {world.token.read_text().strip()}"},
    )  # fmt: skip
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with in_namespace(world.ns):
        conn = opener.open(request, timeout=10)
    with conn:
        return conn.status, json.loads(conn.read())


def state(world: World, approval: str, wanted: str, within: float = 10.0) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while True:
        found = {a["id"]: a for a in world.approvals()["approvals"]}[approval]
        if found["state"] == wanted or time.monotonic() > deadline:
            return dict(found)
        time.sleep(0.1)


def test_a_yes_opens_that_destination_for_that_sandbox_once(world: World) -> None:
    token = world.token.read_text().strip()
    held = inside(world, ask_ahead, "new.example", 80, "Claude Code Bash: asked the user", A)
    assert isinstance(held, Held)
    listed = state(world, held.approval, "pending")
    assert (listed["sandbox"], listed["host"], listed["port"], listed["source"]) == (
        "sbx-a", "new.example", 80, "access_request",
    )  # fmt: skip
    assert inside(world, allow_once, ADMIN, token, held.approval, "yes") == Granted("decided")
    decided = state(world, held.approval, "allowed")
    assert (decided["scope"], decided["decided_by"]) == ("once", "api")
    assert curl(world, A, "http://new.example/a") == 200  # within the grant's 2 s
    assert curl(world, B, "http://new.example/b") == 403  # the other sandbox: held, timed out
    assert [e["target"] for e in world.echoed()] == ["/a"]


def test_nothing_to_ask_where_the_proxy_would_not_hold(world: World) -> None:
    assert inside(world, ask_ahead, UPSTREAM, 80, "r", A) is None  # the sandbox allows it
    assert inside(world, ask_ahead, "127.0.0.1", 80, "r", A) is None  # loopback: refused anyway
    assert inside(world, ask_ahead, "new.example", 80, "r", {}) is None  # no proxy setting
    gone = {"http_proxy": "http://127.0.0.1:9"}
    assert inside(world, ask_ahead, "new.example", 80, "r", gone) is None  # proxy unreachable
    wrong = proxy_env("sbx-a", "not-the-token-000000000")
    assert inside(world, ask_ahead, "new.example", 80, "r", wrong) is None  # 407
    assert world.approvals()["approvals"] == []


def test_a_yes_after_the_timeout_grants_ahead_and_an_operators_no_stands(world: World) -> None:
    token = world.token.read_text().strip()
    late = inside(world, ask_ahead, "other.example", 80, "r", A)
    assert isinstance(late, Held)
    assert state(world, late.approval, "timed_out")["state"] == "timed_out"
    assert inside(world, allow_once, ADMIN, token, late.approval, "yes") == Granted("ahead")
    assert curl(world, A, "http://other.example/late") == 200

    denied = inside(world, ask_ahead, "third.example", 80, "r", A)
    assert isinstance(denied, Held)
    assert admin(world, "POST", f"/approvals/{denied.approval}", {"decision": "deny"})[0] == 200
    refused = inside(world, allow_once, ADMIN, token, denied.approval, "yes")
    assert refused == Granted("refused", "the approval is already denied")
    assert curl(world, A, "http://third.example/denied") == 403

    again = inside(world, ask_ahead, "third.example", 80, "r", A)
    assert isinstance(again, Held)
    wrong = inside(world, allow_once, ADMIN, "x" * 32, again.approval, "yes")
    assert wrong == Granted("refused", "the admin API answered 401")
    assert [e["target"] for e in world.echoed()] == ["/late"]
