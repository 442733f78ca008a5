"""compose.yaml, checked statically (test_compose_up.py starts it for real).

Every reference must resolve (build contexts, Dockerfile stages, volumes,
networks, secrets, bind-mounted files), the commands must parse with the real
command-line parsers, and the addresses and ports that appear in several places
(the proxy's --listen/--metrics, HTTPS_PROXY, the Prometheus targets, the
healthcheck, the allowlist's CIDR, the firewall rules) must agree exactly.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import json
import re
import shlex
import sys
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from sandbox_egress.hookrunner.cli import _parser as hookrunner_parser
from sandbox_egress.hookrunner.loader import load_config
from sandbox_egress.proxy import config as configuration
from sandbox_egress.proxy.decision import Reason
from sandbox_egress.proxy.hosts import canonical_host
from sandbox_egress.proxy.policy import Policy
from sandbox_egress.runtime.ca import CA_CERT
from sandbox_egress.runtime.cmdline import parser as proxy_parser
from tests.deploy.netrules import check_transparent_rules

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "compose.yaml"
REGISTRY_IMAGES = {"grafana"}  # the one service not built here: Debian packages no Grafana
COMPOSE: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
NETWORKS: dict[str, dict[str, Any]] = COMPOSE["networks"]
PROMETHEUS_FILE = ROOT / "deploy/compose/prometheus.yml"

TELEMETRY_NAME = "telemetry.internal"
TELEMETRY_PORT = 8443
TEST_TOKEN = "compose-test-token-7c1e"
CA_KEY_FILE = "mitmproxy-ca.pem"


# -- reading the compose model ---------------------------------------------------


def is_bind(source: str) -> bool:
    return source.startswith((".", "/", "~"))


def mounts(service: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(source, target, read_only) of every volume entry, short or long syntax."""
    found = []
    for item in service.get("volumes", []):
        if isinstance(item, str):
            parts = item.split(":")
            source, target = parts[0], parts[1]
            read_only = len(parts) > 2 and "ro" in parts[2].split(",")
        else:
            source, target = item["source"], item["target"]
            read_only = bool(item.get("read_only", False))
        found.append((source, target, read_only))
    return found


def mount_at(service: dict[str, Any], path: str) -> tuple[str, str, bool]:
    """The mount whose target holds `path` (the longest such target)."""
    holding = [
        m for m in mounts(service) if path == m[1] or path.startswith(m[1].rstrip("/") + "/")
    ]
    assert holding, f"{path} is not inside any mount"
    return max(holding, key=lambda m: len(m[1]))


def networks_of(service: dict[str, Any]) -> dict[str, dict[str, Any]]:
    raw = service.get("networks", {})
    if isinstance(raw, list):
        return {name: {} for name in raw}
    return {name: (value or {}) for name, value in raw.items()}


def address_on(service: str, network: str) -> str:
    return networks_of(SERVICES[service])[network]["ipv4_address"]


def subnet(network: str) -> ipaddress.IPv4Network:
    (config,) = NETWORKS[network]["ipam"]["config"]
    return ipaddress.IPv4Network(config["subnet"])


def secret_path(entry: str | dict[str, Any]) -> tuple[str, str]:
    """(secret name, path in the container) of a service's `secrets:` entry."""
    if isinstance(entry, str):
        return entry, f"/run/secrets/{entry}"
    target = entry.get("target", entry["source"])
    return entry["source"], target if target.startswith("/") else f"/run/secrets/{target}"


def proxy_args(service: str) -> Any:
    command = SERVICES[service]["command"]
    assert command[0] == "egress-proxy"
    return proxy_parser().parse_args(command[1:])


def dns_args(service: str) -> Any:
    command = SERVICES[service]["command"]
    assert command[:2] == ["egress-proxy", "dns"]
    return proxy_parser().parse_args(command[1:])


def runner_args(service: str) -> Any:
    command = SERVICES[service]["command"]
    assert command[0] == "hookrunner"
    return hookrunner_parser().parse_args(command[1:])


def health_probe(service: str) -> tuple[str, int]:
    """The metrics address a service's healthcheck probes, parsed by the real CLI."""
    test = SERVICES[service]["healthcheck"]["test"]
    assert test[:2] == ["CMD", "egress-proxy"], test
    args = proxy_parser().parse_args(test[2:])
    assert args.command == "health"
    return args.metrics


def hostport(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def prometheus_targets() -> dict[str, list[str]]:
    """Each job's targets as `host:port`: a DNS-discovered one as the service's address
    on the monitoring network (what Docker's DNS answers Prometheus there)."""
    document = yaml.safe_load(PROMETHEUS_FILE.read_text(encoding="utf-8"))
    targets: dict[str, list[str]] = {}
    for job in document["scrape_configs"]:
        found = [t for sc in job.get("static_configs", []) for t in sc["targets"]]
        for sd in job.get("dns_sd_configs", []):
            assert sd["type"] == "A"
            found += [
                f"{address_on(s, 'monitoring')}:{sd['port']}"
                for n in sd["names"]
                for s in aliased(n)
            ]
        targets[job["job_name"]] = found
    return targets


def aliased(name: str) -> list[str]:
    """The services that have `name` as an alias on the monitoring network (Prometheus's):
    one, or the fleet profile's replicas."""
    services = [
        s
        for s, spec in SERVICES.items()
        if name in (networks_of(spec).get("monitoring") or {}).get("aliases", [])
    ]
    assert services, name
    return services


def test_a_profile_not_started_raises_no_alert() -> None:
    """A target listed by address is `up == 0` while its service is not running, which
    fires EgressProxyDown/HookRunnerDown on every default `up`. A service of a profile is
    found by name instead: no target while it is not running."""
    document = yaml.safe_load(PROMETHEUS_FILE.read_text(encoding="utf-8"))
    profiled = {name for name, service in SERVICES.items() if service.get("profiles")}
    addresses = {
        address_on(name, "monitoring")
        for name in profiled
        if "monitoring" in networks_of(SERVICES[name])
    }
    for job in document["scrape_configs"]:
        static = [t for sc in job.get("static_configs", []) for t in sc["targets"]]
        assert not [t for t in static if hostport(t)[0] in addresses | profiled], job
        for sd in job.get("dns_sd_configs", []):
            assert {s for n in sd["names"] for s in aliased(n)} <= profiled, job


def dockerfile_users() -> dict[str, int]:
    """user name -> uid, from the Dockerfile's useradd lines."""
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8").replace("\\\n", " ")
    return {m[2]: int(m[1]) for m in re.finditer(r"useradd --uid (\d+) .*?--shell \S+ (\w+)", text)}


def default_uid() -> int:
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    user = re.findall(r"^USER (\S+)$", text, flags=re.M)[-1]
    return int(user) if user.isdigit() else dockerfile_users()[user]


def effective_uid(service: str) -> int:
    user = SERVICES[service].get("user")
    return int(str(user).split(":")[0]) if user is not None else default_uid()


def load_module(path: Path) -> ModuleType:
    name = f"deploy_example_{path.stem}"  # never shadows a real module
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# -- references --------------------------------------------------------------------


def test_build_contexts_dockerfiles_and_stages_exist() -> None:
    built = {name: s["build"] for name, s in SERVICES.items() if "build" in s}
    assert set(built) == set(SERVICES) - REGISTRY_IMAGES
    for name, build in built.items():
        context = (COMPOSE_FILE.parent / build["context"]).resolve()
        dockerfile = context / build.get("dockerfile", "Dockerfile")
        assert context == ROOT, name
        assert dockerfile.is_file(), name
        stages = re.findall(r"^FROM \S+ AS (\S+)$", dockerfile.read_text(), flags=re.M)
        assert build["target"] in stages, f"{name}: no stage {build['target']!r} in {stages}"
    targets = {name: b["target"] for name, b in built.items()}
    assert targets["netfilter"] == "netinit"
    assert targets["prometheus"] == "prometheus"
    assert targets["redis-fleet"] == "redis"
    others = {"netfilter", "prometheus", "redis-fleet"}
    assert {t for n, t in targets.items() if n not in others} == {"runtime"}
    # Every image builds FROM the same base, the local Debian one unless overridden.
    for name, build in built.items():
        assert build["args"] == {
            "PYTHON_IMAGE": "${EGRESS_BASE_IMAGE:-sandbox-egress-base:trixie-2}"
        }, name
    # One image name per stage, so a stage is never tagged with another's name.
    assert {SERVICES[n]["image"] for n in built if targets[n] == "runtime"} == {
        "sandbox-egress:0.1.0"
    }
    assert SERVICES["netfilter"]["image"] == "sandbox-egress-netinit:0.1.0"
    assert SERVICES["prometheus"]["image"] == "sandbox-egress-prometheus:0.1.0"


def test_named_volumes_networks_secrets_and_dependencies_are_declared() -> None:
    volumes = set(COMPOSE["volumes"])
    secrets = set(COMPOSE["secrets"])
    used_volumes: set[str] = set()
    for name, service in SERVICES.items():
        for source, _, _ in mounts(service):
            if not is_bind(source):
                assert source in volumes, f"{name}: volume {source} is not declared"
                used_volumes.add(source)
        for network in networks_of(service):
            assert network in NETWORKS, f"{name}: network {network} is not declared"
        for entry in service.get("secrets", []):
            assert secret_path(entry)[0] in secrets, f"{name}: secret not declared"
        for dependency in service.get("depends_on", {}):
            assert dependency in SERVICES, f"{name}: depends on unknown {dependency}"
        mode = service.get("network_mode", "")
        if mode.startswith("service:"):
            assert mode.removeprefix("service:") in SERVICES
    assert used_volumes == volumes, f"declared but unused: {volumes - used_volumes}"


def test_bind_mounted_host_paths_exist() -> None:
    binds = [(n, s, t) for n, svc in SERVICES.items() for s, t, _ in mounts(svc) if is_bind(s)]
    assert binds
    for name, source, target in binds:
        assert source.startswith("./deploy/"), f"{name}: {source} outside deploy/"
        host = (COMPOSE_FILE.parent / source).resolve()
        assert host.exists(), f"{name}: {source} does not exist"
        if target.endswith((".yaml", ".yml", ".json")):
            assert host.is_file(), f"{name}: {source} should be a file for {target}"


def test_every_fixed_address_lies_in_its_network_and_networks_do_not_overlap() -> None:
    subnets = {name: subnet(name) for name in NETWORKS}
    for a in subnets:
        for b in subnets:
            assert a == b or not subnets[a].overlaps(subnets[b])
    for name, service in SERVICES.items():
        for network, settings in networks_of(service).items():
            if "ipv4_address" in settings:
                address = ipaddress.IPv4Address(settings["ipv4_address"])
                assert address in subnets[network], f"{name} on {network}: {address}"


# -- the proxy, the sandbox and Prometheus agree ---------------------------------------


def test_proxy_command_parses_with_the_real_cli() -> None:
    args = proxy_args("proxy")
    assert args.command == "run"
    assert args.mode == "regular"
    assert args.listen == ("172.30.1.10", 8080)
    assert args.metrics == ("172.30.3.10", 9464)
    assert args.config == "/etc/egress/node.yaml"
    assert args.certs == Path("/var/lib/egress/certs")
    assert args.upstream_ca == Path("/var/lib/egress/upstream-ca/ca.pem")
    assert args.audit_log == "-"
    # Each address is the proxy's own on one network: listen on sandbox, metrics on monitoring.
    assert args.listen[0] == address_on("proxy", "sandbox")
    assert args.metrics[0] == address_on("proxy", "monitoring")


def test_sandbox_https_proxy_is_the_proxy_listener() -> None:
    args = proxy_args("proxy")
    environment = SERVICES["sandbox"]["environment"]
    for variable in ("HTTPS_PROXY", "HTTP_PROXY"):
        url = urlsplit(environment[variable])
        assert (url.scheme, url.hostname, url.port) == ("http", "proxy", args.listen[1])
    # "proxy" resolves, from the sandbox, to its address on the one network they share.
    shared = set(networks_of(SERVICES["sandbox"])) & set(networks_of(SERVICES["proxy"]))
    assert shared == {"sandbox"}
    assert address_on("proxy", "sandbox") == args.listen[0]


def test_prometheus_scrapes_the_proxy_metrics_address_and_the_healthcheck_probes_it() -> None:
    host, port = proxy_args("proxy").metrics
    assert prometheus_targets()["egress-proxy"] == [f"{host}:{port}"]
    monitoring = {
        n for n in networks_of(SERVICES["prometheus"]) if ipaddress.ip_address(host) in subnet(n)
    }
    assert monitoring == {"monitoring"}
    assert health_probe("proxy") == (host, port)
    mount = ("./deploy/compose/prometheus.yml", "/etc/prometheus/prometheus.yml", True)
    assert mount in mounts(SERVICES["prometheus"])
    assert "--config.file=/etc/prometheus/prometheus.yml" in SERVICES["prometheus"]["command"]


def test_prometheus_scrapes_the_runner_session_metrics() -> None:
    args = runner_args("sandbox")
    assert args.command == "session"
    assert args.metrics == "0.0.0.0:9465"
    assert prometheus_targets()["hookrunner"] == [f"sandbox:{hostport(args.metrics)[1]}"]
    assert set(networks_of(SERVICES["prometheus"])) & set(networks_of(SERVICES["sandbox"])) == {
        "sandbox"
    }
    # `hookrunner session` ends at the end of stdin: compose must keep stdin open.
    assert SERVICES["sandbox"]["stdin_open"] is True


def test_transparent_variant_metrics_targets_agree() -> None:
    proxy = proxy_args("proxy-transparent")
    runner = runner_args("sandbox-transparent")
    targets = prometheus_targets()
    assert targets["egress-proxy-transparent"] == [f"{proxy.metrics[0]}:{proxy.metrics[1]}"]
    # The runner shares the proxy's network namespace, so it is reached at the proxy's address.
    assert SERVICES["sandbox-transparent"]["network_mode"] == "service:proxy-transparent"
    assert targets["hookrunner-transparent"] == [
        f"{proxy.metrics[0]}:{hostport(runner.metrics)[1]}"
    ]
    assert proxy.metrics[0] == address_on("proxy-transparent", "monitoring")
    assert health_probe("proxy-transparent") == proxy.metrics


# -- the environment file ---------------------------------------------------------------


def resolved_environment_file(tmp_path: Path, token: str) -> Path:
    """deploy/compose/env.yaml with its secret reference pointed at a test file.

    The reference must name where compose mounts the `telemetry_token` secret in the proxy.
    """
    text = (ROOT / "deploy/compose/env.yaml").read_text(encoding="utf-8")
    references = re.findall(r"\$\{file:([^}]+)\}", text)
    mounted = dict(secret_path(e) for e in SERVICES["proxy-transparent"]["secrets"])
    assert references == [mounted["telemetry_token"]] == ["/run/secrets/telemetry_token"]
    secret = tmp_path / "telemetry_token"
    secret.write_text(token + "\n", encoding="utf-8")
    copy = tmp_path / "env.yaml"
    copy.write_text(text.replace(references[0], str(secret)), encoding="utf-8")
    return copy


def test_environment_file_is_the_one_mounted_at_the_config_path() -> None:
    config = proxy_args("proxy-transparent").config
    assert mount_at(SERVICES["proxy-transparent"], config) == (
        "./deploy/compose/env.yaml",
        config,
        True,
    )
    node = proxy_args("proxy").config
    assert mount_at(SERVICES["proxy"], node) == ("./deploy/compose/node.yaml", node, True)
    directory = "/etc/egress/sandboxes"
    assert f"directory: {directory}" in (ROOT / "deploy/compose/node.yaml").read_text()
    assert mount_at(SERVICES["proxy"], directory) == ("./deploy/compose/sandboxes", directory, True)


def test_the_node_file_and_both_sandbox_files_pass_real_validation(tmp_path: Path) -> None:
    """Two sandboxes on the regular proxy, each identified by its own address on `sandbox`,
    each with its own policy; only `sandbox` is given the telemetry credential."""
    from sandbox_egress.proxy.sandboxes import load_sandbox, node_section

    section = node_section(ROOT / "deploy/compose/node.yaml")
    assert section is not None and str(section.directory) == "/etc/egress/sandboxes"
    # The sandbox's token is its own file of the node's sandboxes.secrets (D340), where
    # compose mounts the secret in the proxy.
    own = "/run/egress/sandbox-secrets/sandbox.telemetry_token"
    assert str(section.secrets) == "/run/egress/sandbox-secrets"
    assert own in dict(secret_path(e)[::-1] for e in SERVICES["proxy"]["secrets"])
    secrets = tmp_path / "sandbox-secrets"
    secrets.mkdir()
    (secrets / "sandbox.telemetry_token").write_text(TEST_TOKEN + "\n", encoding="utf-8")
    found = {}
    for name in ("sandbox", "sandbox-b"):
        text = (ROOT / f"deploy/compose/sandboxes/{name}.yaml").read_text(encoding="utf-8")
        copy = tmp_path / f"{name}.yaml"
        copy.write_text(text.replace(own, str(secrets / "sandbox.telemetry_token")))
        found[name] = load_sandbox(copy, secrets)
        assert [str(a) for a in found[name].addresses] == [address_on(name, "sandbox")]
    own = {n: [e.pattern for e in s.network.allowlist] for n, s in found.items()}
    assert own["sandbox-b"] == [TELEMETRY_NAME, "172.30.2.0/24"]
    assert "pypi.org" in own["sandbox"]
    assert [e.transform != () for e in found["sandbox-b"].network.allowlist] == [False, False]
    assert (
        found["sandbox"].network.allowlist[0].transform[0].value.reveal() == f"Bearer {TEST_TOKEN}"
    )


def test_environment_file_passes_real_validation(tmp_path: Path) -> None:
    network = configuration.load(resolved_environment_file(tmp_path, TEST_TOKEN), environ={})
    patterns = [e.pattern for e in network.allowlist]
    assert patterns == [
        TELEMETRY_NAME,
        "172.30.2.0/24",
        "pypi.org",
        "*.pypi.org",
        "files.pythonhosted.org",
    ]
    telemetry = network.allowlist[0]
    assert [(t.header, t.value.reveal()) for t in telemetry.transform] == [
        ("Authorization", f"Bearer {TEST_TOKEN}")
    ]
    assert telemetry.ports == frozenset({TELEMETRY_PORT})


def test_a_missing_secret_is_refused_by_the_same_validation(tmp_path: Path) -> None:
    copy = resolved_environment_file(tmp_path, TEST_TOKEN)
    (tmp_path / "telemetry_token").unlink()
    with pytest.raises(configuration.ConfigError) as info:
        configuration.load(copy, environ={})
    assert [(p.location, p.message) for p in info.value.problems] == [
        (
            "network.allowlist[0].transform.Authorization",
            f"cannot read ${{file:{tmp_path / 'telemetry_token'}}}: No such file or directory",
        )
    ]


def test_allowlist_opens_the_telemetry_network_and_no_other_compose_network(tmp_path: Path) -> None:
    network = configuration.load(resolved_environment_file(tmp_path, TEST_TOKEN), environ={})
    opened = [e.network for e in network.allowlist if e.network is not None]
    assert opened == [subnet("telemetry")]
    policy = Policy(network)
    decision = policy.decide(canonical_host(TELEMETRY_NAME), TELEMETRY_PORT, tls=True)
    assert decision.allowed
    assert decision.entry is not None
    assert decision.entry.pattern == TELEMETRY_NAME
    telemetry_ip = ipaddress.ip_address(address_on("telemetry", "telemetry"))
    assert policy.pick_address(decision, [telemetry_ip], TELEMETRY_PORT) == (decision, telemetry_ip)
    # Every other fixed address of the compose file stays refused.
    for name, service in SERVICES.items():
        for net, settings in networks_of(service).items():
            if "ipv4_address" in settings and net != "telemetry":
                ip = canonical_host(settings["ipv4_address"])
                assert policy.decide(ip, 9464, tls=True).reason is Reason.INTERNAL_ADDRESS, name


def test_telemetry_names_and_ports_agree_everywhere() -> None:
    telemetry = networks_of(SERVICES["telemetry"])
    assert telemetry == {"telemetry": {"ipv4_address": "172.30.2.20", "aliases": [TELEMETRY_NAME]}}
    command = SERVICES["telemetry"]["command"]
    server = load_module(ROOT / "deploy/compose/telemetry/server.py")
    args = server.parser().parse_args(command[2:])
    assert command[:2] == ["python", "/opt/telemetry/server.py"]
    assert hostport(args.listen) == ("0.0.0.0", TELEMETRY_PORT)
    assert (
        str(args.token_file)
        == dict(secret_path(e) for e in SERVICES["telemetry"]["secrets"])["telemetry_token"]
    )
    for path in (args.cert, args.key):
        assert mount_at(SERVICES["telemetry"], str(path))[0] == "telemetry-tls"
    hooks = ROOT / "deploy/compose/agents/hooks.json"
    url = urlsplit(re.findall(r'"url": "([^"]+)"', hooks.read_text())[0])
    assert (url.scheme, url.hostname, url.port) == ("https", TELEMETRY_NAME, TELEMETRY_PORT)


def test_upstream_ca_comes_from_pki_init_for_the_telemetry_name() -> None:
    command = SERVICES["pki-init"]["command"]
    assert command[:2] == ["python", "/opt/pki/make_pki.py"]
    pki = load_module(ROOT / "deploy/compose/pki/make_pki.py")
    args = pki.parser().parse_args(command[2:])
    assert args.name == TELEMETRY_NAME
    upstream_ca = proxy_args("proxy").upstream_ca
    assert args.ca_out == upstream_ca
    volume = mount_at(SERVICES["pki-init"], str(args.ca_out))[0]
    assert volume == "upstream-ca"
    assert mount_at(SERVICES["proxy"], str(upstream_ca)) == (
        "upstream-ca",
        "/var/lib/egress/upstream-ca",
        True,
    )
    assert mount_at(SERVICES["pki-init"], str(args.tls_dir))[0] == "telemetry-tls"
    assert SERVICES["proxy"]["depends_on"]["pki-init"] == {
        "condition": "service_completed_successfully"
    }


# -- isolation and secrets ------------------------------------------------------------


def test_sandbox_is_only_on_internal_networks_and_cannot_reach_telemetry() -> None:
    sandbox = SERVICES["sandbox"]
    assert set(networks_of(sandbox)) == {"sandbox"}
    for network in networks_of(sandbox):
        assert NETWORKS[network].get("internal") is True, network
    assert "ports" not in sandbox
    assert "network_mode" not in sandbox
    assert NETWORKS["telemetry"].get("internal") is True
    assert not set(networks_of(sandbox)) & set(networks_of(SERVICES["telemetry"]))
    # Whatever is on the sandbox's network is not a way out either.
    for name, service in SERVICES.items():
        if "sandbox" in networks_of(service):
            assert name in {"sandbox", "sandbox-b", "proxy", "prometheus"}


def test_the_ca_key_volume_is_mounted_only_by_the_proxy_side() -> None:
    certs = str(proxy_args("proxy").certs)
    key_volume = mount_at(SERVICES["proxy"], certs)[0]
    assert key_volume == "proxy-ca"
    holders = {n for n, s in SERVICES.items() if any(m[0] == key_volume for m in mounts(s))}
    assert holders == {"ca-init", "proxy", "proxy-transparent", "proxy-fleet-a", "proxy-fleet-b"}
    assert (
        mount_at(SERVICES["proxy-transparent"], str(proxy_args("proxy-transparent").certs))[0]
        == key_volume
    )
    for name in ("sandbox", "sandbox-transparent", "sandbox-fleet"):
        assert "secrets" not in SERVICES[name]
        assert {m[0] for m in mounts(SERVICES[name])} & {"proxy-ca", "telemetry-tls"} == set()


def test_the_sandbox_trusts_exactly_the_certificate_ca_init_exports() -> None:
    command = SERVICES["ca-init"]["command"]
    assert command[:2] == ["sh", "-c"]
    steps = [shlex.split(step) for step in command[2].split("&&")]
    assert [s[0] for s in steps] == ["egress-proxy", "cp"]
    ca = proxy_parser().parse_args(steps[0][1:])
    certs = proxy_args("proxy").certs
    assert (ca.command, ca.certs) == ("ca", certs)
    source, destination = steps[1][1:]
    assert source == f"{certs}/{CA_CERT}"
    assert mount_at(SERVICES["ca-init"], str(certs))[0] == "proxy-ca"
    exported = mount_at(SERVICES["ca-init"], destination)
    assert exported[0] == "ca-public"
    relative = destination.removeprefix(exported[1])
    for name in ("sandbox", "sandbox-transparent"):
        service = SERVICES[name]
        bundle = service["environment"]["SSL_CERT_FILE"]
        public = mount_at(service, bundle)
        assert public[0] == "ca-public", name
        assert public[2] is True, name
        assert bundle == public[1] + relative == f"/etc/egress-ca/{CA_CERT}"
        assert service["environment"]["REQUESTS_CA_BUNDLE"] == bundle
        assert runner_args(name).ca_file == bundle


def test_secrets_come_from_an_ignored_file_and_no_tracked_file_holds_one() -> None:
    # docker-compose 1.29 knows only file secrets (D57); the default lies in .secrets/.
    assert COMPOSE["secrets"] == {
        "telemetry_token": {"file": "${TELEMETRY_TOKEN_FILE:-./.secrets/telemetry_token}"}
    }
    assert "/.secrets/" in (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    assert "!.secrets" not in (ROOT / ".dockerignore").read_text(encoding="utf-8")
    secretish = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|CREDENTIAL", re.I)
    for name, service in SERVICES.items():
        for variable in service.get("environment", {}):
            assert not secretish.search(variable), f"{name}: {variable} in plain environment"
    texts = {COMPOSE_FILE: COMPOSE_FILE.read_text(encoding="utf-8")}
    for path in (ROOT / "deploy/compose").rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            assert not path.name.startswith(".env"), path
            texts[path] = path.read_text(encoding="utf-8")
    for path, text in texts.items():
        assert not re.search(r"TELEMETRY_TOKEN\s*[:=]\s*\S", text), path
        if path.suffix in {".yaml", ".yml", ".json"}:  # configuration, not code
            for literal in re.findall(r"Bearer ([^\"'\s]+)", text):
                assert literal.startswith("${"), f"{path}: literal bearer value"


# -- the transparent variant ------------------------------------------------------------


def test_transparent_rules_redirect_to_the_listener_and_exempt_only_the_proxy_uid() -> None:
    proxy = proxy_args("proxy-transparent")
    assert proxy.mode == "transparent"
    assert proxy.listen == ("127.0.0.1", 8081)  # where REDIRECT sends locally generated TCP
    netfilter = SERVICES["netfilter"]
    assert netfilter["network_mode"] == "service:proxy-transparent"
    assert netfilter["command"][:2] == ["sh", "-euc"]  # a failing rule fails the service
    assert set(netfilter["cap_add"]) == {"NET_ADMIN", "NET_RAW"}
    proxy_uid = effective_uid("proxy-transparent")
    assert proxy_uid == dockerfile_users()["egress"] == 10001
    dns = dns_args("dns-transparent")
    assert dns.listen[0] == "127.0.0.1"  # where REDIRECT sends locally generated packets
    check_transparent_rules(
        netfilter["command"][2],
        listen_port=proxy.listen[1],
        proxy_uid=proxy_uid,
        dns_port=dns.listen[1],
    )
    sandbox = SERVICES["sandbox-transparent"]
    assert sandbox["depends_on"]["netfilter"] == {"condition": "service_completed_successfully"}
    assert sandbox["depends_on"]["dns-transparent"] == {"condition": "service_healthy"}
    assert effective_uid("sandbox-transparent") == dockerfile_users()["sandbox"] != proxy_uid
    assert "cap_add" not in sandbox
    assert sandbox["cap_drop"] == ["ALL"]
    assert "HTTPS_PROXY" not in sandbox["environment"]
    # Only the proxy's side runs as its uid: the rules (root) and the responder, whose own
    # lookups must not be redirected to itself.
    for name, service in SERVICES.items():
        if service.get("network_mode") == "service:proxy-transparent":
            if name in {"netfilter", "dns-transparent"}:
                assert effective_uid(name) == (0 if name == "netfilter" else proxy_uid)
            else:
                assert effective_uid(name) != proxy_uid, f"{name} would bypass the redirect"


def test_the_transparent_dns_responder_serves_the_proxys_allowlist_and_is_scraped() -> None:
    dns = dns_args("dns-transparent")
    proxy = proxy_args("proxy-transparent")
    service = SERVICES["dns-transparent"]
    assert service["network_mode"] == "service:proxy-transparent"
    assert dns.config == proxy.config
    assert mount_at(service, dns.config) == ("./deploy/compose/env.yaml", dns.config, True)
    # It holds no secret (D83): it loads the file without resolving its references.
    assert "secrets" not in service and "environment" not in service and "env_file" not in service
    assert [v.split(":")[0] for v in service["volumes"]] == ["./deploy/compose/env.yaml"]
    assert "${file:/run/secrets/telemetry_token}" in (ROOT / "deploy/compose/env.yaml").read_text()
    assert dns.metrics == (proxy.metrics[0], 9466) != proxy.metrics
    assert health_probe("dns-transparent") == dns.metrics
    assert prometheus_targets()["egress-dns-transparent"] == [f"{dns.metrics[0]}:{dns.metrics[1]}"]


def test_both_sandboxes_have_resource_limits() -> None:
    for name in ("sandbox", "sandbox-transparent"):
        limits = {
            k: SERVICES[name][k] for k in ("mem_limit", "memswap_limit", "cpus", "pids_limit")
        }
        assert limits == {"mem_limit": "1g", "memswap_limit": "1g", "cpus": 1.0, "pids_limit": 256}


def test_profiles_keep_the_transparent_variant_and_the_dashboards_optional() -> None:
    profiled = {n: s["profiles"] for n, s in SERVICES.items() if "profiles" in s}
    assert profiled == {
        "proxy-transparent": ["transparent"],
        "dns-transparent": ["transparent"],
        "netfilter": ["transparent"],
        "sandbox-transparent": ["transparent"],
        "grafana": ["dashboards"],
        "redis-fleet": ["fleet"],
        "proxy-fleet-a": ["fleet"],
        "proxy-fleet-b": ["fleet"],
        "sandbox-fleet": ["fleet"],
    }


def test_grafana_is_provisioned_with_the_prometheus_and_the_dashboard() -> None:
    grafana = SERVICES["grafana"]
    assert grafana["image"] == "${GRAFANA_IMAGE:-docker.io/grafana/grafana-oss:11.3.0}"
    targets = {target: (source, read_only) for source, target, read_only in mounts(grafana)}
    assert targets["/etc/grafana/provisioning"] == ("./deploy/grafana/provisioning", True)
    dashboard = "/etc/grafana/dashboards/egress-dashboard.json"
    assert targets[dashboard] == ("./deploy/grafana/egress-dashboard.json", True)
    provisioning = ROOT / "deploy" / "grafana" / "provisioning"
    (source,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yaml").read_text())[
        "datasources"
    ]
    # The data source is Prometheus's one listen address, which Grafana's network reaches.
    listen = next(
        arg.removeprefix("--web.listen-address=")
        for arg in SERVICES["prometheus"]["command"]
        if arg.startswith("--web.listen-address=")
    )
    assert (source["type"], source["url"], source["isDefault"]) == (
        "prometheus",
        f"http://{listen}",
        True,
    )
    listen_ip = ipaddress.IPv4Address(listen.partition(":")[0])
    assert [n for n in networks_of(grafana) if listen_ip in subnet(n)] == ["egress"]
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "egress.yaml").read_text())[
        "providers"
    ]
    assert (provider["type"], provider["options"]["path"]) == ("file", str(Path(dashboard).parent))
    # Only loopback of the host sees it, and the sandbox's network does not.
    assert grafana["ports"] == ["127.0.0.1:${GRAFANA_PORT:-3000}:3000"]
    assert set(networks_of(grafana)) == {"egress"}


# -- the image -----------------------------------------------------------------------


def test_image_runs_unprivileged_and_bakes_no_ca() -> None:
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert re.findall(r"^FROM (\S+)", text, flags=re.M) == ["${PYTHON_IMAGE}"] + ["base"] * 4
    assert "ARG PYTHON_IMAGE=python:3.13-slim" in text  # the Python of the trixie base
    assert default_uid() == 10001
    runtime = text[text.index("AS runtime") :]
    assert "pip install --no-index --find-links /wheels ." in runtime
    run_lines = re.findall(r"^RUN .*$", text, flags=re.M)
    assert not [line for line in run_lines if "egress-proxy" in line or "openssl" in line]
    copied = re.findall(r"^COPY (.+) \S+$", runtime, flags=re.M)
    assert copied == [
        "pyproject.toml build/wheelhous[e]",
        "pyproject.toml README.md",
        "proxy",
        "addons",
        "common",
        "hookrunner",
        "runtime",
        "sandbox_egress",  # links to the four folders above (D140)
        "scripts/hookrunner",  # the `hookrunner` command: a launcher running python -I (D193)
        "config/default.yaml",
    ]


def test_image_embeds_the_default_configuration_at_the_commands_config_path() -> None:
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    runtime = text[text.index("AS runtime") :]
    assert "COPY config/default.yaml /etc/egress/env.yaml" in runtime
    (cmd,) = re.findall(r"^CMD (\[.*?\])$", runtime.replace("\\\n", ""), flags=re.M | re.S)
    args = proxy_parser().parse_args(json.loads(cmd)[1:])
    assert args.config == "/etc/egress/env.yaml"
    # No credential is baked into the image, not even the demo one: `docker run -e` gives it.
    assert not re.findall(r"^ENV .*(TOKEN|SECRET|KEY)", runtime, flags=re.M | re.I)
    network = configuration.load(ROOT / "config/default.yaml", {"DEMO_API_TOKEN": "t"})
    assert network.allowlist[0].pattern == "httpbin.org"
    assert len(network.allowlist[0].transform) == 1
    # The HEALTHCHECK probes the default command's metrics address, with the real CLI.
    (probe,) = re.findall(r"^\s+CMD (\[.*\])$", runtime, flags=re.M)
    health = proxy_parser().parse_args(json.loads(probe)[1:])
    assert health.command == "health"
    assert health.metrics == ("127.0.0.1", args.metrics[1])
    assert re.search(r"^HEALTHCHECK --interval=\S+ --timeout=\S+", runtime, flags=re.M)


def test_image_carries_oci_labels() -> None:
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    labels = dict(re.findall(r'(org\.opencontainers\.image\.[a-z.]+)="([^"]*)"', text))
    assert set(labels) == {
        f"org.opencontainers.image.{k}"
        for k in ("title", "description", "version", "revision", "base.name")
    }
    assert labels["org.opencontainers.image.version"] == "${VERSION}"
    assert "ARG VERSION=0.1.0" in text  # the version of pyproject.toml
    assert 'version = "0.1.0"' in (ROOT / "pyproject.toml").read_text(encoding="utf-8")


def test_services_that_do_not_run_the_proxy_turn_the_image_healthcheck_off() -> None:
    for name, service in SERVICES.items():
        runs_proxy = service.get("command", [])[:2] in (
            ["egress-proxy", "run"],
            ["egress-proxy", "dns"],
        )
        if runs_proxy:
            health_probe(name)
        elif service.get("build", {}).get("target") == "runtime":
            assert service["healthcheck"] == {"disable": True}, name


def test_dockerignore_admits_only_the_sources() -> None:
    lines = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*"
    admitted = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    assert admitted == {
        "pyproject.toml",
        "README.md",
        "proxy",
        "addons",
        "common",
        "hookrunner",
        "runtime",
        "sandbox_egress",
        "scripts/hookrunner",  # the `hookrunner` command is this launcher (D193)
        "config/default.yaml",
        "build/wheelhouse/*.whl",
    }


def test_compose_hooks_file_is_valid(tmp_path: Path) -> None:
    hooks = ROOT / "deploy/compose/agents/hooks.json"
    config = load_config(tmp_path, hooks)
    assert config.problems == ()
    assert [g.name for g in config.groups] == ["security-gate", "audit-logging"]
    command = re.findall(r'"command": "([^"]+)"', hooks.read_text())
    assert command == ["python3 /.agents/hooks-scripts/gate.py"]
    assert (ROOT / "deploy/compose/agents/hooks-scripts/gate.py").is_file()
    assert ("./deploy/compose/agents", "/.agents", True) in mounts(SERVICES["sandbox"])


# -- the fleet profile -----------------------------------------------------------------


def test_the_fleet_replicas_share_one_redis_that_only_they_reach(tmp_path: Path) -> None:
    """deploy/compose/fleet.yaml passes real validation with the redis backend and a
    budgeted entry; its URL names redis-fleet, which is on `fleet-state` alone with the two
    replicas, listens on that address only, and no sandbox shares a network with it."""
    replicas = ("proxy-fleet-a", "proxy-fleet-b")
    text = (ROOT / "deploy/compose/fleet.yaml").read_text(encoding="utf-8")
    secret = tmp_path / "telemetry_token"
    secret.write_text(TEST_TOKEN + "\n", encoding="utf-8")
    copy = tmp_path / "fleet.yaml"
    copy.write_text(text.replace("/run/secrets/telemetry_token", str(secret)), encoding="utf-8")
    network = configuration.load(copy, environ={})
    assert (network.state.backend, network.state.on_error) == ("redis", "deny")
    url = urlsplit(network.state.url)
    assert (url.hostname, url.port) == ("redis-fleet", 6379)
    budgeted = [e for e in network.allowlist if e.budget is not None]
    assert [e.pattern for e in budgeted] == [TELEMETRY_NAME]
    assert budgeted[0].budget is not None and budgeted[0].budget.requests is not None
    assert (budgeted[0].budget.requests.amount, budgeted[0].budget.requests.window_s) == (10, 3600)

    on_state = {n for n, s in SERVICES.items() if "fleet-state" in networks_of(s)}
    assert on_state == {"redis-fleet", *replicas}
    assert set(networks_of(SERVICES["redis-fleet"])) == {"fleet-state"}
    redis_address = address_on("redis-fleet", "fleet-state")
    command = SERVICES["redis-fleet"]["command"]
    assert command[command.index("--bind") + 1] == redis_address
    assert COMPOSE["networks"]["fleet-state"]["internal"] is True
    sandboxes = {n for n in SERVICES if n.startswith("sandbox")}
    for name in sandboxes:
        assert "fleet-state" not in networks_of(SERVICES[name]), name
    assert set(networks_of(SERVICES["sandbox-fleet"])) == {"fleet"}

    targets = prometheus_targets()["egress-proxy-fleet"]
    for name in replicas:
        args = proxy_args(name)
        assert args.config == "/etc/egress/fleet.yaml"
        assert mount_at(SERVICES[name], args.config) == (
            "./deploy/compose/fleet.yaml",
            args.config,
            True,
        )
        assert args.listen[0] == address_on(name, "fleet")
        assert args.metrics[0] == address_on(name, "monitoring")
        assert health_probe(name) == args.metrics
        assert f"{args.metrics[0]}:{args.metrics[1]}" in targets
        assert SERVICES[name]["depends_on"]["redis-fleet"] == {"condition": "service_healthy"}
    assert len(targets) == len(replicas)
