"""compose.yaml's profile `fleet` started for real: two proxy replicas, one Redis, one budget.

deploy/compose/fleet.yaml gives telemetry.internal the budget "10/hour" with `state:
backend: redis`. Twenty requests sent alternately through proxy-fleet-a and
proxy-fleet-b from the profile's client (sandbox-fleet) are admitted ten times and
refused ten times (429 `budget_exceeded`), whichever replica each one reaches: the
replicas spend one budget. "10/hour" refills one request every 6 minutes, so a slow
machine cannot turn a refusal into an admission during the test.

Needs what test_compose_up.py needs (a Docker engine, the base image, a Compose
implementation). The project has its own name: another stack on the machine is not
touched, and this one is removed (containers, networks, volumes) even when a test
fails. Every address probed is the stack's own: nothing leaves the machine.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from tests.deploy.compose_stack import (
    TCP_CONNECT,
    Stack,
    prepare_images,
    probe,
    run,
    wait_for,
)

pytestmark = [pytest.mark.slow, pytest.mark.container]

REPLICAS = {"proxy-fleet-a": "172.30.6.10", "proxy-fleet-b": "172.30.6.11"}  # --listen
STATUS = {"proxy-fleet-a": "172.30.3.12", "proxy-fleet-b": "172.30.3.13"}  # --metrics
REDIS = ("172.30.5.20", 6379)
TELEMETRY = "https://telemetry.internal:8443/api/v1/agent-events"
BUDGET = 10  # fleet.yaml: requests "10/hour"

# POSTs one event per proxy in PROXIES, in order, each through that proxy (a new CONNECT
# each time); prints [status, X-Egress-Denied, the body's reason or None] per request.
FLEET_PROBE = """
import json, urllib.error, urllib.request
out = []
for proxy in PROXIES:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"https": proxy}))
    request = urllib.request.Request(URL, data=b'{"tool_call": {"name": "fleet"}}', method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with opener.open(request, timeout=30) as r:
            out.append([r.status, None, None])
    except urllib.error.HTTPError as e:
        body = e.read().decode("utf-8", "replace")
        try:
            reason = json.loads(body).get("reason")
        except ValueError:
            reason = body[:200]
        out.append([e.code, e.headers.get("X-Egress-Denied"), reason])
print(json.dumps(out))
"""

# How a direct TCP connect to each (host, port) ends: "connected", "timeout" or an errno name.
CONNECT_PROBE = TCP_CONNECT + "print(json.dumps([tcp(h, p) for h, p in TARGETS]))\n"

# GET /status on a replica's metrics address, from inside that replica.
STATUS_PROBE = """
import json, urllib.request
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
print(opener.open(f"http://{ADDRESS}:9464/status", timeout=10).read().decode())
"""


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    prepare_images()
    directory = tmp_path_factory.mktemp("compose-fleet")
    project = f"egress-fleet-test-{os.getpid()}"
    started = Stack(
        project,
        directory / "secrets" / "telemetry_token",
        secrets.token_hex(16),
        profiles=("fleet",),
        services=("sandbox-fleet", "telemetry"),
    )
    try:
        started.up()
        yield started
    finally:
        started.down()
        left = run(
            ["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={project}"],
            timeout=30,
        )
        assert left == "", f"containers left behind: {left}"


def status(stack: Stack, service: str) -> dict[str, Any]:
    return dict(probe(stack, service, STATUS_PROBE, ADDRESS=STATUS[service]))


def test_both_replicas_report_the_redis_backend_healthy(fleet: Stack) -> None:
    for service in REPLICAS:
        # The health is probed every 5 s: the first probe may still be pending.
        state = wait_for(
            f"{service}'s state healthy",
            lambda s=service: (st := status(fleet, s)["state"])["health"] == "ok" and st,
            attempts=30,
        )
        assert state["backend"] == "redis", service
        assert status(fleet, service)["config"]["path"] == "/etc/egress/fleet.yaml"


def test_twenty_requests_alternating_between_the_replicas_spend_one_budget(
    fleet: Stack,
) -> None:
    proxies = [f"http://{REPLICAS[name]}:8080" for name in ("proxy-fleet-a", "proxy-fleet-b")]
    outcome = probe(fleet, "sandbox-fleet", FLEET_PROBE, URL=TELEMETRY, PROXIES=proxies * 10)
    admitted = [o for o in outcome if o == [200, None, None]]
    refused = [o for o in outcome if o == [429, "budget_exceeded", "budget_exceeded"]]
    assert (len(admitted), len(refused)) == (BUDGET, 20 - BUDGET), outcome
    # A token bucket with a burst of 10: the first ten pass, then every one is refused,
    # on replica b as on replica a.
    assert outcome[:BUDGET] == [[200, None, None]] * BUDGET
    # The audit says the same, per replica: 5 allowed and 5 refused by each.
    for service in REPLICAS:

        def decided(s: str = service) -> list[tuple[str, str, int]] | None:
            found = [
                (a["decision"], a["reason"], a["status"])
                for a in fleet.audit(s)
                if a["method"] == "POST" and a["host"] == "telemetry.internal"
            ]
            return found if len(found) >= 20 // len(REPLICAS) else None

        lines = wait_for(f"{service}'s audit lines", decided)
        assert sorted(lines) == sorted(
            [("allow", "allowlisted", 200)] * 5 + [("deny", "budget_exceeded", 429)] * 5
        ), service
    # Exactly the admitted ones reached the upstream, each with the injected token.
    received = [
        json.loads(text)
        for line in fleet.logs("telemetry").splitlines()
        if (text := line.partition("| ")[2]).startswith("{")
    ]
    assert [(r["tool"], r["authorized"]) for r in received] == [("fleet", True)] * BUDGET
    assert fleet.token not in fleet.logs()


# GET /metrics on a replica's metrics address, from inside that replica: the budget series.
METRICS_PROBE = """
import json, urllib.request
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
text = opener.open(f"http://{ADDRESS}:9464/metrics", timeout=10).read().decode()
print(json.dumps([l for l in text.splitlines() if l.startswith("egress_budget_")]))
"""


def test_no_replica_shows_a_remaining_budget_of_its_own(fleet: Stack) -> None:
    """Issue 48 (D400): after the fleet spent its budget, `egress_budget_remaining` read 10
    on both replicas; a budget kept in Redis has no such gauge on a replica now, and the
    refusals are counted where they happened."""
    exceeded = 0.0
    for service in REPLICAS:
        lines = probe(fleet, service, METRICS_PROBE, ADDRESS=STATUS[service])
        assert [line for line in lines if line.startswith("egress_budget_remaining")] == []
        exceeded += sum(
            float(line.rsplit(" ", 1)[1])
            for line in lines
            if line.startswith('egress_budget_exceeded_total{budget="requests"')
        )
    assert exceeded == 20 - BUDGET


def test_only_the_proxies_reach_redis(fleet: Stack) -> None:
    # The client is on `fleet` only: Redis's network is dropped (no answer at all).
    assert probe(fleet, "sandbox-fleet", CONNECT_PROBE, TARGETS=[REDIS]) == ["timeout"]
    assert probe(fleet, "proxy-fleet-a", CONNECT_PROBE, TARGETS=[REDIS]) == ["connected"]
    # Redis listens on its `fleet-state` address only.
    networks = json.loads(run(["docker", "inspect", fleet.container("redis-fleet")], timeout=30))[
        0
    ]["NetworkSettings"]["Networks"]
    assert [n["IPAddress"] for n in networks.values()] == [REDIS[0]]
