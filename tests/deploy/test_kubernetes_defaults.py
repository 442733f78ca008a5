"""Safe by default (issue 48): what `kubectl kustomize` renders, checked as a cluster would
apply it.

* The base (`kubectl apply -k deploy/`) holds no sandbox pod and nothing in `monitoring`;
  the demo sandboxes and the monitoring ConfigMaps come only with their components.
* No open proxy: every pod that listens on a proxy port (the DaemonSet's and the fleet's
  replicas) is selected by a NetworkPolicy of type Ingress, and every rule that admits
  the proxy port admits only pods of namespaces labelled as sandbox namespaces; the
  replicas' own egress is the DaemonSet's backstop (plus the fleet's Redis, nothing more).
* No password-less store: every Redis requires the password of a Secret, which it never
  puts on a command line, and every replica's `state:` sends that Secret's password. The
  Redis container's own start-up script is run for real (Debian's redis-server) to show
  that it refuses a client without the password and admits one with it.
"""

from __future__ import annotations

import os
import shutil
import socket
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from sandbox_egress.proxy import config as configuration
from sandbox_egress.runtime.cmdline import parser as proxy_parser
from testbed import procs
from testbed.redisserver import redis_server
from tests.deploy.test_kubernetes import DEMO, DEPLOY, kustomize

FLEET = DEPLOY / "kubernetes" / "fleet"
PROMETHEUS, GRAFANA = DEPLOY / "prometheus", DEPLOY / "grafana"
SANDBOX_NAMESPACES = {"egress.example/sandboxes": "true"}
WORKLOADS = {"Pod", "Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job", "CronJob"}


def render(tmp_path: Path, *components: Path) -> list[dict[str, Any]]:
    """deploy/ with `components`, through an overlay as an operator writes it."""
    overlay = tmp_path / "overlay"
    overlay.mkdir(exist_ok=True)
    listed = ", ".join(os.path.relpath(c, overlay) for c in components)
    (overlay / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources: [{os.path.relpath(DEPLOY, overlay)}]\ncomponents: [{listed}]\n"
    )
    return [d for d in yaml.safe_load_all(kustomize(overlay)) if d]


def pods(documents: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(object, pod template spec with its metadata) of every workload."""
    found = []
    for d in documents:
        if d["kind"] == "Pod":
            found.append((d, {"metadata": d["metadata"], "spec": d["spec"]}))
        elif d["kind"] in WORKLOADS:
            found.append((d, d["spec"]["template"]))
    return found


def selects(policy: dict[str, Any], namespace: str, labels: dict[str, str]) -> bool:
    if policy["metadata"].get("namespace") != namespace:
        return False
    wanted = policy["spec"]["podSelector"].get("matchLabels", {})
    return wanted.items() <= labels.items()


def proxy_ports(template: dict[str, Any]) -> set[int]:
    """The ports a pod serves the proxy on (`egress-proxy run --listen`)."""
    ports = set()
    for container in template["spec"]["containers"]:
        command = container.get("command") or []
        if command[:2] == ["egress-proxy", "run"]:
            ports.add(proxy_parser().parse_args(command[1:]).listen[1])
    return ports


def test_the_base_has_no_demo_pod_and_nothing_in_monitoring() -> None:
    documents = [d for d in yaml.safe_load_all(kustomize(DEPLOY)) if d]
    workloads = {(d["kind"], d["metadata"]["name"]) for d, _ in pods(documents)}
    assert workloads == {("DaemonSet", "egress-proxy")}
    assert [d for d in documents if d["metadata"].get("namespace") == "monitoring"] == []


def test_the_demo_and_monitoring_objects_come_with_their_components(tmp_path: Path) -> None:
    documents = render(tmp_path, DEMO, PROMETHEUS, GRAFANA)
    workloads = {(d["kind"], d["metadata"]["name"]) for d, _ in pods(documents)}
    assert workloads == {
        ("DaemonSet", "egress-proxy"),
        ("Pod", "sandbox"),
        ("Pod", "sandbox-sidecar"),
    }
    monitoring = {
        (d["kind"], d["metadata"]["name"])
        for d in documents
        if d["metadata"].get("namespace") == "monitoring"
    }
    assert monitoring == {("ConfigMap", "egress-alerts"), ("ConfigMap", "egress-dashboard")}


def test_no_pod_may_use_a_proxy_unless_it_is_a_sandbox(tmp_path: Path) -> None:
    documents = render(tmp_path, FLEET)
    policies = [d for d in documents if d["kind"] == "NetworkPolicy"]
    proxies = {}
    for obj, template in pods(documents):
        ports = proxy_ports(template)
        if ports:
            proxies[obj["metadata"]["name"]] = (obj["metadata"]["namespace"], template, ports)
    assert set(proxies) == {"egress-proxy", "egress-proxy-fleet"}
    for name, (namespace, template, ports) in proxies.items():
        labels = template["metadata"]["labels"]
        ingress = [
            p
            for p in policies
            if "Ingress" in p["spec"]["policyTypes"] and selects(p, namespace, labels)
        ]
        assert ingress, f"{name}: no Ingress NetworkPolicy: any pod may use it as a proxy"
        admitting = [
            rule
            for p in ingress
            for rule in p["spec"].get("ingress", [])
            if not rule.get("ports") or {x["port"] for x in rule["ports"]} & ports
        ]
        assert admitting, name
        for rule in admitting:
            assert rule.get("from"), f"{name}: a rule admits every source on the proxy port"
            for peer in rule["from"]:
                assert set(peer) == {"namespaceSelector"}, (name, peer)
                assert peer["namespaceSelector"]["matchLabels"] == SANDBOX_NAMESPACES


def test_the_replicas_egress_is_the_daemonsets_plus_redis(tmp_path: Path) -> None:
    documents = render(tmp_path, FLEET)
    egress = {
        d["metadata"]["name"]: d["spec"]
        for d in documents
        if d["kind"] == "NetworkPolicy" and "Egress" in d["spec"]["policyTypes"]
    }
    node, fleet = egress["egress-proxy-egress"], egress["egress-proxy-fleet-egress"]
    redis_rule = {
        "to": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "egress-redis"}}}],
        "ports": [{"protocol": "TCP", "port": 6379}],
    }
    assert fleet["egress"] == [*node["egress"], redis_rule]
    assert egress["egress-redis-egress"]["egress"] == []  # Redis connects nowhere


def test_no_store_answers_without_a_password(tmp_path: Path) -> None:
    documents = render(tmp_path, FLEET)
    redis = [
        (obj, template)
        for obj, template in pods(documents)
        if any(c["image"].startswith("redis:") for c in template["spec"]["containers"])
    ]
    assert [obj["metadata"]["name"] for obj, _ in redis] == ["egress-redis"]
    (_, template) = redis[0]
    (container,) = template["spec"]["containers"]
    assert container["image"] == "redis:7.4"  # pinned; the 7.0 line is past its end of life
    script = container["command"][-1]
    assert "requirepass" in script and "cat /run/secrets/redis/password" in script
    assert "requirepass" not in " ".join(container["command"][:-1] + container.get("args", []))
    secret = volume_secret(template, container, "/run/secrets/redis")
    assert secret == ("egress-redis-auth", "password")
    # Every replica sends that Secret's password.
    (fleet,) = [t for o, t in pods(documents) if o["metadata"]["name"] == "egress-proxy-fleet"]
    (proxy,) = fleet["spec"]["containers"]
    config = next(
        d["data"]["env.yaml"]
        for d in documents
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "egress-proxy-fleet-config"
    )
    state = yaml.safe_load(config)["state"]
    assert state["password"] == "${file:/run/secrets/redis/password}"
    assert "@" not in state["url"]  # no password in the URL, i.e. in the ConfigMap
    assert volume_secret(fleet, proxy, "/run/secrets/redis") == secret
    password_file = tmp_path / "password"
    password_file.write_text("p" * 16)
    path = tmp_path / "env.yaml"
    path.write_text(config.replace("/run/secrets/redis/password", str(password_file)))
    token = tmp_path / "token"
    token.write_text("t" * 16)
    text = path.read_text().replace("/run/secrets/egress/telemetry-token", str(token))
    path.write_text(text)
    assert configuration.load(path).state.password == "p" * 16  # the real loader


def volume_secret(
    template: dict[str, Any], container: dict[str, Any], mount: str
) -> tuple[str, str]:
    """(Secret name, key) mounted at `mount` in `container`."""
    (volume_name,) = [m["name"] for m in container["volumeMounts"] if m["mountPath"] == mount]
    (volume,) = [v for v in template["spec"]["volumes"] if v["name"] == volume_name]
    (item,) = volume["secret"]["items"]
    assert item["path"] == "password"
    return volume["secret"]["secretName"], item["key"]


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs sh")
def test_the_redis_start_script_requires_the_password_for_real(tmp_path: Path) -> None:
    """The rendered container's script, run as it is but for its paths, on Debian's
    redis-server (testbed.redisserver): without the password NOAUTH, with it PONG."""
    documents = render(tmp_path, FLEET)
    (template,) = [t for o, t in pods(documents) if o["metadata"]["name"] == "egress-redis"]
    (container,) = template["spec"]["containers"]
    secrets, run = tmp_path / "secrets", tmp_path / "run"
    secrets.mkdir()
    run.mkdir()
    password = "0123456789abcdef" * 2
    (secrets / "password").write_text(password)
    sock = tmp_path / "redis.sock"
    script = (
        container["command"][-1]
        .replace("/run/secrets/redis", str(secrets))
        .replace("/run/redis", str(run))
        .replace("exec redis-server", f"exec {redis_server()}")
        .replace(
            "--maxmemory-policy volatile-ttl",
            f"--maxmemory-policy volatile-ttl --port 0 --unixsocket {sock} --dir {tmp_path}",
        )
    )
    child = procs.start("k8s-redis", [*container["command"][:-1], script], tmp_path)
    try:
        procs.wait_until("redis socket", sock.exists, timeout=20, child=child)
        assert ask(sock, b"PING\r\n").startswith(b"-NOAUTH")
        assert ask(sock, f"AUTH {password}\r\nPING\r\n".encode(), lines=2) == b"+OK\r\n+PONG\r\n"
        assert password not in Path(f"/proc/{child.pid}/cmdline").read_text()
    finally:
        child.stop()
    assert oct((run / "redis.conf").stat().st_mode & 0o777) == "0o600"


def ask(sock: Path, request: bytes, lines: int = 1) -> bytes:
    with socket.socket(socket.AF_UNIX) as client:
        client.settimeout(5)
        client.connect(str(sock))
        client.sendall(request)
        answer = b""
        deadline = time.monotonic() + 5
        while answer.count(b"\r\n") < lines and time.monotonic() < deadline:
            answer += client.recv(256)
        return answer
