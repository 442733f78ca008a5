"""End to end, approvers and asking ahead (docs/configuration.md#approvals): command
approvers that crash or hang are no answer and the next one decides; a webhook receiver
checks the HMAC signature and answers through the admin API; a sandbox asks ahead on
`egress.invalid`; two proxies on one Redis share a grant. Also measures a held request's
added latency beside the approver's own time (printed and recorded, never asserted).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from testbed import procs
from testbed.expect import Observed
from testbed.netns import Topology
from testbed.proxyproc import record_result
from testbed.redisserver import RedisServer, start_redis
from tests.e2e.approvals_support import Background, api, config, curl, pending, start
from tests.e2e.conftest import PrivateProxy

pytestmark = pytest.mark.netns

CRASH = "import sys; sys.stdout.write('{not json'); sys.exit(3)"
HANG = "import time; time.sleep(120)"
# Answers yes for a session (or once), and writes how long it took itself to `log`.
ALLOW = """\
import json, sys, time
started = time.monotonic()
approval = json.load(sys.stdin)
answer = {{"decision": "allow", "scope": "{scope}", "reason": "looks fine"}}
print(json.dumps(answer))
with open("{log}", "a") as out:
    out.write(json.dumps({{"id": approval["id"], "host": approval["host"],
                          "seconds": time.monotonic() - started}}) + "\\n")
"""


def script(directory: Path, name: str, text: str) -> str:
    path = directory / f"{name}.py"
    path.write_text(text)
    return json.dumps([sys.executable, "-I", str(path)])


def test_a_crash_and_a_hang_are_no_answer_the_next_approver_decides(
    private_proxy: Callable[..., PrivateProxy], obs: Observed, tmp_path: Path
) -> None:
    log = tmp_path / "approver.jsonl"
    approvers = (
        f"[{{command: {script(tmp_path, 'crash', CRASH)}}}, "
        f"{{command: {script(tmp_path, 'hang', HANG)}, timeout: 1s}}, "
        f"{{command: {script(tmp_path, 'allow', ALLOW.format(scope='session', log=log))}}}]"
    )
    p = start(private_proxy, tmp_path, "approvers-command", config(approvers=approvers))
    started = time.monotonic()
    status, _, _ = curl(p, "https://notlisted.test/cmd")
    took = time.monotonic() - started
    assert status == 200
    assert 1.0 <= took < 15  # the hang was cut at its 1 s timeout
    [asked] = [json.loads(line) for line in log.read_text().splitlines()]
    [approval] = api(p, "GET", "/approvals")[1]["approvals"]
    assert (approval["id"], approval["state"], approval["scope"]) == (
        asked["id"], "allowed", "session",
    )  # fmt: skip
    assert (approval["decided_by"], approval["reason"]) == ("command", "looks fine")
    assert [r["target"] for r in obs.requests()] == ["/cmd"]
    samples = p.process.scrape()
    assert samples[("egress_approvals_total", (("event", "no_answer"),))] == 2
    assert samples[("egress_approvals_total", (("event", "allowed"),))] == 1
    # The hang's process group is gone: nothing of it still runs.
    hung = subprocess.run(["pgrep", "-f", str(tmp_path / "hang.py")], capture_output=True)
    assert hung.stdout == b""


def test_held_latency_beside_the_approvers_own_time(
    private_proxy: Callable[..., PrivateProxy], obs: Observed, tmp_path: Path
) -> None:
    log = tmp_path / "approver.jsonl"
    allow = script(tmp_path, "allow", ALLOW.format(scope="once", log=log))
    p = start(
        private_proxy, tmp_path, "approvers-latency", config(approvers=f"[{{command: {allow}}}]")
    )
    curl(p, "http://api.allowed.test/warm")
    allowed = [curl(p, f"http://api.allowed.test/a{n}")[2] for n in range(7)]
    held = [curl(p, f"http://notlisted.test/h{n}")[2] for n in range(7)]
    assert len(obs.requests()) == 15
    inside = [json.loads(line)["seconds"] for line in log.read_text().splitlines()]
    assert len(inside) == 7  # `once`: each request asked again
    # The approver's own time as a process (start, answer, exit), run here the same way.
    argv, ask = json.loads(allow), json.dumps({"id": "ap-0", "host": "x", "port": 80}).encode()
    own = []
    for _ in range(7):
        began = time.monotonic()
        subprocess.run(argv, input=ask, capture_output=True, check=True, timeout=30)
        own.append(time.monotonic() - began)
    figures = {
        "allowed_median_s": statistics.median(allowed),
        "held_median_s": statistics.median(held),
        "added_median_s": statistics.median(held) - statistics.median(allowed),
        "approver_process_median_s": statistics.median(own),
        "approver_deciding_median_s": statistics.median(inside),
    }
    print("approvals latency:", json.dumps({k: round(v, 4) for k, v in figures.items()}))
    record_result("approvals_latency", figures)


@pytest.fixture
def receiver(topology: Topology, tmp_path: Path) -> Iterator[Callable[[PrivateProxy, str], Path]]:
    """`start(proxy, secret)`: the webhook receiver in the proxy's namespace, answering the
    proxy's admin API; returns its log."""
    children: list[procs.Child] = []

    def begin(p: PrivateProxy, port: int) -> Path:
        log, ready = tmp_path / "webhook.jsonl", tmp_path / "webhook.ready"
        argv = [
            *topology.exec_prefix(topology.ns_proxy), sys.executable, "-m",
            "testbed.approval_receiver", "--listen", f"127.0.0.1:{port}",
            "--secret-file", str(tmp_path / "webhook-secret"), "--log", str(log),
            "--ready", str(ready), "--admin", f"{p.view.metrics_host}:{p.view.metrics_port}",
            "--token-file", str(tmp_path / "admin-token"), "--scope", "1h",
        ]  # fmt: skip
        child = procs.start("approval-receiver", argv, tmp_path)
        children.append(child)
        procs.wait_until("approval receiver", ready.exists, timeout=15, child=child)
        return log

    try:
        yield begin
    finally:
        for child in children:
            child.stop()


def test_a_webhook_is_signed_and_answered_through_the_api(
    private_proxy: Callable[..., PrivateProxy],
    obs: Observed,
    tmp_path: Path,
    receiver: Callable[[PrivateProxy, int], Path],
) -> None:
    secret = "webhook-shared-secret-e2e"
    (tmp_path / "webhook-secret").write_text(secret + "\n")
    port = 18080
    approvers = (
        f"[{{webhook: {{url: 'http://127.0.0.1:{port}/egress', "
        f"secret: '${{file:{tmp_path / 'webhook-secret'}}}'}}}}]"
    )
    p = start(private_proxy, tmp_path, "approvers-webhook", config(approvers=approvers))
    log = receiver(p, port)
    assert curl(p, "https://notlisted.test/hook")[0] == 200
    [line] = [json.loads(x) for x in log.read_text().splitlines()]
    assert line["signature_valid"] is True
    assert (line["approval"]["host"], line["approval"]["port"]) == ("notlisted.test", 443)
    body = json.dumps(line["approval"], separators=(",", ":")).encode()
    assert hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()  # the test's own check
    [approval] = api(p, "GET", "/approvals")[1]["approvals"]
    assert (approval["state"], approval["scope"], approval["decided_by"]) == (
        "allowed", "1h", "api",
    )  # fmt: skip
    assert [r["target"] for r in obs.requests()] == ["/hook"]
    assert secret not in p.process.child.stderr.read_text()
    assert secret not in p.view.audit_log.text()


def test_a_sandbox_asks_ahead_on_egress_invalid(
    private_proxy: Callable[..., PrivateProxy], obs: Observed, tmp_path: Path
) -> None:
    p = start(private_proxy, tmp_path, "approvers-ahead", config())
    base = "http://egress.invalid/v1/access-requests"

    def ask(body: dict[str, object]) -> tuple[int, dict[str, object]]:
        response = p.view.plain(
            base, [("Content-Type", "application/json")], method="POST",
            body=json.dumps(body).encode(),
        )  # fmt: skip
        return response.status, json.loads(response.body)

    status, made = ask({"host": "notlisted.test", "port": 443, "reason": "fetch the docs"})
    assert status == 202 and made["state"] == "pending"
    looked = p.view.plain(f"{base}/{made['id']}")
    assert (looked.status, json.loads(looked.body)["state"]) == (200, "pending")
    assert ask({"host": "api.allowed.test", "port": 443}) == (400, {"error": "not_holdable"})
    assert ask({"host": "127.0.0.1", "port": 80}) == (400, {"error": "not_holdable"})
    assert ask({"host": "10.0.0.1", "port": 80}) == (400, {"error": "not_holdable"})
    [approval] = pending(p)
    assert (approval["source"], approval["reason"]) == ("access_request", "fetch the docs")
    decided = api(p, "POST", f"/approvals/{made['id']}", {"decision": "allow", "scope": "session"})
    assert decided[0] == 200
    after = json.loads(p.view.plain(f"{base}/{made['id']}").body)
    assert (after["state"], after["scope"]) == ("allowed", "session")
    status, _, took = curl(p, "https://notlisted.test/ahead")
    assert status == 200 and took < 5  # granted ahead: not held
    assert [r["target"] for r in obs.requests()] == ["/ahead"]


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = start_redis(tmp_path)
    try:
        yield server
    finally:
        server.stop()


def test_two_proxies_on_one_redis_share_a_grant(
    private_proxy: Callable[..., PrivateProxy],
    obs: Observed,
    tmp_path: Path,
    redis: RedisServer,
) -> None:
    state = f'state: {{backend: redis, url: "{redis.url}", key_prefix: e2e-approvals}}\n'
    first = start(private_proxy, tmp_path, "approvers-redis-a", config() + state)
    second = start(private_proxy, tmp_path, "approvers-redis-b", config() + state)
    held = Background(lambda: curl(first, "https://notlisted.test/one"))
    [approval] = pending(first)
    allowed = api(
        first, "POST", f"/approvals/{approval['id']}", {"decision": "allow", "scope": "1h"}
    )
    assert allowed[0] == 200
    assert held.result()[0] == 200
    status, _, took = curl(second, "https://notlisted.test/two")
    assert status == 200 and took < 5  # the grant is the store's: not held on the second
    assert api(second, "GET", "/approvals")[1]["approvals"] == []
    [grant] = api(second, "GET", "/approvals")[1]["grants"]
    assert (grant["approval"], grant["scope"]) == (approval["id"], "1h")
    assert [r["target"] for r in obs.requests()] == ["/one", "/two"]
    [line] = second.view.audit_log.wait_for(0, lambda a: a["method"] == "GET") and [
        a for a in second.view.audit_log.all() if a["method"] == "GET"
    ]
    assert line["approval"] == approval["id"]
