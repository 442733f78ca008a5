"""The product contender's configuration: the generated allowlist with the policy stages
of issues 22-25 configured, so that the bench measures what a deployment runs (issue 26).

Written beside each other in the work directory:
* the node file (`egress.yaml`): the 1,000-entry allowlist (`bench.allowlist`), where
  * the host under test (`TARGET`) keeps its transform (the header squid injects too)
    and gains `rules` (GET/HEAD), a `deny` clause, a placeholder `secret` whose value is
    a `credentials:` entry (an `env` source), an `mcp:` endpoint, and a `budget` no run
    reaches, none of which the bench's requests trigger: every request passes the rules,
    MCP, budget (`state: backend: memory`) and placeholder stages, and what reaches the
    upstream is what squid sends (D168, D264);
  * one svc entry in ten gains `rules` and `deny`, one in twenty `git` fetch and push
    items;
  * `sandboxes` names the directory below, identified by source address, with room for
    scenario 6's 1,000 idle tunnels of the one bench sandbox;
* the sandboxes directory: `bench.yaml` claims the bench client's address (127.0.0.1 in
  the client namespace) with its own allowlist (the hosts the scenarios use, the same
  transform, rules, MCP endpoint and budget, a secret with its own placeholder whose value
  is the variable's value in a file: a sandbox file has no `credentials:` and reads no
  variable, D340), so every request is decided by the sandbox's policy inside the node's
  ceiling; `OTHERS` more files claim other addresses, as on a node;
* the sandboxes' secrets (`sandbox-secrets/<id>/<VARIABLE>`, the node's
  `sandboxes.secrets`): each sandbox file's `${file:}` references, one file per variable
  its entries name.

Each file's placeholder is its own (`placeholder`, D264): a sandbox file repeating the
node's is refused (D342).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from bench.allowlist import BULK_HOST, HOOK_HOST, TARGET, UPSTREAM_CIDR, Allowlist

OTHERS = 9
SECRET_ENV = "BENCH_SECRET_TARGET"
SECRET_VALUE = "bench-secret-value-never-sent-0123456789"
CREDENTIAL = "bench-credential"
CLIENT_ADDRESS = "127.0.0.1"
# Far above what any scenario sends: the stage runs, never refuses.
BUDGET = {"requests": "100000000/second", "upload": "1000GiB/second"}
SECRETS = "sandbox-secrets"  # beside the node file: its `sandboxes.secrets`
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def placeholder(owner: str) -> str:
    """The placeholder of `owner`'s target entry ("node", or a sandbox file's name)."""
    return f"bench-egress-placeholder-{owner}"


def _staged_target(entry: dict[str, Any], owner: str) -> dict[str, Any]:
    """The host under test's entry with rules, a deny clause, an MCP endpoint, a budget
    and a placeholder secret: its value is the node's credential, or in a sandbox file
    (which has no `credentials:`) the variable the credential reads."""
    value = f"${{credential:{CREDENTIAL}}}" if owner == "node" else f"${{{SECRET_ENV}}}"
    return {
        **entry,
        "rules": [{"methods": ["GET", "HEAD"]}],
        "deny": [{"paths": ["/admin", "/admin/**"]}],
        "mcp": {"endpoint": ["/mcp"], "tools": ["search"]},
        "budget": BUDGET,
        "secrets": [{"placeholder": placeholder(owner), "value": value}],
    }


def _from_files(entry: dict[str, Any], own: Path, used: set[str]) -> dict[str, Any]:
    """`entry` with each `${NAME}` of its transform and secrets read from `own/NAME` (a
    sandbox file reads no variable, D340); the names go into `used`."""

    def read(value: str) -> str:
        used.update(_VARIABLE.findall(value))
        return _VARIABLE.sub(lambda m: f"${{file:{own / m.group(1)}}}", value)

    found = dict(entry)
    if "transform" in found:
        found["transform"] = {k: read(v) for k, v in found["transform"].items()}
    if "secrets" in found:
        found["secrets"] = [{**s, "value": read(s["value"])} for s in found["secrets"]]
    return found


def node_document(allowlist: Allowlist, directory: str) -> dict[str, Any]:
    """The node file: every stage configured (module docstring)."""
    entries = []
    for index, entry in enumerate(allowlist.document()["network"]["allowlist"]):
        domain = entry["domain"]
        if domain == TARGET:
            entry = _staged_target(entry, "node")
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
        "credentials": {CREDENTIAL: {"env": SECRET_ENV}},
        "state": {"backend": "memory"},
        "network": {"allowlist": entries},
        # Scenario 6 opens 1,000 tunnels from the one bench sandbox (default bound: 512).
        "sandboxes": {
            "directory": directory,
            "secrets": SECRETS,
            "identify": ["source_address"],
            "max_connections": 4096,
        },
    }


def sandbox_document(
    allowlist: Allowlist, address: str, hosts: tuple[str, ...], owner: str, secrets: Path
) -> tuple[dict[str, Any], dict[str, str]]:
    """A sandbox file (`owner`.yaml): `hosts` (and the upstream's range) from the node's
    entries; and the files its references read below `secrets/owner/` (name: value)."""
    entries = [{"domain": UPSTREAM_CIDR}]
    used: set[str] = set()
    for entry in allowlist.document()["network"]["allowlist"]:
        if entry["domain"] in hosts:
            staged = _staged_target(entry, owner) if entry["domain"] == TARGET else entry
            entries.append(_from_files(staged, secrets / owner, used))
    values = {**allowlist.environ, **environ()}
    document = {
        "class": "bench",
        "addresses": [address],
        "network": {"allowlist": entries},
    }
    return document, {name: values[name] for name in sorted(used)}


def environ() -> dict[str, str]:
    """What the proxy's environment needs beyond the allowlist's transform variables."""
    return {SECRET_ENV: SECRET_VALUE}


def write(allowlist: Allowlist, work: Path) -> Path:
    """The node file (`work/egress.yaml`, returned) and its sandboxes directory."""
    directory = work / "sandboxes"
    directory.mkdir(exist_ok=True)
    secrets = (work / SECRETS).resolve()
    hosts = (TARGET, HOOK_HOST, BULK_HOST)
    owners = {"bench": CLIENT_ADDRESS} | {
        f"other-{n}": f"198.19.250.{n + 1}" for n in range(OTHERS)
    }
    for owner, address in owners.items():
        document, files = sandbox_document(allowlist, address, hosts, owner, secrets)
        (directory / f"{owner}.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
        (secrets / owner).mkdir(parents=True, exist_ok=True)
        for name, value in files.items():
            (secrets / owner / name).write_text(value)
    node = work / "egress.yaml"
    document = node_document(allowlist, directory.name)
    node.write_text(yaml.safe_dump(document, sort_keys=False))
    return node
