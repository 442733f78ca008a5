"""Per-node manifests: each node's proxy mounts only its own sandboxes' files and its own
intermediate CA (issue 35, D257).

`python -m sandbox_egress.runtime.fleet.pernode --manifests BUILT.yaml --assignment NODES.yaml
--sandboxes DIR --node-cas DIR --out OUT` takes what `kubectl kustomize` builds from
deploy/ with the per-sandbox component, and an assignment of sandboxes to nodes:

    nodes:
      node-a: [sandbox-1, sandbox-2]
      node-b: [sandbox-3]

and writes OUT/kustomization.yaml, OUT/common.yaml (every built object but the DaemonSet)
and OUT/node-<node>.yaml per node: a DaemonSet `egress-proxy-<node>` pinned to that node
(`kubernetes.io/hostname` node affinity), a Secret `egress-sandboxes-<node>` with that
node's sandboxes' files, and a Secret `egress-proxy-ca-<node>` with that node's intermediate
(`egress-proxy ca --intermediate-of`). Kubernetes' Node authorizer lets a kubelet read only
the Secrets of pods bound to its node, so a node holds no other node's sandbox and no root key.

A sandbox's files are its `<id>.yaml` and every `${file:...}` it names under the directory
the proxy mounts the sandboxes' Secret at (its token, its credentials); a file two sandboxes
name goes to the nodes of both. References elsewhere (the node's own Secrets) are left alone.

Invariants: no root CA key is ever rendered (each node CA is checked to be an intermediate,
`runtime.fleet.nodeca.read_intermediate`); a sandbox assigned to a node must have its file and
every file it names, or nothing is written; OUT and its files are private (0700/0600):
they hold secrets, never commit them. Problems raise RenderError, one line each, naming
the file or the node, never a secret's bytes.
"""

from __future__ import annotations

import argparse
import base64
import copy
import datetime
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives import hashes

from sandbox_egress.proxy.config.references import REFERENCE
from sandbox_egress.runtime.ca import CA_CERT, CA_KEY_AND_CERT, CAError
from sandbox_egress.runtime.fleet.nodeca import read_intermediate

DAEMONSET = "egress-proxy"
SANDBOXES_SECRET = "egress-sandboxes"
CA_SECRET = "egress-proxy-ca"
HOSTNAME = "kubernetes.io/hostname"
NODE_LABEL = "egress.example/node"
CA_ANNOTATION = "egress.example/node-ca-sha256"  # a new intermediate rolls the node's pods
SECRET_LIMIT = 1024 * 1024  # Kubernetes refuses a larger Secret
EXPIRY_WARNING = datetime.timedelta(days=7)
_LABEL_VALUE = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$")
_SANDBOX = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")  # proxy.sandboxes' ids
_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")  # a Secret's keys

Document = dict[str, Any]


class RenderError(Exception):
    """The inputs cannot make per-node manifests; says which input and why."""


@dataclass(frozen=True)
class Rendered:
    common: list[Document]
    nodes: dict[str, list[Document]]  # node -> its DaemonSet and two Secrets
    warnings: list[str] = field(default_factory=list)


def read_assignment(path: Path) -> dict[str, tuple[str, ...]]:
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise RenderError(f"cannot read the assignment {path}: {exc}") from exc
    nodes = document.get("nodes") if isinstance(document, dict) else None
    if not isinstance(nodes, dict) or not nodes:
        raise RenderError(f"{path}: expected `nodes:` mapping node names to sandbox ids")
    assignment: dict[str, tuple[str, ...]] = {}
    for node, sandboxes in nodes.items():
        if not isinstance(node, str) or not _LABEL_VALUE.match(node):
            raise RenderError(f"{path}: nodes.{node}: not a node name of at most 63 characters")
        if not isinstance(sandboxes, list) or not all(isinstance(s, str) for s in sandboxes):
            raise RenderError(f"{path}: nodes.{node}: expected a list of sandbox ids")
        for sandbox in sandboxes:
            if not _SANDBOX.match(sandbox):
                raise RenderError(f"{path}: nodes.{node}: {sandbox!r} is not a sandbox id")
        assignment[node] = tuple(dict.fromkeys(sandboxes))
    return assignment


def sandbox_files(directory: Path, sandbox: str, mount: str) -> dict[str, bytes]:
    """`<sandbox>.yaml` and the files it names under `mount`, read from `directory`."""
    policy = directory / f"{sandbox}.yaml"
    try:
        text = policy.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RenderError(f"sandbox {sandbox}: cannot read {policy}: {_why(exc)}") from exc
    files = {policy.name: text.encode()}
    for match in REFERENCE.finditer(text):
        reference = match.group(1)
        if not reference.startswith("file:"):
            continue
        path = Path(reference[5:])
        if not path.is_relative_to(mount):
            continue  # the node's own files (its Secrets), not this sandbox's
        flat = path.parent == Path(mount) and _KEY.match(path.name) and path.name != ".."
        if not flat or path.name == policy.name:
            raise RenderError(f"sandbox {sandbox}: ${{{reference}}} cannot be a Secret key")
        try:
            files[path.name] = (directory / path.name).read_bytes()
        except OSError as exc:
            raise RenderError(
                f"sandbox {sandbox}: names ${{{reference}}}, but {directory / path.name} "
                f"cannot be read: {_why(exc)}"
            ) from exc
    return files


def render(
    built: Sequence[Document],
    assignment: Mapping[str, Sequence[str]],
    sandboxes: Path,
    node_cas: Path,
    now: datetime.datetime | None = None,
) -> Rendered:
    now = now or datetime.datetime.now(datetime.UTC)
    found = [d for d in built if d.get("kind") == "DaemonSet"]
    base = next((d for d in found if d["metadata"]["name"] == DAEMONSET), None)
    if base is None:
        raise RenderError(f"the manifests hold no DaemonSet {DAEMONSET}")
    for document in built:
        if document.get("kind") == "Secret" and CA_KEY_AND_CERT in (document.get("data") or {}):
            raise RenderError(f"Secret {document['metadata']['name']} holds a CA key: remove it")
    mount = _sandboxes_mount(base)
    warnings = []
    everyone = {p.stem for p in sandboxes.glob("*.yaml")}
    assigned = {s for ids in assignment.values() for s in ids}
    warnings += [
        f"sandbox {s} is on no node (its pod gets 407)" for s in sorted(everyone - assigned)
    ]
    roots: set[bytes] = set()
    nodes: dict[str, list[Document]] = {}
    for node, ids in assignment.items():
        files: dict[str, bytes] = {}
        for sandbox in ids:
            files |= sandbox_files(sandboxes, sandbox, mount)
        ca_files, fingerprint, expires = _node_ca(node_cas / node, node)
        roots.add(ca_files[CA_CERT])
        if expires - now < EXPIRY_WARNING:
            warnings.append(f"node {node}: its CA expires on {expires:%Y-%m-%d}: issue a new one")
        sandbox_secret = _secret(f"{SANDBOXES_SECRET}-{node}", base, node, files)
        ca_secret = _secret(f"{CA_SECRET}-{node}", base, node, ca_files)
        nodes[node] = [_daemonset(base, node, fingerprint), sandbox_secret, ca_secret]
    if len(roots) > 1:
        raise RenderError(f"the node CAs in {node_cas} come from different roots")
    return Rendered([d for d in built if d is not base], nodes, warnings)


def write(rendered: Rendered, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    out.chmod(0o700)
    names = [f"node-{node}.yaml" for node in rendered.nodes]
    for stale in out.glob("node-*.yaml"):
        if stale.name not in names:
            stale.unlink()  # a node no longer assigned: its secrets go too
    _private(out / "common.yaml", yaml.safe_dump_all(rendered.common, sort_keys=False))
    for name, documents in zip(names, rendered.nodes.values(), strict=True):
        _private(out / name, yaml.safe_dump_all(documents, sort_keys=False))
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["common.yaml", *names],
    }
    _private(out / "kustomization.yaml", yaml.safe_dump(kustomization, sort_keys=False))


def _sandboxes_mount(base: Document) -> str:
    pod = base["spec"]["template"]["spec"]
    volume = next(
        (v["name"] for v in pod.get("volumes", [])
         if v.get("secret", {}).get("secretName") == SANDBOXES_SECRET),
        None,
    )  # fmt: skip
    for container in pod["containers"]:
        for mounted in container.get("volumeMounts", []):
            if volume is not None and mounted["name"] == volume:
                return str(mounted["mountPath"])
    raise RenderError(
        f"DaemonSet {DAEMONSET} mounts no Secret {SANDBOXES_SECRET}: build the manifests "
        "with the per-sandbox component (deploy/kubernetes/per-sandbox)"
    )


def _node_ca(directory: Path, node: str) -> tuple[dict[str, bytes], str, datetime.datetime]:
    try:
        cert = read_intermediate(directory)
        files = {name: (directory / name).read_bytes() for name in (CA_KEY_AND_CERT, CA_CERT)}
    except CAError as exc:
        raise RenderError(f"node {node}: {exc}") from exc
    except OSError as exc:
        raise RenderError(f"node {node}: cannot read {directory}: {exc.strerror}") from exc
    return files, cert.fingerprint(hashes.SHA256()).hex(), cert.not_valid_after_utc


def _secret(name: str, base: Document, node: str, files: Mapping[str, bytes]) -> Document:
    data = {key: base64.b64encode(value).decode() for key, value in sorted(files.items())}
    if sum(len(v) for v in data.values()) > SECRET_LIMIT:
        raise RenderError(
            f"node {node}: Secret {name} would pass Kubernetes' 1 MiB: split the node"
        )
    labels = {"app.kubernetes.io/name": DAEMONSET, NODE_LABEL: node}
    metadata = {"name": name, "namespace": base["metadata"]["namespace"], "labels": labels}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "type": "Opaque",
            "data": data}  # fmt: skip


def _daemonset(base: Document, node: str, fingerprint: str) -> Document:
    daemonset = copy.deepcopy(base)
    daemonset["metadata"]["name"] = f"{DAEMONSET}-{node}"
    daemonset["metadata"].setdefault("labels", {})[NODE_LABEL] = node
    daemonset["spec"]["selector"]["matchLabels"][NODE_LABEL] = node
    template = daemonset["spec"]["template"]
    template["metadata"]["labels"][NODE_LABEL] = node  # the Services still select the name
    template["metadata"].setdefault("annotations", {})[CA_ANNOTATION] = fingerprint
    pod = template["spec"]
    term = {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": [node]}]}
    pod.setdefault("affinity", {})["nodeAffinity"] = {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
    }
    renamed = {SANDBOXES_SECRET: f"{SANDBOXES_SECRET}-{node}", CA_SECRET: f"{CA_SECRET}-{node}"}
    for volume in pod.get("volumes", []):
        secret = volume.get("secret")
        if secret is not None and secret.get("secretName") in renamed:
            secret["secretName"] = renamed[secret["secretName"]]
    return daemonset


def _private(path: Path, text: str) -> None:
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(text, encoding="utf-8")


def _why(exc: Exception) -> str:
    return exc.strerror or str(exc) if isinstance(exc, OSError) else "not UTF-8 text"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sandbox_egress.runtime.fleet.pernode",
        description="per-node DaemonSets and Secrets: each node gets only its sandboxes' "
        "files and its own intermediate CA (docs/operations.md#node-intermediates)",
    )
    options = {
        "--manifests": "`kubectl kustomize` output of deploy/ with the per-sandbox component",
        "--assignment": "YAML: nodes: {NODE: [SANDBOX ID, ...]}",
        "--sandboxes": "the directory of <id>.yaml and the files they name",
        "--node-cas": "one directory per node, from `egress-proxy ca --intermediate-of`",
        "--out": "written here (it holds secrets: never commit it)",
    }
    for flag, text in options.items():
        parser.add_argument(flag, type=Path, required=True, help=text)
    args = parser.parse_args(argv)
    try:
        built = [d for d in yaml.safe_load_all(args.manifests.read_text(encoding="utf-8")) if d]
        rendered = render(built, read_assignment(args.assignment), args.sandboxes, args.node_cas)
        write(rendered, args.out)
    except (OSError, yaml.YAMLError) as exc:
        print(f"pernode: cannot read {args.manifests}: {exc}", file=sys.stderr)
        return 2
    except RenderError as exc:
        print(f"pernode: {exc}", file=sys.stderr)
        return 2
    for warning in rendered.warnings:
        print(f"pernode: warning: {warning}", file=sys.stderr)
    print(f"pernode: {len(rendered.nodes)} nodes in {args.out}: kubectl apply -k {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
