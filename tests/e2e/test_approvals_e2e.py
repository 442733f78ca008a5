"""End to end, approvals (docs/configuration.md#approvals, SPEC 1.18): real clients (curl,
Python, git) to a host no entry allows are held by a real proxy process, and released or
refused by the admin API, the CLI or a command approver; a timeout refuses; one approval
serves every request waiting on it; loopback and internal destinations are never held.
Nothing of a held request reaches the upstream before it is allowed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from testbed.expect import Observed, assert_refused
from testbed.proxyproc import record_result
from tests.e2e.conftest import EGRESS_PROXY, PrivateProxy

pytestmark = pytest.mark.netns

TOKEN = "approvals-e2e-token-0123456789"
CONFIG = """\
network:
  allowlist:
    - domain: api.allowed.test
    - domain: 198.18.1.0/24
approvals:
  unknown: hold
  timeout: {timeout}
  max_pending: 3
  scopes: [once, session, 1h]
  approvers: {approvers}
"""


def config(timeout: str = "20s", approvers: str = "[]") -> str:
    return CONFIG.format(timeout=timeout, approvers=approvers)


def start(
    private_proxy: Callable[..., PrivateProxy], tmp_path: Path, name: str, text: str
) -> PrivateProxy:
    token = tmp_path / "admin-token"
    token.write_text(TOKEN + "\n")
    return private_proxy(name, text, "--admin-token-file", str(token))


def api(p: PrivateProxy, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
    from sandbox_egress.runtime.approvalscli import call

    return call(p.view.metrics_host, p.view.metrics_port, TOKEN, method, path, body)


def pending(p: PrivateProxy, count: int = 1, timeout: float = 15.0) -> list[dict[str, Any]]:
    """The open approvals, once there are `count` (each with at least one request waiting,
    for those a request opened)."""
    deadline = time.monotonic() + timeout
    found: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        status, document = api(p, "GET", "/approvals")
        assert status == 200, document
        found = [a for a in document["approvals"] if a["state"] == "pending"]
        if len(found) >= count and all(a["waiting"] > 0 for a in found if a["source"] == "request"):
            return found
        time.sleep(0.05)
    raise AssertionError(f"expected {count} pending approvals, found {found}")


def curl(p: PrivateProxy, url: str, *extra: str) -> tuple[int, dict[str, str], float]:
    started = time.monotonic()
    done = subprocess.run(
        ["curl", "-s", "-o", "/dev/null", "-D", "/dev/stderr", "-w", "%{http_code} %{http_connect}",
         "--max-time", "60", "--cacert", str(p.view.proxy_ca),
         "-x", f"http://{p.view.proxy_host}:{p.view.proxy_port}", *extra, url],
        capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    took = time.monotonic() - started
    lines = done.stderr.splitlines()
    headers = {k.lower(): v.strip() for k, sep, v in (x.partition(":") for x in lines) if sep}
    code, connect = (int(x) for x in (done.stdout or "0 0").split())
    return code or connect, headers, took  # a refused CONNECT: its status


class Background:
    """A client call on a thread of its own: `result()` joins it (bounded)."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self._value: Any = None
        self._error: BaseException | None = None

        def run() -> None:
            try:
                self._value = call()
            except BaseException as exc:  # handed to the test's thread
                self._error = exc

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def result(self, timeout: float = 90.0) -> Any:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the client is still waiting"
        if self._error is not None:
            raise self._error
        return self._value


def test_curl_is_held_until_the_api_allows_it_once(
    private_proxy: Callable[..., PrivateProxy], obs: Observed, tmp_path: Path
) -> None:
    p = start(private_proxy, tmp_path, "approvals-once", config())
    held = Background(lambda: curl(p, "https://notlisted.test/first"))
    [approval] = pending(p)
    assert (approval["host"], approval["port"], approval["method"]) == (
        "notlisted.test", 443, "CONNECT",
    )  # fmt: skip
    assert obs.requests() == []  # held: nothing went upstream
    status, decided = api(p, "POST", f"/approvals/{approval['id']}", {"decision": "allow"})
    assert (status, decided["state"], decided["scope"]) == (200, "allowed", "once")
    assert held.result()[0] == 200
    assert [r["target"] for r in obs.requests()] == ["/first"]
    lines = p.view.audit_log.wait_count(0, 2)
    assert {(a["method"], a["reason"], a.get("approval")) for a in lines} == {
        ("CONNECT", "allowlisted", approval["id"]),
        ("GET", "allowlisted", approval["id"]),
    }
    # `once`: a new connection asks again; this time the answer is no.
    refused = Background(lambda: curl(p, "https://notlisted.test/second"))
    [again] = pending(p)
    assert again["id"] != approval["id"]
    assert api(p, "POST", f"/approvals/{again['id']}", {"decision": "deny"})[0] == 200
    status_code, headers, _ = refused.result()
    assert (status_code, headers["x-egress-denied"]) == (403, "approval_denied")
    assert [r["target"] for r in obs.requests()] == ["/first"]
    assert api(p, "POST", f"/approvals/{again['id']}", {"decision": "allow"})[0] == 409


def test_a_timeout_refuses_and_opens_nothing(
    private_proxy: Callable[..., PrivateProxy], obs: Observed, tmp_path: Path
) -> None:
    p = start(private_proxy, tmp_path, "approvals-timeout", config(timeout="2s"))
    response = p.view.plain("http://notlisted.test/late")
    assert_refused(response, "approval_timeout")
    obs.assert_nothing_reached()
    [line] = p.view.audit_log.wait_count(0, 1)
    assert line["reason"] == "approval_timeout" and line["approval"].startswith("ap-")
    samples = p.process.scrape()
    assert samples[("egress_approvals_total", (("event", "timed_out"),))] == 1
    assert samples[("egress_approvals_total", (("event", "held"),))] == 1


def test_loopback_internal_and_mismatch_are_refused_at_once(
    private_proxy: Callable[..., PrivateProxy], obs: Observed, tmp_path: Path
) -> None:
    p = start(private_proxy, tmp_path, "approvals-never", config())
    assert_refused(p.view.plain("http://127.0.0.1/x"), "loopback")
    assert_refused(p.view.plain("http://198.51.100.1/x", host="other.test"), "host_mismatch")
    assert_refused(p.view.connect("10.1.2.3:443"), "internal_address")
    assert_refused(p.view.connect("localhost:443"), "loopback")
    assert api(p, "GET", "/approvals")[1] == {"approvals": [], "grants": []}
    obs.assert_nothing_reached()
    # A name is never resolved before it is allowed (D485): one that resolves to loopback
    # is held like any other, and a yes still meets the address stage.
    held = Background(lambda: p.view.plain("http://rebind.test/x"))
    [approval] = pending(p)
    assert api(p, "POST", f"/approvals/{approval['id']}", {"decision": "allow"})[0] == 200
    assert_refused(held.result(), "loopback")
    obs.assert_nothing_reached()


def test_many_waiting_requests_share_one_approval(
    private_proxy: Callable[..., PrivateProxy], obs: Observed, tmp_path: Path
) -> None:
    p = start(private_proxy, tmp_path, "approvals-many", config())
    proxy = f"http://{p.view.proxy_host}:{p.view.proxy_port}"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy}))

    def fetch(n: int) -> int:
        with opener.open(f"http://notlisted.test/c{n}", timeout=60) as response:
            return int(response.status)

    waiting = [Background(lambda n=n: fetch(n)) for n in range(8)]
    [approval] = pending(p)
    deadline = time.monotonic() + 15
    while approval["waiting"] < 8 and time.monotonic() < deadline:
        [approval] = pending(p)
    assert approval["waiting"] == 8
    assert obs.requests() == []
    assert api(p, "POST", f"/approvals/{approval['id']}", {"decision": "allow"})[0] == 200
    assert [w.result() for w in waiting] == [200] * 8
    assert sorted(r["target"] for r in obs.requests()) == sorted(f"/c{n}" for n in range(8))


def test_the_cli_grants_a_session_and_git_goes_through(
    private_proxy: Callable[..., PrivateProxy], obs: Observed, tmp_path: Path
) -> None:
    p = start(private_proxy, tmp_path, "approvals-cli", config())
    proxy = f"http://{p.view.proxy_host}:{p.view.proxy_port}"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GIT_TERMINAL_PROMPT": "0",
           "https_proxy": proxy, "GIT_SSL_CAINFO": str(p.view.proxy_ca)}  # fmt: skip
    git = Background(
        lambda: subprocess.run(
            ["git", "ls-remote", "https://notlisted.test/repo.git"],
            capture_output=True,
            text=True,
            timeout=90,
            env=env,
        )  # fmt: skip
    )
    [approval] = pending(p)
    cli = [str(EGRESS_PROXY), "approvals", "--metrics", f"{p.view.metrics_host}:{p.view.metrics_port}",
           "--admin-token-file", str(tmp_path / "admin-token")]  # fmt: skip
    listed = subprocess.run([*cli, "list"], capture_output=True, text=True, timeout=30)
    assert listed.returncode == 0 and approval["id"] in listed.stdout
    assert "notlisted.test:443 CONNECT" in listed.stdout
    allowed = subprocess.run(
        [*cli, "allow", approval["id"], "--scope", "session"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert allowed.returncode == 0, allowed.stderr
    assert f"{approval['id']} allowed scope=session" in allowed.stdout
    git.result()  # the echo server is no git server: what matters is what reached it
    assert [r["target"] for r in obs.requests()][:1] == [
        "/repo.git/info/refs?service=git-upload-pack"
    ]
    # A session grant: the next connection goes through without asking.
    assert curl(p, "https://notlisted.test/again")[0] == 200
    assert api(p, "GET", "/approvals")[1]["grants"][0]["scope"] == "session"
    assert len([a for a in api(p, "GET", "/approvals")[1]["approvals"]]) == 1
    bad = subprocess.run([*cli, "deny", "ap-0000000000000000"], capture_output=True, text=True)
    assert bad.returncode == 1 and "404" in bad.stderr


def test_the_api_needs_its_token(
    private_proxy: Callable[..., PrivateProxy], tmp_path: Path
) -> None:
    p = start(private_proxy, tmp_path, "approvals-auth", config())
    url = f"http://{p.view.metrics_host}:{p.view.metrics_port}/approvals"
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        request = urllib.request.Request(url, headers=headers)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 401
    request = urllib.request.Request(
        url + "/ap-0000000000000000", data=b'{"decision": "allow"}', method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 401
    # Without --admin-token-file, the paths are not served at all.
    bare = private_proxy("approvals-noapi", config())
    url = f"http://{bare.view.metrics_host}:{bare.view.metrics_port}/approvals"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(request, timeout=10)
    assert missing.value.code == 404
