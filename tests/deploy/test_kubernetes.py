"""deploy/kubernetes/*.yaml, checked for consistency with the CLI and with each other.

Every YAML document is parsed. Container commands parse with the real
parsers; ports, probes and scrape annotations agree with --listen/--metrics;
every ConfigMap, Secret and volume a pod refers to exists (in the manifests,
or among the objects deploy/kubernetes/README.md creates out of band); the
environment files pass the proxy's real validation with their secret
references satisfied the way the pod satisfies them; the sidecar's iptables
rules redirect to the port the proxy listens on and exempt exactly its uid.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from sandbox_egress.hookrunner.cli import _parser as hookrunner_parser
from sandbox_egress.hookrunner.loader import load_config
from sandbox_egress.proxy import config as configuration
from sandbox_egress.proxy.hosts import canonical_host
from sandbox_egress.proxy.policy import Policy
from sandbox_egress.runtime.ca import CA_CERT
from sandbox_egress.runtime.cmdline import parser as proxy_parser
from tests.deploy.netrules import check_transparent_rules, parse_rules

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy/kubernetes"
# The base's manifests and the demo component's sandboxes (deploy/kubernetes/demo/,
# opt-in since issue 48), read together: the sandboxes must agree with the DaemonSet.
FILES = sorted(K8S.glob("*.yaml")) + sorted(
    p for p in (K8S / "demo").glob("*.yaml") if p.name != "kustomization.yaml"
)
DEMO = K8S / "demo"
DOCUMENTS: list[dict[str, Any]] = [
    doc for path in FILES for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc
]
CLUSTER_KINDS = {"Namespace", "PriorityClass"}
PROXY_UID_IN_IMAGE = (
    10001  # USER egress in the Dockerfile: the default for a container without runAsUser
)
TEST_TOKEN = "k8s-test-token-93be"


def objects(kind: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (d["metadata"].get("namespace", ""), d["metadata"]["name"]): d
        for d in DOCUMENTS
        if d["kind"] == kind
    }


def the(kind: str, namespace: str, name: str) -> dict[str, Any]:
    return objects(kind)[(namespace, name)]


@dataclass(frozen=True)
class Workload:
    """A pod template: a Pod, or the template of a DaemonSet."""

    kind: str
    namespace: str
    name: str
    metadata: dict[str, Any]
    spec: dict[str, Any]

    @property
    def containers(self) -> list[dict[str, Any]]:
        return [*self.spec.get("initContainers", []), *self.spec["containers"]]

    def container(self, name: str) -> dict[str, Any]:
        (found,) = [c for c in self.containers if c["name"] == name]
        return found

    def volume(self, name: str) -> dict[str, Any]:
        (found,) = [v for v in self.spec.get("volumes", []) if v["name"] == name]
        return found

    def uid(self, container: dict[str, Any]) -> int:
        for context in (container.get("securityContext", {}), self.spec.get("securityContext", {})):
            if "runAsUser" in context:
                return int(context["runAsUser"])
        return PROXY_UID_IN_IMAGE

    def mount_at(
        self, container: dict[str, Any], path: str
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """(volumeMount, volume) whose mountPath holds `path`."""
        holding = [
            m
            for m in container.get("volumeMounts", [])
            if path == m["mountPath"] or path.startswith(m["mountPath"].rstrip("/") + "/")
        ]
        assert holding, f"{container['name']}: {path} is not inside any volume mount"
        mount = max(holding, key=lambda m: len(m["mountPath"]))
        return mount, self.volume(mount["name"])

    def port(self, container: dict[str, Any], ref: int | str) -> int:
        if isinstance(ref, int):
            return ref
        (number,) = [p["containerPort"] for p in container.get("ports", []) if p["name"] == ref]
        return int(number)


def workloads() -> list[Workload]:
    found = []
    for doc in DOCUMENTS:
        meta = doc["metadata"]
        if doc["kind"] == "Pod":
            found.append(Workload("Pod", meta["namespace"], meta["name"], meta, doc["spec"]))
        elif doc["kind"] in {"DaemonSet", "Deployment", "StatefulSet"}:
            template = doc["spec"]["template"]
            found.append(
                Workload(
                    doc["kind"],
                    meta["namespace"],
                    meta["name"],
                    template["metadata"],
                    template["spec"],
                )
            )
    return found


def workload(name: str) -> Workload:
    (found,) = [w for w in workloads() if w.name == name]
    return found


def proxies() -> Iterator[tuple[Workload, dict[str, Any], Any]]:
    for w in workloads():
        for c in w.containers:
            if c.get("command", [])[:2] == ["egress-proxy", "run"]:
                yield w, c, proxy_parser().parse_args(c["command"][1:] + c.get("args", []))


def dns_args(container: dict[str, Any]) -> Any:
    command = container["command"] + container.get("args", [])
    assert command[:2] == ["egress-proxy", "dns"], command
    return proxy_parser().parse_args(command[1:])


def runners() -> Iterator[tuple[Workload, dict[str, Any], Any]]:
    for w in workloads():
        for c in w.containers:
            if c.get("command", [])[:1] == ["hookrunner"]:
                yield w, c, hookrunner_parser().parse_args(c["command"][1:] + c.get("args", []))


def env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def out_of_band() -> dict[tuple[str, str, str], set[str]]:
    """(kind, namespace, name) -> keys, from the `kubectl create` commands of the README."""
    text = (K8S / "README.md").read_text(encoding="utf-8").replace("\\\n", " ")
    found: dict[tuple[str, str, str], set[str]] = {}
    for line in text.splitlines():
        if "kubectl" not in line or " create " not in line:
            continue
        words = shlex.split(line[line.index("kubectl") :])
        namespace = words[words.index("-n") + 1]
        at = words.index("create")
        if words[at + 1] == "secret":
            kind, name = "Secret", words[at + 3]
        else:
            kind, name = "ConfigMap", words[at + 2]
        keys = {
            w.split("=", 2)[1] for w in words if w.startswith(("--from-file=", "--from-literal="))
        }
        found[(kind, namespace, name)] = keys
    return found


def data_keys(kind: str, namespace: str, name: str) -> set[str]:
    """Keys of a ConfigMap or Secret, defined in the manifests or out of band."""
    defined = objects(kind).get((namespace, name))
    if defined is not None:
        return set(defined.get("data", {})) | set(defined.get("stringData", {}))
    external = out_of_band().get((kind, namespace, name))
    assert external is not None, (
        f"{kind} {namespace}/{name} is neither defined nor created in the README"
    )
    return external


PROXY_EXPECTED = {
    # workload: (mode, listen, metrics, config file)
    "egress-proxy": (
        "regular",
        ("0.0.0.0", 8080),
        ("0.0.0.0", 9464),
        "/etc/egress/config/env.yaml",
    ),
    "sandbox-sidecar": (
        "transparent",
        ("127.0.0.1", 8081),
        ("0.0.0.0", 9464),
        "/etc/egress/config/env.yaml",
    ),
}


# -- documents -------------------------------------------------------------------------


def test_a_proxy_rollout_never_leaves_a_node_without_a_ready_proxy() -> None:
    """maxUnavailable: 1 without surge cut a node's sandboxes off on every rollout."""
    (daemonset,) = [d for d in DOCUMENTS if d["kind"] == "DaemonSet"]
    rolling = daemonset["spec"]["updateStrategy"]["rollingUpdate"]
    assert (rolling["maxSurge"], rolling["maxUnavailable"]) == (1, 0)
    # Two pods on one node must fit: no host port, no host network.
    pod = daemonset["spec"]["template"]["spec"]
    assert not pod.get("hostNetwork")
    assert all("hostPort" not in p for c in pod["containers"] for p in c.get("ports", []))
    (service,) = [d for d in DOCUMENTS if d["kind"] == "Service" and d["metadata"]["name"] ==
                  "egress-proxy"]  # fmt: skip
    assert service["spec"]["internalTrafficPolicy"] == "Local"


def test_every_document_is_a_named_object_in_a_declared_namespace() -> None:
    assert [str(p.relative_to(K8S)) for p in FILES] == [
        "daemonset.yaml",
        "namespaces.yaml",
        "demo/sandbox-regular.yaml",
        "demo/sidecar.yaml",
    ]
    namespaces = {name for (_, name) in objects("Namespace")}
    assert namespaces == {"egress-system", "sandboxes", "sandboxes-sidecar"}
    seen = set()
    for doc in DOCUMENTS:
        assert doc["apiVersion"]
        assert doc["kind"]
        assert doc["metadata"]["name"]
        key = (doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"])
        assert key not in seen, f"duplicate {key}"
        seen.add(key)
        if doc["kind"] not in CLUSTER_KINDS:
            assert doc["metadata"].get("namespace") in namespaces, key


def test_images_share_one_release() -> None:
    images = {c["image"] for w in workloads() for c in w.containers}
    # The names compose builds (compose.yaml); kustomization.yaml says where they are pulled.
    assert images == {"sandbox-egress:0.1.0", "sandbox-egress-netinit:0.1.0"}
    netinit = [c["name"] for w in workloads() for c in w.containers if "netinit" in c["image"]]
    assert netinit == ["egress-netinit"]


# -- the proxy containers -----------------------------------------------------------------


def test_proxy_args_parse_and_ports_probes_annotations_agree() -> None:
    seen = {}
    for w, c, args in proxies():
        mode, listen, metrics, config = PROXY_EXPECTED[w.name]
        assert (args.mode, args.listen, args.metrics, args.config) == (
            mode,
            listen,
            metrics,
            config,
        )
        seen[w.name] = c["name"]
        ports = {p["containerPort"] for p in c["ports"]}
        assert args.metrics[1] in ports
        if not ipaddress.ip_address(args.listen[0]).is_loopback:
            assert args.listen[1] in ports  # reached from other pods
        probes = [c[k] for k in ("startupProbe", "readinessProbe", "livenessProbe") if k in c]
        assert "readinessProbe" in c
        named = {p["name"]: p["containerPort"] for p in c["ports"]}
        for probe in probes:
            # The kubelet's own GET /healthz on the metrics port: no process per probe
            # (`exec egress-proxy health` cost 0.3 s of CPU each, issue 35).
            assert set(probe) & {"exec", "tcpSocket", "grpc"} == set()
            assert probe["httpGet"]["path"] == "/healthz"
            assert named[probe["httpGet"]["port"]] == args.metrics[1]
            assert ipaddress.ip_address(args.metrics[0]).is_unspecified  # the pod IP answers
        annotations = w.metadata["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/port"] == str(args.metrics[1])
        assert annotations["prometheus.io/path"] == "/metrics"
    assert seen == {"egress-proxy": "egress-proxy", "sandbox-sidecar": "egress-proxy"}


def test_the_config_map_is_mounted_as_a_directory_so_reloads_see_updates() -> None:
    for w, c, args in proxies():
        mount, volume = w.mount_at(c, args.config)
        assert "subPath" not in mount, "a subPath mount never receives ConfigMap updates"
        assert mount["readOnly"] is True
        name = volume["configMap"]["name"]
        key = args.config.removeprefix(mount["mountPath"].rstrip("/") + "/")
        assert key in the("ConfigMap", w.namespace, name)["data"]


def environment_file(
    w: Workload, c: dict[str, Any], args: Any, tmp_path: Path, token: str
) -> tuple[Path, dict[str, str]]:
    """The proxy's ConfigMap file with each reference satisfied as the pod satisfies it."""
    mount, volume = w.mount_at(c, args.config)
    key = args.config.removeprefix(mount["mountPath"].rstrip("/") + "/")
    text = the("ConfigMap", w.namespace, volume["configMap"]["name"])["data"][key]
    environ: dict[str, str] = {}
    for reference in re.findall(r"\$\{([^}]+)\}", text):
        if reference.startswith("file:"):
            path = reference.removeprefix("file:")
            secret_mount, secret_volume = w.mount_at(c, path)
            secret = secret_volume["secret"]
            item = path.removeprefix(secret_mount["mountPath"].rstrip("/") + "/")
            (source_key,) = [i["key"] for i in secret.get("items", []) if i["path"] == item] or [
                item
            ]
            assert source_key in data_keys("Secret", w.namespace, secret["secretName"])
            stand_in = tmp_path / item
            stand_in.write_text(token + "\n")
            text = text.replace(reference, f"file:{stand_in}")
        else:
            ref = env(c)[reference]["secretKeyRef"]
            assert ref["key"] in data_keys("Secret", w.namespace, ref["name"])
            environ[reference] = token
    copy = tmp_path / "env.yaml"
    copy.write_text(text)
    return copy, environ


@pytest.mark.parametrize("name", sorted(PROXY_EXPECTED))
def test_config_map_environment_file_passes_real_validation(name: str, tmp_path: Path) -> None:
    ((w, c, args),) = [p for p in proxies() if p[0].name == name]
    path, environ = environment_file(w, c, args, tmp_path, TEST_TOKEN)
    network = configuration.load(path, environ=environ)
    assert [e.pattern for e in network.allowlist] == [
        "telemetry.example.com", "pypi.org", "*.pypi.org", "files.pythonhosted.org"
    ]  # fmt: skip
    telemetry = network.allowlist[0]
    assert [(t.header, t.value.reveal()) for t in telemetry.transform] == [
        ("Authorization", f"Bearer {TEST_TOKEN}")
    ]
    # Without the secret the same file is refused: the reference is real.
    for stand_in in tmp_path.iterdir():
        if stand_in != path:
            stand_in.unlink()
    with pytest.raises(configuration.ConfigError) as info:
        configuration.load(path, environ={})
    assert [p.location for p in info.value.problems] == [
        "network.allowlist[0].transform.Authorization"
    ]


def test_ca_is_in_a_writable_pod_local_directory() -> None:
    for w, c, args in proxies():
        mount, volume = w.mount_at(c, str(args.certs))
        assert volume.get("emptyDir", {}).get("medium") == "Memory", (
            "the CA key stays off the node's disk"
        )
        assert not mount.get("readOnly", False)
        assert str(args.certs) != mount["mountPath"], "an emptyDir root is not ours to chmod 0700"


def test_daemonset_installs_the_fleet_ca_from_its_secret_into_the_certs_directory() -> None:
    w = workload("egress-proxy")
    ((_, _, args),) = [p for p in proxies() if p[0].name == "egress-proxy"]
    init = w.container("install-ca")
    assert init["command"][:2] == ["sh", "-euc"]
    installs = [
        shlex.split(line)
        for line in init["command"][2].splitlines()
        if line.startswith("install -m")
    ]
    copied = {Path(words[-1]).name: (words[2], words[-2], words[-1]) for words in installs}
    assert copied[f"{CA_CERT}"][2] == f"{args.certs}/{CA_CERT}"
    mode, source, destination = copied["mitmproxy-ca.pem"]
    assert (mode, destination) == ("0600", f"{args.certs}/mitmproxy-ca.pem")
    _, secret_volume = w.mount_at(init, source)
    secret = secret_volume["secret"]
    assert "mitmproxy-ca.pem" in data_keys("Secret", w.namespace, secret["secretName"])
    assert (
        w.mount_at(init, destination)[1] is w.mount_at(w.container("egress-proxy"), destination)[1]
    )
    holders = {
        c["name"]
        for c in w.containers
        for m in c.get("volumeMounts", [])
        if m["name"] == secret_volume["name"]
    }
    assert holders == {"install-ca"}


def test_sidecar_generates_its_ca_and_exports_only_the_public_certificate() -> None:
    w = workload("sandbox-sidecar")
    ((_, proxy, args),) = [p for p in proxies() if p[0].name == "sandbox-sidecar"]
    init = w.container("egress-ca")
    assert init["command"][:2] == ["sh", "-euc"]
    steps = [shlex.split(line) for line in init["command"][2].splitlines() if line.strip()]
    assert [s[0] for s in steps] == ["egress-proxy", "cp"]
    ca = proxy_parser().parse_args(steps[0][1:])
    assert (ca.command, ca.certs) == ("ca", args.certs)
    source, destination = steps[1][1:]
    assert source == f"{args.certs}/{CA_CERT}"
    state = w.mount_at(proxy, str(args.certs))[1]
    assert w.mount_at(init, str(args.certs))[1] is state
    public = w.mount_at(init, destination)[1]
    assert public is not state
    holders = {
        c["name"]
        for c in w.containers
        for m in c.get("volumeMounts", [])
        if m["name"] == state["name"]
    }
    assert holders == {"egress-ca", "egress-proxy"}, (
        "the CA key must never be mounted into the sandbox"
    )
    sandbox = w.container("sandbox")
    bundle = env(sandbox)["SSL_CERT_FILE"]
    mount, volume = w.mount_at(sandbox, bundle)
    assert volume is public
    assert mount["readOnly"] is True
    assert bundle == f"{mount['mountPath']}/{Path(destination).name}" == f"/etc/egress-ca/{CA_CERT}"


# -- services, sandboxes and network policies -----------------------------------------------


def test_services_select_the_proxy_pods_and_target_its_ports() -> None:
    w = workload("egress-proxy")
    proxy = w.container("egress-proxy")
    ((_, _, args),) = [p for p in proxies() if p[0].name == "egress-proxy"]
    labels = w.metadata["labels"]
    service = the("Service", "egress-system", "egress-proxy")
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["internalTrafficPolicy"] == "Local"
    ((port,),) = [service["spec"]["ports"]]
    assert w.port(proxy, port["targetPort"]) == port["port"] == args.listen[1]
    metrics = the("Service", "egress-system", "egress-proxy-metrics")
    assert metrics["spec"]["selector"].items() <= labels.items()
    ((mport,),) = [metrics["spec"]["ports"]]
    assert w.port(proxy, mport["targetPort"]) == mport["port"] == args.metrics[1]
    assert "prometheus.io/scrape" not in metrics["metadata"].get(
        "annotations", {}
    )  # pods are annotated


def test_regular_sandbox_routes_through_the_node_local_service() -> None:
    service = the("Service", "egress-system", "egress-proxy")
    expected = (
        f"http://egress-proxy.egress-system.svc.cluster.local:{service['spec']['ports'][0]['port']}"
    )
    sandbox = workload("sandbox").container("sandbox")
    assert env(sandbox)["HTTPS_PROXY"] == env(sandbox)["HTTP_PROXY"] == expected


def test_runner_sessions_parse_and_their_metrics_ports_agree() -> None:
    seen = []
    for w, c, args in runners():
        seen.append(w.name)
        assert args.command == "session"
        assert c["stdin"] is True, "a session ends at the end of stdin"
        port = int(args.metrics.rpartition(":")[2])
        assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"hook-metrics": port}
        assert args.ca_file == env(c)["SSL_CERT_FILE"] == env(c)["REQUESTS_CA_BUNDLE"]
        if w.name == "sandbox":
            assert w.metadata["annotations"]["prometheus.io/port"] == str(port)
    assert sorted(seen) == ["sandbox", "sandbox-sidecar"]


def test_sandboxes_hold_no_credentials() -> None:
    for name in ("sandbox", "sandbox-sidecar"):
        w = workload(name)
        assert w.spec["automountServiceAccountToken"] is False
        assert w.spec["enableServiceLinks"] is False
        assert w.spec.get("shareProcessNamespace", False) is False
        sandbox = w.container("sandbox")
        assert "envFrom" not in sandbox
        for value in env(sandbox).values():
            assert isinstance(value, str), f"{name}: env from a reference"
        for mount in sandbox["volumeMounts"]:
            assert "secret" not in w.volume(mount["name"]), f"{name}: mounts a Secret"
        assert not [k for k in env(sandbox) if re.search(r"TOKEN|SECRET|PASSWORD|KEY", k)]


def test_every_referenced_volume_config_map_and_secret_exists() -> None:
    for w in workloads():
        volumes = {v["name"] for v in w.spec.get("volumes", [])}
        mounted = {m["name"] for c in w.containers for m in c.get("volumeMounts", [])}
        assert mounted <= volumes, f"{w.name}: undeclared {mounted - volumes}"
        assert volumes <= mounted, f"{w.name}: unused {volumes - mounted}"
        for volume in w.spec.get("volumes", []):
            if "configMap" in volume:
                keys = data_keys("ConfigMap", w.namespace, volume["configMap"]["name"])
                items = {i["key"] for i in volume["configMap"].get("items", [])}
                assert items <= keys, f"{w.name}: {volume['name']} items {items - keys}"
            if "secret" in volume:
                keys = data_keys("Secret", w.namespace, volume["secret"]["secretName"])
                items = {i["key"] for i in volume["secret"].get("items", [])}
                assert items <= keys
        for c in w.containers:
            for value in env(c).values():
                if isinstance(value, dict) and "secretKeyRef" in value:
                    ref = value["secretKeyRef"]
                    assert ref["key"] in data_keys("Secret", w.namespace, ref["name"])


def test_out_of_band_objects_are_what_the_manifests_expect() -> None:
    assert out_of_band() == {
        ("Secret", "egress-system", "egress-proxy-ca"): {"mitmproxy-ca.pem", CA_CERT},
        ("ConfigMap", "sandboxes", "egress-proxy-ca-public"): {CA_CERT},
        ("Secret", "egress-system", "egress-proxy-telemetry-token"): {"token"},
        ("Secret", "sandboxes-sidecar", "egress-proxy-telemetry-token"): {"token"},
        ("Secret", "egress-system", "egress-redis-auth"): {"password"},  # the fleet's Redis
    }
    for kind, namespace, name in out_of_band():
        assert (namespace, name) not in objects(kind), "defined twice"


def test_sandbox_network_policy_allows_only_the_proxy_and_dns() -> None:
    ((_, _, args),) = [p for p in proxies() if p[0].name == "egress-proxy"]
    policy = the("NetworkPolicy", "sandboxes", "sandbox-egress-via-proxy")["spec"]
    assert policy["podSelector"] == {}
    assert set(policy["policyTypes"]) == {"Ingress", "Egress"}
    to_proxy, to_dns = policy["egress"]
    (peer,) = to_proxy["to"]
    assert peer["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "egress-system"
    }
    assert (
        peer["podSelector"]["matchLabels"].items()
        <= workload("egress-proxy").metadata["labels"].items()
    )
    assert to_proxy["ports"] == [{"protocol": "TCP", "port": args.listen[1]}]
    assert to_dns["to"][0]["podSelector"]["matchLabels"] == {"k8s-app": "kube-dns"}
    assert {p["port"] for p in to_dns["ports"]} == {53}
    (ingress,) = policy["ingress"]
    assert ingress["ports"] == [{"protocol": "TCP", "port": 9465}]


def test_proxy_network_policy_admits_the_sandbox_namespace_and_monitoring() -> None:
    ((_, _, args),) = [p for p in proxies() if p[0].name == "egress-proxy"]
    policy = the("NetworkPolicy", "egress-system", "egress-proxy-ingress")["spec"]
    assert (
        policy["podSelector"]["matchLabels"].items()
        <= workload("egress-proxy").metadata["labels"].items()
    )
    clients, monitoring = policy["ingress"]
    selector = clients["from"][0]["namespaceSelector"]["matchLabels"]
    assert selector.items() <= the("Namespace", "", "sandboxes")["metadata"]["labels"].items()
    assert (
        not selector.items()
        <= the("Namespace", "", "sandboxes-sidecar")["metadata"]["labels"].items()
    )
    assert clients["ports"] == [{"protocol": "TCP", "port": args.listen[1]}]
    assert monitoring["ports"] == [{"protocol": "TCP", "port": args.metrics[1]}]


def test_sidecar_backstop_policy_agrees_with_the_allowlist(tmp_path: Path) -> None:
    ((w, c, args),) = [p for p in proxies() if p[0].name == "sandbox-sidecar"]
    path, environ = environment_file(w, c, args, tmp_path, TEST_TOKEN)
    network = configuration.load(path, environ=environ)
    policy = the("NetworkPolicy", "sandboxes-sidecar", "sandbox-sidecar-backstop")["spec"]
    assert policy["podSelector"]["matchLabels"].items() <= w.metadata["labels"].items()
    _, web = policy["egress"]
    (block,) = web["to"]
    assert block["ipBlock"]["cidr"] == "0.0.0.0/0"
    assert {"169.254.0.0/16", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"} <= set(
        block["ipBlock"]["except"]
    )
    allowed_ports = {p["port"] for p in web["ports"]}
    for entry in network.allowlist:
        assert entry.ports is not None, entry.pattern
        assert entry.ports <= allowed_ports, entry.pattern
    runner_port = int(
        next(a for ww, _, a in runners() if ww.name == w.name).metrics.rpartition(":")[2]
    )
    dns = dns_args(w.container("egress-dns"))
    (ingress,) = policy["ingress"]
    assert {p["port"] for p in ingress["ports"]} == {args.metrics[1], runner_port, dns.metrics[1]}


# -- the sidecar's firewall -----------------------------------------------------------------


def test_sidecar_iptables_redirect_to_the_proxy_and_exempt_only_its_uid() -> None:
    w = workload("sandbox-sidecar")
    ((_, proxy, args),) = [p for p in proxies() if p[0].name == "sandbox-sidecar"]
    netinit = w.container("egress-netinit")
    assert netinit["command"][:2] == ["sh", "-euc"], "a failing rule must fail the pod"
    proxy_uid = w.uid(proxy)
    assert proxy_uid == 10001
    dns = dns_args(w.container("egress-dns"))
    check_transparent_rules(
        netinit["command"][2],
        listen_port=args.listen[1],
        proxy_uid=proxy_uid,
        dns_port=dns.listen[1],
    )
    assert args.listen[0] == dns.listen[0] == "127.0.0.1"  # where REDIRECT sends local packets
    # Order: rules first, then the CA, then the proxy and the DNS responder (native
    # sidecars, ready before the sandbox starts), then the sandbox.
    init_names = [c["name"] for c in w.spec["initContainers"]]
    assert init_names == ["egress-netinit", "egress-ca", "egress-proxy", "egress-dns"]
    for sidecar in (proxy, w.container("egress-dns")):
        assert sidecar["restartPolicy"] == "Always"
        assert "startupProbe" in sidecar
    # The responder resolves as the proxy's uid: exempt from the redirect, or it would
    # send its own lookups to itself.
    assert w.uid(w.container("egress-dns")) == proxy_uid
    # Only the init container may change the rules; nobody else runs as the proxy's uid.
    added = netinit["securityContext"]["capabilities"]["add"]
    assert set(added) == {"NET_ADMIN", "NET_RAW"}
    for c in w.containers:
        context = c.get("securityContext", {})
        if c is not netinit:
            assert context["capabilities"] == {"drop": ["ALL"]}, c["name"]
            assert context["allowPrivilegeEscalation"] is False
        if c["name"] not in {"egress-netinit", "egress-ca", "egress-proxy", "egress-dns"}:
            assert w.uid(c) != proxy_uid, f"{c['name']} would bypass the redirect"
            assert "runAsUser" in context, f"{c['name']}: the image's default user is the proxy's"


def test_rule_checker_fails_on_a_wrong_port_a_wrong_uid_or_no_drop() -> None:
    script = workload("sandbox-sidecar").container("egress-netinit")["command"][2]
    good = {"listen_port": 8081, "proxy_uid": 10001, "dns_port": 5353}
    check_transparent_rules(script, **good)
    udp_dns = "iptables -t nat -A EGRESS_REDIRECT -p udp --dport 53 -j REDIRECT --to-ports 5353\n"
    resolver = "iptables -A OUTPUT -d 10.96.0.10 -p udp --dport 53 -j ACCEPT\n"
    for broken, kwargs in [
        (script, {**good, "listen_port": 8080}),
        (script, {**good, "proxy_uid": 10002}),
        (script, {**good, "dns_port": 53}),
        (script.replace("iptables -A OUTPUT -j DROP\n", ""), good),
        (script.replace("--uid-owner 10001 -j RETURN", "--uid-owner 10002 -j RETURN"), good),
        (script.replace(udp_dns, ""), good),  # UDP DNS would reach the pod's resolver
        (
            script.replace(
                "iptables -A OUTPUT -j DROP\n", resolver + "iptables -A OUTPUT -j DROP\n"
            ),
            good,
        ),
        (script.replace("-o lo -d 127.0.0.1 -j ACCEPT", "-o lo -j ACCEPT"), good),
        (
            script.replace("-t nat -I OUTPUT 1 -j", "-t nat -I OUTPUT 1 -p tcp -j"),
            good,
        ),
    ]:
        with pytest.raises(AssertionError):
            check_transparent_rules(broken, **kwargs)
    assert len(parse_rules(script)) == 18
    without_listener_accept = script.replace(
        "iptables -A OUTPUT -d 127.0.0.1 -p tcp --dport 8081 -j ACCEPT\n", ""
    )
    with pytest.raises(AssertionError, match="redirected to 127.0.0.1:8081"):
        check_transparent_rules(without_listener_accept, **good)
    without_dns_accept = script.replace(
        "iptables -A OUTPUT -d 127.0.0.1 -p udp --dport 5353 -j ACCEPT\n", ""
    )
    with pytest.raises(AssertionError, match="DNS redirected to 127.0.0.1:5353"):
        check_transparent_rules(without_dns_accept, **good)


def test_sidecar_rules_are_the_ones_the_compose_test_runs() -> None:
    """compose.yaml's `netfilter` runs in the same shape (the sandbox in the proxy's
    network namespace) and tests/deploy/test_compose_up.py exercises it for real: with
    the same rules, that run covers the sidecar's too."""
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))
    composed = compose["services"]["netfilter"]["command"]
    sidecar = workload("sandbox-sidecar").container("egress-netinit")["command"]
    assert composed[:2] == sidecar[:2] == ["sh", "-euc"]
    assert parse_rules(sidecar[2]) == parse_rules(composed[2])


# -- hooks ---------------------------------------------------------------------------------


@pytest.mark.parametrize("namespace", ["sandboxes", "sandboxes-sidecar"])
def test_hooks_config_maps_are_valid_and_post_to_an_allowlisted_transform_host(
    namespace: str, tmp_path: Path
) -> None:
    data = the("ConfigMap", namespace, "sandbox-hooks")["data"]
    hooks = tmp_path / "hooks.json"
    hooks.write_text(data["hooks.json"])
    config = load_config(tmp_path, hooks)
    assert config.problems == ()
    urls = re.findall(r'"url": "([^"]+)"', data["hooks.json"])
    assert urls == ["https://telemetry.example.com/api/v1/agent-events"]
    proxy_workload = "egress-proxy" if namespace == "sandboxes" else "sandbox-sidecar"
    ((w, c, args),) = [p for p in proxies() if p[0].name == proxy_workload]
    path, environ = environment_file(w, c, args, tmp_path, TEST_TOKEN)
    decision = Policy(configuration.load(path, environ=environ)).decide(
        canonical_host(urlsplit(urls[0]).hostname or ""), 443, tls=True
    )
    assert decision.allowed
    assert decision.entry is not None
    assert decision.entry.transform
    if "gate.py" in data:
        command = re.findall(r'"command": "([^"]+)"', data["hooks.json"])
        assert command == ["python3 /.agents/hooks-scripts/gate.py"]
        volume = workload("sandbox").volume("hooks")["configMap"]
        assert {"key": "gate.py", "path": "hooks-scripts/gate.py"} in volume["items"]
        compile(data["gate.py"], "gate.py", "exec")


# -- the sidecar's DNS responder -------------------------------------------------------------


def test_sidecar_dns_responder_serves_the_proxys_allowlist_and_agrees_with_its_ports(
    tmp_path: Path,
) -> None:
    w = workload("sandbox-sidecar")
    ((_, proxy, args),) = [p for p in proxies() if p[0].name == "sandbox-sidecar"]
    responder = w.container("egress-dns")
    dns = dns_args(responder)
    assert (dns.config, dns.listen, dns.metrics) == (
        args.config,
        ("127.0.0.1", 5353),
        ("0.0.0.0", 9466),
    )
    assert w.mount_at(responder, dns.config)[1] is w.mount_at(proxy, args.config)[1]
    assert "subPath" not in w.mount_at(responder, dns.config)[0]  # SIGHUP reloads see updates
    # It holds no secret (D83): no env, no envFrom, no Secret volume; its file loads
    # without one, as `egress-proxy dns` loads it.
    assert "env" not in responder and "envFrom" not in responder
    mounted = {m["name"] for m in responder["volumeMounts"]}
    assert [v["name"] for v in w.spec["volumes"] if v["name"] in mounted and "secret" in v] == []
    path, _ = environment_file(w, proxy, args, tmp_path, TEST_TOKEN)
    assert "${TELEMETRY_TOKEN}" in path.read_text()
    assert len(configuration.load(path, environ={}, secrets=False).allowlist) == 4
    assert {p["name"]: p["containerPort"] for p in responder["ports"]} == {
        "dns-metrics": dns.metrics[1]
    }
    for kind in ("startupProbe", "readinessProbe"):
        probe = responder[kind]
        assert probe["httpGet"] == {"path": "/healthz", "port": "dns-metrics"}
        assert ipaddress.ip_address(dns.metrics[0]).is_unspecified  # the pod IP answers
    # The responder resolves through the cluster DNS: the backstop lets the pod reach it.
    to_dns, _ = the("NetworkPolicy", "sandboxes-sidecar", "sandbox-sidecar-backstop")["spec"][
        "egress"
    ]
    assert to_dns["to"][0]["podSelector"]["matchLabels"] == {"k8s-app": "kube-dns"}
    assert {(p["protocol"], p["port"]) for p in to_dns["ports"]} == {("UDP", 53), ("TCP", 53)}


# -- scheduling, resources, the proxy's own egress ---------------------------------------------

QUANTITY = re.compile(r"^(\d+(?:\.\d+)?)(m|Ki|Mi|Gi|Ti)?$")
FACTORS = {None: 1.0, "m": 0.001, "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}


def quantity(text: str | int | float) -> float:
    match = QUANTITY.match(str(text))
    assert match, f"not a quantity this test reads: {text!r}"
    return float(match[1]) * FACTORS[match[2]]


def test_the_daemonset_outranks_ordinary_pods_and_tolerates_what_sandboxes_tolerate() -> None:
    w = workload("egress-proxy")
    priority = the("PriorityClass", "", w.spec["priorityClassName"])
    assert priority["apiVersion"] == "scheduling.k8s.io/v1"
    assert (priority["value"], priority["globalDefault"]) == (1000000, False)
    assert 0 < priority["value"] < 2000000000  # below system-cluster-critical
    assert priority["preemptionPolicy"] == "PreemptLowerPriority"
    tolerations = w.spec["tolerations"]
    assert tolerations == [
        {"key": "egress.example/sandboxes", "operator": "Exists", "effect": effect}
        for effect in ("NoSchedule", "NoExecute")
    ]
    sandbox = workload("sandbox")
    assert sandbox.spec["tolerations"], "the example sandbox runs on the sandbox pool"
    for toleration in sandbox.spec["tolerations"]:
        assert toleration in tolerations, (
            f"a node the sandbox may use lacks its proxy: {toleration}"
        )


SANDBOX_RESOURCES = {
    "requests": {"cpu": "250m", "memory": "512Mi", "ephemeral-storage": "1Gi"},
    "limits": {"cpu": "2", "memory": "2Gi", "ephemeral-storage": "5Gi"},
}


@pytest.mark.parametrize("name", ["sandbox", "sandbox-sidecar"])
def test_sandbox_pods_have_resource_limits_and_bounded_volumes(name: str) -> None:
    w = workload(name)
    sandbox = w.container("sandbox")
    assert sandbox["resources"] == SANDBOX_RESOURCES
    assert (w.volume("workspace")["emptyDir"], w.volume("tmp")["emptyDir"]) == (
        {"sizeLimit": "4Gi"},
        {"sizeLimit": "256Mi"},
    )
    # Every container is bounded in memory, and asks for what it needs.
    for c in w.containers:
        resources = c["resources"]
        for key in ("cpu", "memory"):
            assert key in resources["requests"], (c["name"], key)
        assert quantity(resources["limits"]["memory"]) >= quantity(resources["requests"]["memory"])
    # Every emptyDir is bounded, and the ones on disk fit in the sandbox's storage limit.
    on_disk = 0.0
    for volume in w.spec["volumes"]:
        if "emptyDir" in volume:
            assert "sizeLimit" in volume["emptyDir"], f"{name}: {volume['name']} unbounded"
            if volume["emptyDir"].get("medium") != "Memory":
                on_disk += quantity(volume["emptyDir"]["sizeLimit"])
    assert on_disk <= quantity(sandbox["resources"]["limits"]["ephemeral-storage"])


BLOCKED_RANGES = [
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",
    "169.254.0.0/16",
]


def test_the_proxys_egress_backstop_opens_dns_and_the_internet_on_the_allowlists_ports(
    tmp_path: Path,
) -> None:
    ((w, c, args),) = [p for p in proxies() if p[0].name == "egress-proxy"]
    policy = the("NetworkPolicy", "egress-system", "egress-proxy-egress")["spec"]
    assert policy["podSelector"]["matchLabels"].items() <= w.metadata["labels"].items()
    assert policy["policyTypes"] == ["Egress"]  # ingress: egress-proxy-ingress
    to_dns, web = policy["egress"]
    (dns_peer,) = to_dns["to"]
    assert dns_peer == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
        "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
    }
    assert to_dns["ports"] == [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    (block,) = web["to"]
    assert block == {"ipBlock": {"cidr": "0.0.0.0/0", "except": BLOCKED_RANGES}}
    for cidr in BLOCKED_RANGES:
        assert not ipaddress.ip_network(cidr).is_global, cidr
    # The same ranges are closed to the sidecar pods.
    _, sidecar_web = the("NetworkPolicy", "sandboxes-sidecar", "sandbox-sidecar-backstop")["spec"][
        "egress"
    ]
    assert sidecar_web["to"] == web["to"]
    # Every port the allowlist opens is open here (or the backstop would break it).
    path, environ = environment_file(w, c, args, tmp_path, TEST_TOKEN)
    ports = {p["port"] for p in web["ports"]}
    assert {p["protocol"] for p in web["ports"]} == {"TCP"}
    for entry in configuration.load(path, environ=environ).allowlist:
        assert entry.ports is not None, entry.pattern
        assert entry.ports <= ports, entry.pattern


# -- the kustomization ---------------------------------------------------------------------------

DEPLOY = ROOT / "deploy"
KUSTOMIZATION: dict[str, Any] = yaml.safe_load(
    (DEPLOY / "kustomization.yaml").read_text(encoding="utf-8")
)
REGISTRY = "registry.example.com"
GENERATED = {
    ("ConfigMap", "monitoring", "egress-alerts"): (
        "egress-alerts.yaml",
        "prometheus/egress-alerts.yaml",
    ),
    ("ConfigMap", "monitoring", "egress-dashboard"): (
        "egress-dashboard.json",
        "grafana/egress-dashboard.json",
    ),
}


def version() -> str:
    (found,) = re.findall(
        r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(encoding="utf-8"), re.M
    )
    return found


def test_the_kustomization_lists_every_manifest_and_names_every_image() -> None:
    assert KUSTOMIZATION["resources"] == [f"kubernetes/{p.name}" for p in BASE_FILES]
    for resource in KUSTOMIZATION["resources"]:
        assert (DEPLOY / resource).is_file(), resource
    demo = yaml.safe_load((DEMO / "kustomization.yaml").read_text(encoding="utf-8"))
    assert demo["resources"] == [p.name for p in DEMO_FILES]
    assert demo["images"] == KUSTOMIZATION["images"]
    used = {c["image"].partition(":")[0] for w in workloads() for c in w.containers}
    assert KUSTOMIZATION["images"] == [
        {"name": name, "newName": f"{REGISTRY}/{name}", "newTag": version()}
        for name in sorted(used)
    ]
    # compose.yaml builds the same names at the same version.
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))
    built = {s["image"] for s in compose["services"].values() if "image" in s}
    assert {c["image"] for w in workloads() for c in w.containers} <= built
    # The monitoring ConfigMaps are components of their own (opt-in, issue 48).
    generators = {}
    for component in MONITORING:
        kustomization = yaml.safe_load((component / "kustomization.yaml").read_text())
        assert kustomization["kind"] == "Component"
        assert kustomization["generatorOptions"]["disableNameSuffixHash"] is True
        for g in kustomization["configMapGenerator"]:
            files = [f"{component.name}/{f}" for f in g["files"]]
            generators[("ConfigMap", g["namespace"], g["name"])] = files
    assert generators == {key: [source] for key, (_, source) in GENERATED.items()}
    assert "configMapGenerator" not in KUSTOMIZATION


BASE_FILES = [K8S / n for n in ("namespaces.yaml", "daemonset.yaml")]
DEMO_FILES = [DEMO / n for n in ("sandbox-regular.yaml", "sidecar.yaml")]
MONITORING = [DEPLOY / "prometheus", DEPLOY / "grafana"]


def kubectl() -> str:
    found = shutil.which("kubectl")
    assert found is not None, (
        "needs kubectl (Debian's kubernetes-client; scripts/install-test-deps)"
    )
    return found


def kustomize(directory: Path) -> str:
    """`kubectl kustomize DIRECTORY`'s output (the test fails with its stderr otherwise)."""
    done = subprocess.run(
        [kubectl(), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/root")},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def kustomize_with(component: Path, overlay: Path) -> str:
    """What `kubectl kustomize` builds from deploy/ with the demo sandboxes (which the
    per-sandbox component patches) and `component`, through an overlay written into the
    empty directory `overlay`."""
    base = os.path.relpath(DEPLOY, overlay)
    components = ", ".join(os.path.relpath(c, overlay) for c in (DEMO, component))
    (overlay / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources: [{base}]\ncomponents: [{components}]\n"
    )
    return kustomize(overlay)


def test_kustomize_builds_the_manifests_with_the_registry_images_and_the_rule_file(
    tmp_path: Path,
) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    components = ", ".join(os.path.relpath(c, overlay) for c in [DEMO, *MONITORING])
    (overlay / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources: [{os.path.relpath(DEPLOY, overlay)}]\ncomponents: [{components}]\n"
    )
    output = kustomize(overlay)
    built = {
        (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d
        for d in yaml.safe_load_all(output)
        if d
    }
    sources = {
        (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d for d in DOCUMENTS
    }
    assert set(built) == set(sources) | set(GENERATED)
    # Every manifest comes out as it is, but for the image names.
    expected_images = set()
    for key, source in sources.items():
        text = yaml.safe_dump(source)
        for name in ("sandbox-egress", "sandbox-egress-netinit"):
            text = text.replace(
                f"image: {name}:{version()}", f"image: {REGISTRY}/{name}:{version()}"
            )
        assert built[key] == yaml.safe_load(text), key
        expected_images |= set(re.findall(r"image: (\S+)", text))
    assert expected_images == {
        f"{REGISTRY}/sandbox-egress:{version()}",
        f"{REGISTRY}/sandbox-egress-netinit:{version()}",
    }
    # The rule file and the dashboard, byte for byte, under their own file names.
    for key, (data_key, source) in GENERATED.items():
        generated = built[key]
        assert generated["metadata"]["labels"] == {"app.kubernetes.io/part-of": "sandbox-egress"}
        assert generated["data"] == {data_key: (DEPLOY / source).read_text(encoding="utf-8")}
