"""compose.yaml started for real: images built, both profiles up, the source scenario run.

Also, from inside the transparent sandbox: its DNS is `egress-proxy dns` and no other
resolver, and both sandboxes run with compose.yaml's resource limits (docker inspect).

Needs a running Docker engine, the base image and a Compose implementation
(`.ci/run` calls scripts/container-engine and scripts/base-image first;
docs/operations.md, "Containers without a registry"). Every address probed is
the stack's own or a 198.18.0.0/15 test address: nothing leaves the machine.
The stack is removed (containers, networks, volumes) even when a test fails.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import textwrap
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

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

TELEMETRY = ("172.30.2.20", 8443)
PROMETHEUS = {"on sandbox": ("172.30.1.30", 9090), "on monitoring": ("172.30.3.30", 9090)}
PROMETHEUS_API = ("172.30.4.30", 9090)  # its --web.listen-address
PROXY_METRICS = ("172.30.3.10", 9464)
OUTSIDE = ("198.18.0.1", 443)  # a test address, never a real one
WRITE = {"exec": "write_file", "args": {"path": "notes.txt", "content": "hi"}}

# Prints, for each (host, port), how a direct TCP connect ends, and how a UDP send
# to the outside address ends: the errno name, "connected", "sent" or "timeout".
CONNECT_PROBE = (
    TCP_CONNECT
    + """
def udp(host, port):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.sendto(b"x", (host, port))
            return "sent"
        except OSError as exc:
            return errno.errorcode.get(exc.errno, str(exc))
print(json.dumps({"tcp": [tcp(h, p) for h, p in TARGETS], "udp": udp("198.18.0.1", 443)}))
"""
)

# Prints the status and the proxy's refusal header of plain requests (urllib: it honours
# HTTPS_PROXY/HTTP_PROXY where they are set, as in the regular sandbox).
REQUEST_PROBE = """
import json, urllib.error, urllib.request
out = []
for url in URLS:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            out.append([r.status, None])
    except urllib.error.HTTPError as e:
        out.append([e.code, e.headers.get("X-Egress-Denied")])
    except OSError as e:
        out.append(["error", type(getattr(e, "reason", e)).__name__])
print(json.dumps(out))
"""


# Prints how each DNS query ends: (server, port, transport, name) -> the rcode's name and
# the A records, or "timeout"/an errno name. dnspython is in the image (the responder's).
DNS_PROBE = """
import errno, json, socket
import dns.exception, dns.message, dns.query, dns.rcode
def ask(server, port, transport, name):
    query = dns.message.make_query(name, "A")
    try:
        if transport == "udp":
            answer = dns.query.udp(query, server, port=port, timeout=3)
        else:
            answer = dns.query.tcp(query, server, port=port, timeout=3)
    except dns.exception.Timeout:
        return "timeout"
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc))
    addresses = sorted(r.address for rrset in answer.answer for r in rrset)
    return [dns.rcode.to_text(answer.rcode()), addresses]
def system(name):
    try:
        return sorted({a[4][0] for a in socket.getaddrinfo(name, 443, socket.AF_INET)})
    except socket.gaierror as exc:
        return errno.errorcode.get(exc.errno, "EAI") if exc.errno > 0 else exc.args[1]
print(json.dumps({"queries": [ask(*q) for q in QUERIES], "system": [system(n) for n in NAMES]}))
"""

# Docker's embedded resolver listens on 127.0.0.11 on random ports (the nat rules send
# :53 there); /proc/net shows them to any process of the namespace. Prints those ports.
DOCKER_DNS_PORTS = """
import json
def ports(path):
    found = []
    for line in open(path).read().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, port = local.split(":")
        if address == "0B00007F" and (state == "0A" or path.endswith("udp")):
            found.append(int(port, 16))
    return found
print(json.dumps({"udp": ports("/proc/net/udp"), "tcp": ports("/proc/net/tcp")}))
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    prepare_images()
    directory = tmp_path_factory.mktemp("compose")
    project = f"egress-test-{os.getpid()}"
    started = Stack(project, directory / "secrets" / "telemetry_token", secrets.token_hex(16))
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


def telemetry_lines(stack: Stack) -> list[dict[str, Any]]:
    return [
        json.loads(text)
        for line in stack.logs("telemetry").splitlines()
        if (text := line.partition("| ")[2]).startswith("{")
    ]


def injected_posts(stack: Stack, service: str) -> list[dict[str, Any]]:
    return [
        a
        for a in stack.audit(service)
        if a["method"] == "POST" and a["host"] == "telemetry.internal"
    ]


@pytest.mark.parametrize(
    ("sandbox", "proxy", "client"),
    [
        ("sandbox", "proxy", "172.30.1.20"),
        ("sandbox-transparent", "proxy-transparent", "172.30.2.11"),
    ],
)
def test_the_sandbox_hook_reaches_telemetry_through_the_proxy_with_the_injected_credential(
    stack: Stack, sandbox: str, proxy: str, client: str
) -> None:
    before = len(telemetry_lines(stack))
    posts_before = len(injected_posts(stack, proxy))
    assert stack.session(sandbox, f"env_{sandbox}", WRITE) == [
        {"status": "ok", "output": "wrote 2 bytes to notes.txt"}
    ]
    # The telemetry upstream saw exactly one event, with the right bearer token.
    received = wait_for("telemetry line", lambda: telemetry_lines(stack)[before:])
    assert [(r["path"], r["authorized"], r["tool"]) for r in received] == [
        ("/api/v1/agent-events", True, "write_file")
    ]
    # ... and it came through this proxy, which injected the credential.
    posts = wait_for("audit line", lambda: injected_posts(stack, proxy)[posts_before:])
    assert [
        (p["decision"], p["reason"], p["injected"], p["status"], p["client"].rpartition(":")[0])
        for p in posts
    ] == [("allow", "allowlisted", ["Authorization"], 200, client)]
    # The token is in no log line of any service.
    assert stack.token not in stack.logs()


def test_two_sandboxes_on_one_proxy_each_get_their_own_policy(stack: Stack) -> None:
    """deploy/compose/sandboxes: `sandbox-b` reaches telemetry without the credential
    `sandbox` is given, and no package index; the audit names each sandbox."""
    before = len(telemetry_lines(stack))
    assert stack.session("sandbox-b", "env_sandbox_b", WRITE) == [
        {"status": "ok", "output": "wrote 2 bytes to notes.txt"}
    ]
    received = wait_for("telemetry line", lambda: telemetry_lines(stack)[before:])
    assert [(r["path"], r["authorized"]) for r in received] == [("/api/v1/agent-events", False)]
    outcome = probe(stack, "sandbox-b", REQUEST_PROBE, URLS=["https://pypi.org/simple/"])
    assert outcome == [["error", "OSError"]]  # urllib: "Tunnel connection failed: 403"

    def lines() -> list[tuple[str, str, str, str, list[str]]] | None:
        found = [
            (a["sandbox"], a["method"], a["host"], a["reason"], a["injected"])
            for a in stack.audit("proxy")
            if a.get("sandbox") == "sandbox-b"
        ]
        return found if len(found) >= 3 else None

    seen = wait_for("sandbox-b's audit lines", lines)
    assert ("sandbox-b", "POST", "telemetry.internal", "allowlisted", []) in seen
    assert ("sandbox-b", "CONNECT", "pypi.org", "not_allowlisted", []) in seen
    posts = [a for a in injected_posts(stack, "proxy") if a.get("sandbox") == "sandbox"]
    assert posts and all(p["injected"] == ["Authorization"] for p in posts)


def test_the_regular_sandbox_cannot_connect_anywhere_directly(stack: Stack) -> None:
    targets = [TELEMETRY, PROMETHEUS["on sandbox"], PROMETHEUS["on monitoring"]]
    targets += [PROMETHEUS_API, PROXY_METRICS, OUTSIDE]
    outcome = probe(stack, "sandbox", CONNECT_PROBE, TARGETS=targets)
    # Prometheus shares the sandbox's network but its API does not listen there; every
    # other network is dropped by Docker's isolation rules (no answer at all).
    assert outcome["tcp"] == ["timeout", "ECONNREFUSED", "timeout", "timeout", "timeout", "timeout"]


def test_the_regular_proxy_refuses_what_the_sandbox_asks_it_for_beyond_the_allowlist(
    stack: Stack,
) -> None:
    urls = [
        f"https://{OUTSIDE[0]}/",
        f"http://{PROMETHEUS['on monitoring'][0]}:9090/api/v1/targets",
    ]
    outcome = probe(stack, "sandbox", REQUEST_PROBE, URLS=urls)
    # urllib reports a refused CONNECT as an OSError ("Tunnel connection failed: 403").
    assert outcome == [["error", "OSError"], [403, "internal_address"]]
    refusals = [
        (a["method"], a["host"], a["port"], a["reason"], a["status"])
        for a in stack.audit("proxy")
        if a["decision"] == "deny"
    ]
    assert ("CONNECT", OUTSIDE[0], 443, "internal_address", 403) in refusals
    assert ("GET", PROMETHEUS["on monitoring"][0], 9090, "internal_address", 403) in refusals


def test_the_transparent_sandbox_reaches_nothing_but_the_proxy(stack: Stack) -> None:
    # Every TCP connect lands on the proxy's transparent listener (so it "connects");
    # what the proxy then does is the policy: a Prometheus query is refused by the
    # proxy, not answered by Prometheus. Other protocols are dropped outright.
    outcome = probe(stack, "sandbox-transparent", CONNECT_PROBE, TARGETS=[OUTSIDE])
    assert outcome == {"tcp": ["connected"], "udp": "EPERM"}  # UDP 443 (QUIC): dropped
    urls = [f"http://{PROMETHEUS['on monitoring'][0]}:9090/api/v1/targets"]
    assert probe(stack, "sandbox-transparent", REQUEST_PROBE, URLS=urls) == [
        [403, "internal_address"]
    ]


def dns_queries(stack: Stack) -> dict[str, float]:
    """egress_dns_queries_total by result, as the transparent sandbox's responder reports it."""
    script = """
    import json, urllib.request
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    text = opener.open("http://172.30.3.11:9466/metrics", timeout=5).read().decode()
    counts = {}
    for line in text.splitlines():
        if line.startswith("egress_dns_queries_total{"):
            counts[line.split('"')[1]] = float(line.split()[-1])
    print(json.dumps(counts))
    """
    return dict(stack.python("proxy-transparent", textwrap.dedent(script)))


def test_the_transparent_sandboxs_dns_is_the_responder_and_no_other_resolver(
    stack: Stack,
) -> None:
    before = dns_queries(stack)
    # `telemetry` is a name Docker's resolver knows (the telemetry service, on a network
    # the proxy's namespace shares), but not one the allowlist could allow: asked from
    # the proxy's uid, Docker answers.
    proxy_side = probe(stack, "proxy-transparent", DNS_PROBE, QUERIES=[], NAMES=["telemetry"])
    assert proxy_side["system"] == [["172.30.2.20"]]
    queries = [
        ("127.0.0.11", 53, "udp", "telemetry.internal"),  # resolv.conf's server
        ("127.0.0.11", 53, "udp", "telemetry"),
        ("127.0.0.11", 53, "tcp", "exfil-4a5b.example.org"),
        ("198.18.0.1", 53, "udp", "telemetry.internal"),  # "another resolver": the same
        ("198.18.0.1", 53, "tcp", "exfil-4a5b.example.org"),
    ]
    outcome = probe(stack, "sandbox-transparent", DNS_PROBE, QUERIES=queries, NAMES=[])
    assert outcome["queries"] == [
        ["NOERROR", ["172.30.2.20"]],
        ["REFUSED", []],
        ["REFUSED", []],
        ["NOERROR", ["172.30.2.20"]],
        ["REFUSED", []],
    ]
    # Every one of them reached the responder, and nothing else did.
    after = dns_queries(stack)
    assert {k: after[k] - before[k] for k in after} == {
        "answered": 2,
        "refused": 3,
        "failed": 0,
        "malformed": 0,
    }
    # The system resolver (glibc, resolv.conf) gets the same answers; a REFUSED name fails.
    names = ["telemetry.internal", "telemetry"]
    outcome = probe(stack, "sandbox-transparent", DNS_PROBE, QUERIES=[], NAMES=names)
    assert outcome["system"] == [["172.30.2.20"], "Temporary failure in name resolution"]
    # Docker's resolver itself, at its real ports on 127.0.0.11, is out of reach.
    ports = probe(stack, "sandbox-transparent", DOCKER_DNS_PORTS)
    assert len(ports["udp"]) == 1, ports
    assert len(ports["tcp"]) == 1, ports
    direct = [("127.0.0.11", ports["udp"][0], "udp", "telemetry")]
    direct += [("127.0.0.11", ports["tcp"][0], "tcp", "telemetry")]
    outcome = probe(stack, "sandbox-transparent", DNS_PROBE, QUERIES=direct, NAMES=[])
    assert outcome["queries"] == ["EPERM", "timeout"]  # dropped: refused at once, or no answer


def test_the_sandboxes_run_with_the_resource_limits_of_compose_yaml(stack: Stack) -> None:
    for service in ("sandbox", "sandbox-transparent"):
        host = json.loads(run(["docker", "inspect", stack.container(service)], timeout=30))[0][
            "HostConfig"
        ]
        limits = {k: host[k] for k in ("Memory", "MemorySwap", "NanoCpus", "PidsLimit")}
        assert limits == {
            "Memory": 1024**3,
            "MemorySwap": 1024**3,
            "NanoCpus": 10**9,
            "PidsLimit": 256,
        }, service


def test_sighup_reaches_the_proxy_through_init_and_reloads_the_environment_file(
    stack: Stack,
) -> None:
    def reloads() -> list[str]:
        return [
            line for line in stack.logs("proxy").splitlines() if "configuration reloaded" in line
        ]

    before = len(reloads())
    stack.compose("kill", "-s", "HUP", "proxy")
    (line,) = wait_for("the reload line", lambda: reloads()[before:])
    assert line.endswith("configuration reloaded (SIGHUP): 5 allowlist entries")
    assert health_status(stack.container("proxy")) == "healthy"


def proxy_counter(stack: Stack) -> float:
    """egress_requests_total{decision="allow",reason="allowlisted"} as the proxy reports it."""
    script = f"""
    import json, urllib.request
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({{}}))
    text = opener.open("http://{PROXY_METRICS[0]}:{PROXY_METRICS[1]}/metrics", timeout=5).read().decode()
    line = [l for l in text.splitlines()
            if l.startswith('egress_requests_total{{decision="allow",reason="allowlisted"}}')]
    print(json.dumps(float(line[0].split()[-1])))
    """
    return float(stack.python("proxy", textwrap.dedent(script)))


def test_prometheus_scrapes_both_proxies_and_both_runners(stack: Stack) -> None:
    def targets() -> dict[str, str] | None:
        active = stack.prometheus("/api/v1/targets")["data"]["activeTargets"]
        health = {t["labels"]["job"]: t["health"] for t in active}
        return health if set(health.values()) == {"up"} else None

    assert wait_for("all targets up", targets, attempts=45, interval=2) == {
        "egress-proxy": "up",
        "hookrunner": "up",
        "egress-proxy-transparent": "up",
        "hookrunner-transparent": "up",
        "egress-dns-transparent": "up",
    }
    stack.session("sandbox", "env_prometheus", WRITE)
    expected = proxy_counter(stack)
    assert expected >= 1

    def scraped() -> float | None:
        query = 'egress_requests_total{job="egress-proxy",decision="allow",reason="allowlisted"}'
        result = stack.prometheus("/api/v1/query?" + urlencode({"query": query}))["data"]["result"]
        value = float(result[0]["value"][1]) if result else None
        return value if value == expected else None

    assert (
        wait_for("the proxy's counter in Prometheus", scraped, attempts=45, interval=2) == expected
    )


def test_prometheus_loads_the_alert_rules(stack: Stack) -> None:
    """deploy/prometheus/egress-alerts.yaml, mounted and named in rule_files, is loaded."""

    def groups() -> list[str] | None:
        found = stack.prometheus("/api/v1/rules")["data"]["groups"]
        return sorted(g["name"] for g in found) or None

    assert wait_for("rule groups loaded", groups, attempts=30, interval=2) == [
        "egress-proxy",
        "hookrunner",
    ]


def health_status(container: str) -> str:
    return run(
        ["docker", "inspect", "--format", "{{.State.Health.Status}}", container], timeout=30
    ).strip()


def test_the_image_runs_with_its_embedded_configuration_and_reports_healthy(stack: Stack) -> None:
    # No configuration, no volume, no network: the image's defaults alone (and the demo
    # token, which the image does not carry).
    name = f"{stack.project}-default"
    run(
        [
            *("docker", "run", "-d", "--name", name, "--network", "none"),
            *("-e", "DEMO_API_TOKEN=demo-not-a-real-token", "sandbox-egress:0.1.0"),
        ],
        timeout=60,
    )
    try:
        # The HEALTHCHECK (egress-proxy health) decides; it starts "starting".
        settled = wait_for(
            "the HEALTHCHECK's verdict",
            lambda: (status := health_status(name)) != "starting" and status,
            attempts=60,
        )
        assert settled == "healthy"
        logs = subprocess.run(
            ["docker", "logs", name], capture_output=True, text=True, timeout=30, check=True
        )
        assert "egress-proxy: 5 allowlist entries from /etc/egress/env.yaml" in logs.stderr
        config = json.loads(run(["docker", "inspect", name], timeout=30))[0]["Config"]
        assert config["User"] == "egress"
        assert config["Healthcheck"]["Test"] == [
            "CMD",
            "egress-proxy",
            "health",
            "--metrics",
            "127.0.0.1:9464",
        ]
        labels = config["Labels"]
        assert labels["org.opencontainers.image.title"] == "sandbox-egress"
        assert labels["org.opencontainers.image.version"] == "0.1.0"
        assert labels["org.opencontainers.image.base.name"] == "sandbox-egress-base:trixie-2"
    finally:
        run(["docker", "rm", "-f", name], timeout=60)
