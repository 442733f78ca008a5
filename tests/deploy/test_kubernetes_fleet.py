"""The fleet component (deploy/kubernetes/fleet/): built for real with `kubectl kustomize` in
an overlay beside the base, its proxy command parsed by the real CLI, its environment file
by the real loader, and the parts the issue asks for checked: replicas, a
PodDisruptionBudget, a Redis the replicas' `state:` names, and probes on /status."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from sandbox_egress.proxy.config import loader as configuration
from sandbox_egress.runtime.cmdline import parser as proxy_parser
from tests.deploy.test_kubernetes import DEPLOY, kubectl

FLEET = DEPLOY / "kubernetes" / "fleet"


def build(tmp_path: Path) -> list[dict[str, Any]]:
    """The base and the component, as an operator's overlay builds them."""
    base = os.path.relpath(DEPLOY, tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources: [{base}]\ncomponents: [{base}/kubernetes/fleet]\n"
    )
    done = subprocess.run(
        [kubectl(), "kustomize", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def one(documents: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in documents if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name)
    return found[0]


def test_the_component_adds_replicas_a_disruption_budget_and_redis(tmp_path: Path) -> None:
    documents = build(tmp_path)
    fleet = one(documents, "Deployment", "egress-proxy-fleet")
    labels = fleet["spec"]["template"]["metadata"]["labels"]
    assert fleet["spec"]["replicas"] >= 2
    assert fleet["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pdb = one(documents, "PodDisruptionBudget", "egress-proxy-fleet")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    service = one(documents, "Service", "egress-proxy-fleet")
    assert service["spec"]["selector"].items() <= labels.items()
    assert one(documents, "DaemonSet", "egress-proxy")  # the base is still there
    images = {c["image"] for c in fleet["spec"]["template"]["spec"]["containers"]}
    assert images == {"registry.example.com/sandbox-egress:0.1.0"}  # as the base's


def test_the_replicas_run_a_valid_command_and_share_the_componets_redis(tmp_path: Path) -> None:
    documents = build(tmp_path)
    pod = one(documents, "Deployment", "egress-proxy-fleet")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = proxy_parser().parse_args(container["command"][1:])
    assert (args.command, args.audit_format) == ("run", "ocsf")
    config = one(documents, "ConfigMap", "egress-proxy-fleet-config")["data"]["env.yaml"]
    path = tmp_path / "env.yaml"
    path.write_text(config)
    network = configuration.load(path, secrets=False)  # the real loader; no token here
    assert network.state.backend == "redis"
    url = urlsplit(network.state.url)
    redis = one(documents, "Service", "egress-redis")
    assert url.hostname == "egress-redis.egress-system.svc.cluster.local"
    assert url.port == redis["spec"]["ports"][0]["port"]
    redis_pods = one(documents, "Deployment", "egress-redis")["spec"]["template"]["metadata"]
    assert redis["spec"]["selector"].items() <= redis_pods["labels"].items()
    policy = one(documents, "NetworkPolicy", "egress-redis-ingress")["spec"]
    (rule,) = policy["ingress"]
    fleet_labels = one(documents, "Deployment", "egress-proxy-fleet")["spec"]["template"]
    assert rule["from"][0]["podSelector"]["matchLabels"].items() <= (
        fleet_labels["metadata"]["labels"].items()
    )


def test_the_probes_ask_status_and_healthz_on_the_metrics_port(tmp_path: Path) -> None:
    pod = one(build(tmp_path), "Deployment", "egress-proxy-fleet")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = proxy_parser().parse_args(container["command"][1:])
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["metrics"] == args.metrics[1]
    paths = {k: container[k]["httpGet"]["path"] for k in
             ("startupProbe", "readinessProbe", "livenessProbe")}  # fmt: skip
    assert paths == {"startupProbe": "/status", "livenessProbe": "/status",
                     "readinessProbe": "/healthz"}  # fmt: skip
    assert all(container[k]["httpGet"]["port"] == "metrics" for k in paths)
