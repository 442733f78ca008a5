"""deploy/kubernetes/per-sandbox: the per-node DaemonSet serving one policy per sandbox pod.

The Component is built for real (`kubectl kustomize`, with an overlay like the one its
README shows), and what comes out is checked with the proxy's own parsers: the node file
names the directory the proxy mounts the sandboxes' Secret at, the example sandbox file
passes validation with its references satisfied the way the pod satisfies them, and the
sandbox pod takes its proxy URL from its own Secret, whose id names its policy file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from sandbox_egress.proxy.config import parse
from sandbox_egress.proxy.hosts import canonical_host
from sandbox_egress.proxy.policy import Policy
from sandbox_egress.proxy.sandboxes import Identify, load_sandbox, parse_section
from sandbox_egress.proxy.tenancy import SandboxPolicy
from tests.deploy.test_kubernetes import kustomize_with

ROOT = Path(__file__).resolve().parents[2]
COMPONENT = ROOT / "deploy/kubernetes/per-sandbox"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], dict[str, Any]]:
    output = kustomize_with(COMPONENT, tmp_path_factory.mktemp("overlay"))
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(output) if d}


def mounts(container: dict[str, Any]) -> dict[str, str]:
    return {m["mountPath"]: m["name"] for m in container["volumeMounts"]}


def test_the_proxy_mounts_the_sandboxes_secret_where_the_node_file_says(
    built: dict[tuple[str, str], dict[str, Any]],
) -> None:
    text = built[("ConfigMap", "egress-proxy-config")]["data"]["env.yaml"]
    document = yaml.safe_load(text)
    section = parse_section(document, "env.yaml")
    assert section is not None and section.identify == (Identify.PROXY_AUTH,)
    assert [e.pattern for e in parse(document, "env.yaml", {}).allowlist] == [
        "telemetry.example.com", "pypi.org", "*.pypi.org", "files.pythonhosted.org"
    ]  # fmt: skip
    assert all(not e.transform for e in parse(document, "env.yaml", {}).allowlist)
    pod = built[("DaemonSet", "egress-proxy")]["spec"]["template"]["spec"]
    (proxy,) = [c for c in pod["containers"] if c["name"] == "egress-proxy"]
    volume = mounts(proxy)[str(section.directory)]
    (declared,) = [v for v in pod["volumes"] if v["name"] == volume]
    assert declared["secret"]["secretName"] == "egress-sandboxes"
    assert "/run/secrets/egress" in mounts(proxy)  # the telemetry credential stays mounted


def test_the_sandbox_pod_reaches_its_proxy_with_its_own_credential(
    built: dict[tuple[str, str], dict[str, Any]], tmp_path: Path
) -> None:
    pod = built[("Pod", "sandbox")]
    (container,) = pod["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    for name in ("HTTPS_PROXY", "HTTP_PROXY"):
        assert "value" not in env[name]
        assert env[name]["valueFrom"]["secretKeyRef"] == {"name": "sandbox-proxy", "key": "url"}
    readme = (COMPONENT / "README.md").read_text().replace("\\\n", " ")
    url = re.search(r'--from-literal=url="(http://[^"]+)"', readme)
    assert url is not None and url.group(1).startswith(f"http://{pod['metadata']['name']}:$TOKEN@")
    assert "--from-file=sandbox.yaml=deploy/kubernetes/per-sandbox/sandbox.yaml" in readme
    assert '--from-literal=sandbox.token="$TOKEN"' in readme


def test_the_example_sandbox_file_is_valid_and_bounded_by_the_node(
    built: dict[tuple[str, str], dict[str, Any]], tmp_path: Path
) -> None:
    text = (COMPONENT / "sandbox.yaml").read_text()
    references = re.findall(r"\$\{file:([^}]+)\}", text)
    assert references == [
        "/etc/egress/sandboxes/sandbox.token",
        "/etc/egress/sandboxes/sandbox.telemetry-token",
    ]  # its own keys of the Secret, where the node file's sandboxes.secrets says (D340)
    node_text = built[("ConfigMap", "egress-proxy-config")]["data"]["env.yaml"]
    section = parse_section(yaml.safe_load(node_text), "env.yaml")
    assert section is not None and str(section.secrets) == "/etc/egress/sandboxes"
    readme = (COMPONENT / "README.md").read_text().replace("\\\n", " ")
    assert '--from-literal=sandbox.telemetry-token="$TELEMETRY_TOKEN"' in readme
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    for reference, value in zip(references, ("t" * 32, "telemetry-t0ken"), strict=True):
        stand_in = secrets / Path(reference).name
        stand_in.write_text(value)
        text = text.replace(reference, str(stand_in))
    copy = tmp_path / "sandbox.yaml"
    copy.write_text(text)
    sandbox = load_sandbox(copy, secrets)
    assert sandbox.id == built[("Pod", "sandbox")]["metadata"]["name"]
    assert sandbox.token is not None and sandbox.token.reveal() == "t" * 32
    node = Policy(parse(yaml.safe_load(node_text), "env.yaml", {}))
    policy = SandboxPolicy(sandbox, node)
    telemetry = policy.decide(canonical_host("telemetry.example.com"), 443, tls=True)
    assert telemetry.injects and telemetry.entry is not None
    assert telemetry.entry.transform[0].value.reveal() == "Bearer telemetry-t0ken"
    other = policy.decide(canonical_host("files.pythonhosted.org"), 443, tls=True)
    assert other.reason.value == "not_allowlisted"  # the node allows it, the sandbox not
