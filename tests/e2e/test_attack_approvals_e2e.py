"""Approvals attacked by fresh eyes (atk-appr, issue 47 follow-up, D540-D549): a real proxy
process, real clients. A `once` grant is one admission, whoever in the sandbox asks first:
the Claude Code user's yes (the bridge's grant step: an access request allowed `once`)
must not let every request of the sandbox to that host through for `approvals.timeout`,
nor wake a request the agent left waiting in the background as well.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from testbed.expect import Observed
from testbed.redisserver import RedisServer
from tests.e2e.approvals_support import Background, api, config, curl, pending, start
from tests.e2e.conftest import PrivateProxy

pytestmark = [pytest.mark.netns, pytest.mark.both_paths]

ASK = "http://egress.invalid/v1/access-requests"


def ask_ahead(p: PrivateProxy, host: str, port: int) -> str:
    """An access request from inside the sandbox (what the bridge makes at PreToolUse)."""
    response = p.view.plain(
        ASK, [("Content-Type", "application/json")], method="POST",
        body=json.dumps({"host": host, "port": port}).encode(),
    )  # fmt: skip
    assert response.status == 202, response.body
    made = json.loads(response.body)
    assert isinstance(made["id"], str)
    return made["id"]


def waiting_on(p: PrivateProxy, approval: str, timeout: float = 10.0) -> None:
    """Returns once a request waits on `approval` (bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [a for a in api(p, "GET", "/approvals")[1]["approvals"] if a["id"] == approval]
        if found and found[0]["waiting"] >= 1:
            return
        time.sleep(0.05)
    raise AssertionError(f"no request waits on {approval}")


def test_a_once_grant_made_ahead_admits_one_connection_not_a_window(
    private_proxy: Callable[..., PrivateProxy], obs: Observed, tmp_path: Path
) -> None:
    p = start(private_proxy, tmp_path, "atk-once-window", config(timeout="3s"))
    approval = ask_ahead(p, "notlisted.test", 443)
    decided = api(p, "POST", f"/approvals/{approval}", {"decision": "allow", "scope": "once"})
    assert (decided[0], decided[1]["scope"]) == (200, "once")
    assert curl(p, "https://notlisted.test/first")[0] == 200  # the command the user saw
    # Anything else of the sandbox to that host (a background loop of the agent's) is
    # asked again: held, and refused at the timeout.
    status, headers, _ = curl(p, "https://notlisted.test/second")
    assert (status, headers.get("x-egress-denied")) == (403, "approval_timeout")
    assert [r["target"] for r in obs.requests()] == ["/first"]


def test_a_once_yes_does_not_also_release_a_request_left_waiting(
    private_proxy: Callable[..., PrivateProxy], obs: Observed, tmp_path: Path
) -> None:
    p = start(private_proxy, tmp_path, "atk-once-waiter", config(timeout="4s"))
    approval = ask_ahead(p, "notlisted.test", 443)
    # The agent's background request, to a host it spelt so that no prompt named it,
    # joins the pending approval the bridge made.
    background = Background(lambda: curl(p, "https://notlisted.test/background"))
    [pending_one] = pending(p)
    assert pending_one["id"] == approval
    waiting_on(p, approval)
    assert api(p, "POST", f"/approvals/{approval}", {"decision": "allow"})[0] == 200
    foreground = curl(p, "https://notlisted.test/foreground")[0]
    codes = sorted([background.result()[0], foreground])
    assert codes == [200, 403]  # one admission, whichever came first
    assert len(obs.requests()) == 1


def grant_ahead(p: PrivateProxy, host: str, port: int, scope: str) -> str:
    status, made = api(
        p, "POST", "/approvals", {"host": host, "port": port, "decision": "allow", "scope": scope}
    )
    assert (status, made["state"]) == (200, "allowed"), made
    return str(made["id"])


@pytest.mark.parametrize(
    ("host", "reason"),
    [
        ("other.test", "host_mismatch"),  # fronting a host nobody approved
        ("api.allowed.test", "host_mismatch"),  # fronting an allowed one
        ("notlisted.test:8443", "host_mismatch"),  # the granted host, another port
    ],
)
def test_a_granted_tunnel_fronts_nothing(
    private_proxy: Callable[..., PrivateProxy],
    obs: Observed,
    tmp_path: Path,
    host: str,
    reason: str,
) -> None:
    p = start(private_proxy, tmp_path, "atk-fronting", config(timeout="3s"))
    grant_ahead(p, "notlisted.test", 443, "1h")
    started = time.monotonic()
    response = p.view.https("notlisted.test:443", "/fronted", host=host)
    assert (response.status, response.header("x-egress-denied")) == (403, reason)
    assert time.monotonic() - started < 2.5  # refused at once, never held
    obs.assert_nothing_reached()
    approvals = api(p, "GET", "/approvals")[1]["approvals"]
    assert [a["source"] for a in approvals] == ["api"]  # nothing new was held


def test_a_once_grant_made_ahead_races_to_one_admission(
    private_proxy: Callable[..., PrivateProxy], obs: Observed, tmp_path: Path
) -> None:
    p = start(private_proxy, tmp_path, "atk-once-race", config(timeout="3s"))
    grant_ahead(p, "notlisted.test", 443, "once")
    racers = [Background(lambda n=n: curl(p, f"https://notlisted.test/race{n}")) for n in range(4)]
    codes = sorted(r.result()[0] for r in racers)
    assert codes == [200, 403, 403, 403]
    assert len(obs.requests()) == 1


def test_two_replicas_on_one_redis_admit_a_once_grant_once(
    private_proxy: Callable[..., PrivateProxy],
    obs: Observed,
    tmp_path: Path,
    redis: RedisServer,
) -> None:
    state = f'state: {{backend: redis, url: "{redis.url}", key_prefix: atk-once}}\n'
    first = start(private_proxy, tmp_path, "atk-once-redis-a", config(timeout="3s") + state)
    second = start(private_proxy, tmp_path, "atk-once-redis-b", config(timeout="3s") + state)
    grant_ahead(first, "notlisted.test", 443, "once")
    racers = [
        Background(lambda p=p, n=n: curl(p, f"https://notlisted.test/r{n}"))
        for n, p in enumerate([first, second, first, second])
    ]
    codes = sorted(r.result()[0] for r in racers)
    assert codes == [200, 403, 403, 403]
    assert len(obs.requests()) == 1


@pytest.mark.parametrize("length", ["\u00b2", "\u0663", "-1", "99999999999999999999", "1e3"])
def test_the_admin_api_answers_a_length_it_cannot_read_with_400(
    private_proxy: Callable[..., PrivateProxy], tmp_path: Path, length: str
) -> None:
    """`Content-Length` spelt with a digit `int` reads but HTTP does not (²) or not at all:
    a 400, before the token is even looked at, and no traceback in the proxy's log."""
    p = start(private_proxy, tmp_path, "atk-admin-length", config())
    with socket.create_connection((p.view.metrics_host, p.view.metrics_port), timeout=5) as s:
        s.sendall(
            b"POST /approvals HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer nope\r\n"
            b"Content-Length: " + length.encode("latin-1", "replace") + b"\r\n\r\n"
        )
        answer = b""
        for _ in range(100):  # to the server's close (HTTP/1.0), bounded
            got = s.recv(4096)
            if not got:
                break
            answer += got
    assert answer.startswith(b"HTTP/1.0 400 "), answer
    assert answer.endswith(b'{"error": "bad_request"}\n')
    assert "Traceback" not in p.process.child.stderr.read_text()
