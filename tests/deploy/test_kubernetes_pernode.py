"""Per-node manifests (runtime/fleet/pernode.py, issue 35): from what `kubectl kustomize` builds with
the per-sandbox component, an assignment of sandboxes to nodes, the sandboxes' files and one
intermediate CA per node, each node's proxy mounts only its sandboxes' files and its own
intermediate; no root key anywhere. The output is built again with `kubectl kustomize`.

`exposure()` reads manifests as a node would: the DaemonSets that can run on it (their
`kubernetes.io/hostname` affinity, or every node) and the Secrets their pods mount. On the
per-sandbox build of today (one Secret for every sandbox, the fleet CA's key) it finds every
sandbox and the root key on every node: the state this change ends.
"""

from __future__ import annotations

import base64
import datetime
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from sandbox_egress.runtime.ca import CA_KEY_AND_CERT, ensure_ca
from sandbox_egress.runtime.fleet import pernode
from sandbox_egress.runtime.fleet.nodeca import issue_intermediate, read_intermediate
from tests.deploy.test_kubernetes import kustomize, kustomize_with

ROOT = Path(__file__).resolve().parents[2]
COMPONENT = ROOT / "deploy/kubernetes/per-sandbox"
NODES = ("node-a", "node-b", "node-c")
ASSIGNMENT = {"node-a": ["alpha", "beta"], "node-b": ["gamma"], "node-c": []}
MOUNT = "/etc/egress/sandboxes"

Documents = list[dict[str, Any]]


def sandbox_file(sandbox: str, extra: str = "") -> str:
    return f"""\
token: "${{file:{MOUNT}/{sandbox}.token}}"
network:
  allowlist:
    - domain: telemetry.example.com
      transform:
        Authorization: "Bearer ${{file:/run/secrets/egress/telemetry-token}}"
{extra}"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Documents:
    output = kustomize_with(COMPONENT, tmp_path_factory.mktemp("overlay"))
    return [d for d in yaml.safe_load_all(output) if d]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The operator's side: a root CA, one intermediate per node, the sandboxes' files."""
    top = tmp_path_factory.mktemp("operator")
    ensure_ca(top / "root")
    for node in NODES:
        issue_intermediate(top / "root", node, top / "node-cas" / node)
    sandboxes = top / "sandboxes"
    sandboxes.mkdir()
    for sandbox in ("alpha", "gamma", "delta"):
        (sandboxes / f"{sandbox}.yaml").write_text(sandbox_file(sandbox))
    (sandboxes / "beta.yaml").write_text(
        sandbox_file("beta", f'    - domain: api.github.com\n      transform:\n'
                             f'        Authorization: "token ${{file:{MOUNT}/beta.github}}"\n')
    )  # fmt: skip
    for sandbox in ("alpha", "beta", "gamma", "delta"):
        (sandboxes / f"{sandbox}.token").write_text(f"token-of-{sandbox}-0123456789abcdef")
    (sandboxes / "beta.github").write_text("ghp_beta_only_credential")
    (top / "assignment.yaml").write_text(yaml.safe_dump({"nodes": ASSIGNMENT}))
    return top


@pytest.fixture(scope="module")
def out(built: Documents, inputs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("rendered") / "out"
    manifests = inputs / "built.yaml"
    manifests.write_text(yaml.safe_dump_all(built))
    argv = ["--manifests", str(manifests), "--assignment", str(inputs / "assignment.yaml"),
            "--sandboxes", str(inputs / "sandboxes"), "--node-cas", str(inputs / "node-cas"),
            "--out", str(directory)]  # fmt: skip
    assert pernode.main(argv) == 0
    return directory


def secret_files(documents: Documents) -> dict[str, dict[str, bytes]]:
    return {
        d["metadata"]["name"]: {k: base64.b64decode(v) for k, v in (d.get("data") or {}).items()}
        for d in documents
        if d["kind"] == "Secret"
    }


def exposure(
    documents: Documents,
    nodes: tuple[str, ...],
    out_of_band: dict[str, dict[str, bytes]] | None = None,
) -> dict[str, dict[str, set[str]]]:
    """Per node: the sandboxes whose files its proxy pods mount, and the CAs whose keys they
    mount ("root", or the intermediate's subject). A Secret made out of band is read as
    `out_of_band` says."""
    secrets = secret_files(documents)
    seen: dict[str, dict[str, set[str]]] = {n: {"sandboxes": set(), "cas": set()} for n in nodes}
    for daemonset in (d for d in documents if d["kind"] == "DaemonSet"):
        pod = daemonset["spec"]["template"]["spec"]
        terms = (
            pod.get("affinity", {}).get("nodeAffinity", {})
            .get("requiredDuringSchedulingIgnoredDuringExecution", {})
            .get("nodeSelectorTerms", [])
        )  # fmt: skip
        pinned = {
            value
            for term in terms
            for e in term["matchExpressions"]
            if e["key"] == "kubernetes.io/hostname" and e["operator"] == "In"
            for value in e["values"]
        }
        for volume in pod.get("volumes", []):
            name = volume.get("secret", {}).get("secretName")
            if name is None:
                continue
            files = secrets.get(name, (out_of_band or {}).get(name, {}))
            for node in pinned or set(nodes):
                seen[node]["sandboxes"] |= {k[:-5] for k in files if k.endswith(".yaml")}
                if CA_KEY_AND_CERT in files:
                    cert = x509.load_pem_x509_certificate(files[CA_KEY_AND_CERT])
                    kind = "root" if cert.issuer == cert.subject else cert.subject.rfc4514_string()
                    seen[node]["cas"].add(kind)
    return seen


def test_todays_per_sandbox_build_gives_every_node_every_sandbox_and_the_root_key(
    built: Documents, inputs: Path
) -> None:
    # The out-of-band Secrets as the READMEs make them: every sandbox, the fleet root.
    every = {f"{s}.yaml": b"" for s in ("alpha", "beta", "gamma", "delta")}
    root = {CA_KEY_AND_CERT: (inputs / "root" / CA_KEY_AND_CERT).read_bytes()}
    seen = exposure(built, NODES, {"egress-sandboxes": every, "egress-proxy-ca": root})
    for node in NODES:
        assert seen[node] == {"sandboxes": {"alpha", "beta", "gamma", "delta"}, "cas": {"root"}}


def rendered(out: Path) -> Documents:
    return [d for d in yaml.safe_load_all(kustomize(out)) if d]


def test_each_node_mounts_only_its_sandboxes_and_its_own_intermediate(out: Path) -> None:
    seen = exposure(rendered(out), NODES)
    for node in NODES:
        assert seen[node]["sandboxes"] == set(ASSIGNMENT[node]), node
        assert seen[node]["cas"] == {f"O=sandbox-egress,CN=sandbox egress node CA {node}"}


def test_each_nodes_secret_holds_exactly_its_sandboxes_files(out: Path, inputs: Path) -> None:
    secrets = secret_files(rendered(out))
    sandboxes = inputs / "sandboxes"
    expected = {
        "node-a": ["alpha.token", "alpha.yaml", "beta.github", "beta.token", "beta.yaml"],
        "node-b": ["gamma.token", "gamma.yaml"],
        "node-c": [],
    }
    for node, names in expected.items():
        files = secrets[f"egress-sandboxes-{node}"]
        assert sorted(files) == names
        assert all(files[n] == (sandboxes / n).read_bytes() for n in names)
    every = b"".join(v for files in secrets.values() for v in files.values())
    assert b"token-of-delta" not in every  # on no node: nowhere


def test_no_root_key_and_no_shared_secret_anywhere(out: Path, inputs: Path) -> None:
    documents = rendered(out)
    root_pem = (inputs / "root" / CA_KEY_AND_CERT).read_bytes().split(b"-----END")[0]
    text = b"".join(p.read_bytes() for p in out.iterdir())
    decoded = b"".join(v for f in secret_files(documents).values() for v in f.values())
    assert root_pem not in text and root_pem not in decoded
    names = {(d["kind"], d["metadata"]["name"]) for d in documents}
    assert ("DaemonSet", "egress-proxy") not in names
    mounted = {
        v["secret"]["secretName"]
        for d in documents
        if d["kind"] == "DaemonSet"
        for v in d["spec"]["template"]["spec"]["volumes"]
        if "secret" in v
    }
    assert not mounted & {"egress-sandboxes", "egress-proxy-ca"}
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    assert {stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()} == {0o600}


def test_the_node_daemonsets_stay_behind_the_node_local_service(out: Path) -> None:
    documents = rendered(out)
    service = next(d for d in documents if d["kind"] == "Service" and d["metadata"]["name"]
                   == "egress-proxy")  # fmt: skip
    for node in NODES:
        (daemonset,) = [d for d in documents if d["metadata"]["name"] == f"egress-proxy-{node}"]
        labels = daemonset["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= labels.items()
        assert daemonset["spec"]["selector"]["matchLabels"] == {
            "app.kubernetes.io/name": "egress-proxy", "egress.example/node": node
        }  # fmt: skip
        annotations = daemonset["spec"]["template"]["metadata"]["annotations"]
        assert len(annotations["egress.example/node-ca-sha256"]) == 64
        assert daemonset["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == 0


def write_inputs(
    built: Documents, inputs: Path, tmp_path: Path, nodes: dict[str, Any]
) -> list[str]:
    (tmp_path / "built.yaml").write_text(yaml.safe_dump_all(built))
    (tmp_path / "assignment.yaml").write_text(yaml.safe_dump({"nodes": nodes}))
    return ["--manifests", str(tmp_path / "built.yaml"),
            "--assignment", str(tmp_path / "assignment.yaml"),
            "--sandboxes", str(inputs / "sandboxes"), "--node-cas", str(inputs / "node-cas"),
            "--out", str(tmp_path / "out")]  # fmt: skip


@pytest.mark.parametrize(
    ("nodes", "message"),
    [
        ({"node-a": ["omega"]}, "sandbox omega: cannot read"),
        ({"node-z": ["alpha"]}, "node node-z: cannot read the node CA"),
        ({"Node_A": ["alpha"]}, "not a node name"),
        ({"node-a": "alpha"}, "expected a list of sandbox ids"),
    ],
)
def test_bad_inputs_write_nothing(
    built: Documents, inputs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    nodes: dict[str, Any], message: str,
) -> None:  # fmt: skip
    assert pernode.main(write_inputs(built, inputs, tmp_path, nodes)) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_root_ca_given_as_a_node_ca_is_refused(
    built: Documents, inputs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cas = tmp_path / "cas"
    ensure_ca(cas / "node-a")
    argv = write_inputs(built, inputs, tmp_path, {"node-a": ["alpha"]})
    argv[argv.index("--node-cas") + 1] = str(cas)
    assert pernode.main(argv) == 2
    assert "holds a root CA, not a node intermediate" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_sandbox_naming_a_missing_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "x.yaml").write_text(f'token: "${{file:{MOUNT}/x.token}}"\n')
    with pytest.raises(pernode.RenderError, match=r"sandbox x: names \$\{file:.*x.token\}"):
        pernode.sandbox_files(tmp_path, "x", MOUNT)


def test_unplaced_sandboxes_are_warned_about(out: Path, built: Documents, inputs: Path) -> None:
    result = pernode.render(built, ASSIGNMENT, inputs / "sandboxes", inputs / "node-cas")
    assert result.warnings == ["sandbox delta is on no node (its pod gets 407)"]


def test_an_intermediate_near_its_end_is_warned_about(built: Documents, inputs: Path) -> None:
    soon = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=25)
    result = pernode.render(built, {"node-b": ["gamma"]}, inputs / "sandboxes",
                            inputs / "node-cas", now=soon)  # fmt: skip
    expires = read_intermediate(inputs / "node-cas" / "node-b").not_valid_after_utc
    assert result.warnings == [
        *(f"sandbox {s} is on no node (its pod gets 407)" for s in ("alpha", "beta", "delta")),
        f"node node-b: its CA expires on {expires:%Y-%m-%d}: issue a new one",
    ]
    later = pernode.render(built, {"node-b": ["gamma"]}, inputs / "sandboxes", inputs / "node-cas")
    assert not any("expires" in w for w in later.warnings)


@pytest.mark.parametrize(
    "name", [f"{MOUNT}/nested/x.token", f"{MOUNT}/x.yaml", f"{MOUNT}/../egress/x.token"]
)
def test_a_reference_that_cannot_be_a_secret_key_is_refused(tmp_path: Path, name: str) -> None:
    (tmp_path / "x.yaml").write_text(f'token: "${{file:{name}}}"\n')
    with pytest.raises(pernode.RenderError, match="cannot be a Secret key"):
        pernode.sandbox_files(tmp_path, "x", MOUNT)
