"""End to end, approvals (docs/configuration.md#approvals): real clients (curl,
Python, git) to a host no entry allows are held by a real proxy process, and released or
refused by the admin API, the CLI or a command approver; a timeout refuses; one approval
serves every request waiting on it; loopback and internal destinations are never held.
Nothing of a held request reaches the upstream before it is allowed.
"""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from testbed.expect import Observed, assert_refused
from tests.e2e.approvals_support import (
    TOKEN,
    Background,
    api,
    config,
    curl,
    pending,
    start,
)
from tests.e2e.conftest import EGRESS_PROXY, PrivateProxy

pytestmark = pytest.mark.netns


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
