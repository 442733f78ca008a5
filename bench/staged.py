"""The product contender's configuration: the generated allowlist with the policy stages
of issues 22-25 configured, so that the bench measures what a deployment runs (issue 26).

Written beside each other in the work directory:
* the node file (`egress.yaml`): the 1,000-entry allowlist (`bench.allowlist`), where
  * the host under test (`TARGET`) keeps its transform (the header squid injects too)
    and gains `rules` (GET/HEAD), a `deny` clause and a placeholder `secret` that the
    bench's requests do not carry: every request passes the rules stage and the
    placeholder scan, and what reaches the upstream is what squid sends (D168);
  * one svc entry in ten gains `rules` and `deny`, one in twenty `git` fetch and push
    items;
  * `sandboxes` names the directory below, identified by source address, with room for
    scenario 6's 1,000 idle tunnels of the one bench sandbox;
* the sandboxes directory: `bench.yaml` claims the bench client's address (127.0.0.1 in
  the client namespace) with its own allowlist (the hosts the scenarios use, the same
  transform, rules and secret), so every request is decided by the sandbox's policy
  inside the node's ceiling; `OTHERS` more files claim other addresses, as on a node.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from bench.allowlist import BULK_HOST, HOOK_HOST, TARGET, UPSTREAM_CIDR, Allowlist

OTHERS = 9
SECRET_ENV = "BENCH_SECRET_TARGET"
PLACEHOLDER = "bench-egress-placeholder-target"
SECRET_VALUE = "bench-secret-value-never-sent-0123456789"
CLIENT_ADDRESS = "127.0.0.1"


def _staged_target(entry: dict[str, Any], placeholder: str = PLACEHOLDER) -> dict[str, Any]:
    """The host under test's entry with rules, a deny clause and a placeholder secret."""
    return {
        **entry,
        "rules": [{"methods": ["GET", "HEAD"]}],
        "deny": [{"paths": ["/admin", "/admin/**"]}],
        "secrets": [{"placeholder": placeholder, "value": f"${{{SECRET_ENV}}}"}],
    }


def node_document(allowlist: Allowlist, directory: str) -> dict[str, Any]:
    """The node file: every stage configured (module docstring)."""
    entries = []
    for index, entry in enumerate(allowlist.document()["network"]["allowlist"]):
        domain = entry["domain"]
        if domain == TARGET:
            # The placeholder lives in the sandbox files only: a placeholder may not be
            # declared by both the node file and a sandbox file.
            entry = {key: value for key, value in _staged_target(entry).items() if key != "secrets"}
        elif domain.startswith("svc-") and index % 10 == 0:
            entry = {
                **entry,
                "rules": [{"methods": ["GET"]}, {"methods": ["POST"], "paths": ["/v1/**"]}],
                "deny": [{"paths": ["/v1/admin/**"]}],
            }
        elif domain.startswith("svc-") and index % 20 == 5:
            repo = f"acme/repo-{index}"
            push = [{"repo": repo, "refs": ["refs/heads/agent/**"]}]
            entry = {**entry, "git": {"fetch": ["acme/*"], "push": push}}
        entries.append(entry)
    return {
        "network": {"allowlist": entries},
        # Scenario 6 opens 1,000 tunnels from the one bench sandbox (default bound: 512).
        "sandboxes": {
            "directory": directory,
            "identify": ["source_address"],
            "max_connections": 4096,
        },
    }


def sandbox_document(
    allowlist: Allowlist, address: str, hosts: tuple[str, ...], placeholder: str = PLACEHOLDER
) -> dict[str, Any]:
    """A sandbox file: `hosts` (and the upstream's range) from the node's entries; a
    placeholder is declared by one sandbox only, so each file has its own."""
    entries = [{"domain": UPSTREAM_CIDR}]
    for entry in allowlist.document()["network"]["allowlist"]:
        if entry["domain"] in hosts:
            entries.append(
                _staged_target(entry, placeholder) if entry["domain"] == TARGET else entry
            )
    return {"class": "bench", "addresses": [address], "network": {"allowlist": entries}}


def environ() -> dict[str, str]:
    """What the proxy's environment needs beyond the allowlist's transform variables."""
    return {SECRET_ENV: SECRET_VALUE}


def write(allowlist: Allowlist, work: Path) -> Path:
    """The node file (`work/egress.yaml`, returned) and its sandboxes directory."""
    directory = work / "sandboxes"
    directory.mkdir(exist_ok=True)
    hosts = (TARGET, HOOK_HOST, BULK_HOST)
    bench = sandbox_document(allowlist, CLIENT_ADDRESS, hosts)
    (directory / "bench.yaml").write_text(yaml.safe_dump(bench, sort_keys=False))
    for n in range(OTHERS):
        address = f"198.19.250.{n + 1}"
        other = sandbox_document(allowlist, address, hosts, f"{PLACEHOLDER}-other-{n}")
        (directory / f"other-{n}.yaml").write_text(yaml.safe_dump(other, sort_keys=False))
    node = work / "egress.yaml"
    document = node_document(allowlist, directory.name)
    node.write_text(yaml.safe_dump(document, sort_keys=False))
    return node
