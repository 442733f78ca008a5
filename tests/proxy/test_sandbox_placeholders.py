"""Placeholders across a node and its sandboxes (issue 30, D179; issue 43, D342).

Within what one sandbox sees (the node file and its own) a placeholder names one secret:
a sandbox file repeating the node's is refused (its sandbox keeps its last good policy,
the others are untouched). Two sandbox files may bind the same placeholder, each to its
own secret, and each sandbox's request is swapped from its own file. A request of one
sandbox carrying the node's placeholder is refused `placeholder_elsewhere`, wherever in
the request it is (a header value or name, the request-target); another sandbox's is
none of its concern (D425: a less-trusted file never refuses another sandbox's requests;
it is never swapped either). The resolver is a table: nothing touches a socket.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sandbox_egress.proxy.config.loader import ConfigError, parse
from sandbox_egress.proxy.decision import Reason
from sandbox_egress.proxy.hosts import IPAddress, canonical_host
from sandbox_egress.proxy.policy import Policy
from sandbox_egress.proxy.stages import ConnectionFacts, RequestAsk, decide_request
from sandbox_egress.proxy.targets import RequestNames
from sandbox_egress.proxy.tenancy.sandboxes import (
    SandboxDirectory,
    SandboxesSection,
    check_node,
    parse_sandbox,
)
from sandbox_egress.proxy.tenancy.tenants import Tenancy

NODE_PH, ALPHA_PH, BETA_PH = "node-egress-placeholder", "alpha-egress-placeholder", "beta-egress-ph"
SHARED_PH = "sk-egress-placeholder-openai"  # what every sandbox image holds (D342)
ENV = {"K": "the-real-value-0123456789"}
NODE = Policy(
    parse(
        {
            "network": {
                "allowlist": [
                    {"domain": "api.node.test", "secrets": [{"placeholder": NODE_PH, "value": "${K}"}]},
                    {"domain": "*"},
                ]
            }
        },
        "/etc/egress/node.yaml",
        ENV,
    )
)  # fmt: skip


def sandbox_text(placeholder: str, value: str = "the-real-value-0123456789") -> str:
    return f"""\
network:
  allowlist:
    - domain: api.openai.test
      secrets: [{{placeholder: "{placeholder}", value: "{value}", require: true}}]
    - domain: other.test
"""


def tenancy(**files: str) -> Tenancy:
    import yaml

    sandboxes = {
        name: parse_sandbox(yaml.safe_load(text), f"/sbx/{name}.yaml", name)
        for name, text in files.items()
    }
    empty = Tenancy(SandboxesSection(Path("/sbx")), NODE)
    return empty.rebuilt(sandboxes, NODE, frozenset(sandboxes))


TENANCY = tenancy(alpha=sandbox_text(ALPHA_PH), beta=sandbox_text(BETA_PH))
ALPHA_SECRET, GAMMA_SECRET = "sk-alpha-real-secret-000111", "sk-gamma-real-secret-222333"
SHARED = tenancy(
    alpha=sandbox_text(SHARED_PH, ALPHA_SECRET),
    gamma=sandbox_text(SHARED_PH, GAMMA_SECRET),
    beta=sandbox_text(BETA_PH),
)


async def resolve(name: str, port: int) -> list[IPAddress]:
    return [canonical_host("93.184.216.34").ip]  # type: ignore[list-item]


def ask(host: str, path: str = "/", *fields: tuple[bytes, bytes]) -> RequestAsk:
    names = RequestNames(
        transparent=False,
        host=host,
        port=443,
        host_header=host,
        sni=None,
        client_tls=True,
        target=None,
        path=path,
    )
    return RequestAsk(b"GET", ((b"Host", host.encode()), *fields), names, https=True)


def bearer(placeholder: str) -> tuple[bytes, bytes]:
    return (b"Authorization", f"Bearer {placeholder}".encode())


ELSEWHERE = Reason.PLACEHOLDER_ELSEWHERE
CASES = [
    # (id, sandbox, request, reason)
    ("own-swapped", "alpha", ask("api.openai.test", "/", bearer(ALPHA_PH)), Reason.ALLOWLISTED),
    ("other-sandbox-own", "beta", ask("api.openai.test", "/", bearer(BETA_PH)),
     Reason.ALLOWLISTED),
    # Another sandbox's placeholder is worth nothing here: never swapped, never flagged (D425).
    ("other-sandboxs-at-the-same-host", "alpha", ask("api.openai.test", "/", bearer(BETA_PH)),
     Reason.CREDENTIAL_REQUIRED),
    ("other-sandboxs-elsewhere", "alpha", ask("other.test", "/", bearer(BETA_PH)),
     Reason.ALLOWLISTED),
    ("other-sandboxs-in-a-header-name", "alpha",
     ask("other.test", "/", (f"X-{BETA_PH}".encode(), b"1")), Reason.ALLOWLISTED),
    ("other-sandboxs-in-the-query", "alpha", ask("other.test", f"/x?k={BETA_PH}"),
     Reason.ALLOWLISTED),
    ("other-sandboxs-beside-own", "alpha",
     ask("api.openai.test", "/", bearer(ALPHA_PH), (b"X-Also", BETA_PH.encode())),
     Reason.ALLOWLISTED),
    ("the-nodes-at-its-host", "alpha", ask("api.node.test", "/", bearer(NODE_PH)), ELSEWHERE),
    ("the-nodes-elsewhere", "beta", ask("other.test", "/", bearer(NODE_PH)), ELSEWHERE),
    ("own-sent-elsewhere", "alpha", ask("other.test", "/", bearer(ALPHA_PH)), ELSEWHERE),
    ("nothing-carried", "alpha", ask("other.test", "/"), Reason.ALLOWLISTED),
]  # fmt: skip


@pytest.mark.parametrize(
    ("sandbox", "request_ask", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_a_sandboxs_request_is_searched_for_the_placeholders_it_sees(
    sandbox: str, request_ask: RequestAsk, reason: Reason
) -> None:
    policy = TENANCY.policy(sandbox)
    answer = asyncio.run(decide_request(policy, resolve, ConnectionFacts(), request_ask))
    assert answer.decision.reason is reason
    assert (answer.pin is not None) is (reason is Reason.ALLOWLISTED)


def test_a_changed_sandbox_file_never_changes_what_the_others_are_searched_for() -> None:
    import yaml

    new_beta = "beta-egress-placeholder-2"
    beta = parse_sandbox(yaml.safe_load(sandbox_text(new_beta)), "/sbx/beta.yaml", "beta")
    alpha = TENANCY.policies["alpha"].sandbox
    changed = TENANCY.rebuilt({"alpha": alpha, "beta": beta}, NODE, frozenset({"beta"}))
    request = ask("other.test", "/", bearer(new_beta))
    answer = asyncio.run(
        decide_request(changed.policy("alpha"), resolve, ConnectionFacts(), request)
    )
    assert answer.decision.reason is Reason.ALLOWLISTED  # beta's placeholder: not alpha's concern
    # alpha's file did not change: its policy is shared, not built again.
    assert changed.policies["alpha"] is TENANCY.policies["alpha"]
    again = changed.rebuilt({"alpha": alpha, "beta": beta}, NODE, frozenset())
    assert again.policies["alpha"] is changed.policies["alpha"]  # nothing changed: shared


def test_a_sandbox_file_repeating_the_nodes_placeholder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "alpha.yaml").write_text(sandbox_text(ALPHA_PH))
    directory = SandboxDirectory(tmp_path, node_placeholders=frozenset({NODE_PH.encode()}))
    assert directory.scan().changed == {"alpha"}

    (tmp_path / "beta.yaml").write_text(sandbox_text(ALPHA_PH))  # alpha's: its own secret
    (tmp_path / "gamma.yaml").write_text(sandbox_text(NODE_PH))  # the node's
    found = directory.scan()
    assert found.changed == {"beta"} and directory.invalid == {"gamma"}
    where = "network.allowlist[0].secrets[0].placeholder"
    assert [(Path(p.file).name, p.location, p.message) for p in found.problems] == [
        ("gamma.yaml", where, "placeholder already used by the node file"),
    ]
    assert set(directory.sandboxes) == {"alpha", "beta"}  # gamma, new, stays unknown

    (tmp_path / "alpha.yaml").write_text(sandbox_text(ALPHA_PH) + "    - domain: a.test\n")
    assert directory.scan().changed == {"alpha"}
    (tmp_path / "beta.yaml").write_text(sandbox_text(NODE_PH) + "# again\n")
    assert directory.scan().problems[0].message == "placeholder already used by the node file"
    assert directory.sandboxes["beta"].network.allowlist[0].secrets[0].placeholder == ALPHA_PH


def test_a_placeholder_twice_in_one_sandbox_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "alpha.yaml").write_text(
        sandbox_text(SHARED_PH)
        + f"      secrets: [{{placeholder: {SHARED_PH}, value: another-value-0123}}]\n"
    )
    found = SandboxDirectory(tmp_path).scan()
    assert [(p.location, p.message) for p in found.problems] == [
        (
            "network.allowlist[1].secrets[0].placeholder",
            "placeholder already used at network.allowlist[0].secrets[0].placeholder",
        )
    ]


SHARED_CASES = [
    # (id, sandbox, request, reason, the value swapped in)
    ("alpha-swapped-from-its-own", "alpha", ask("api.openai.test", "/", bearer(SHARED_PH)),
     Reason.ALLOWLISTED, ALPHA_SECRET),
    ("gamma-swapped-from-its-own", "gamma", ask("api.openai.test", "/", bearer(SHARED_PH)),
     Reason.ALLOWLISTED, GAMMA_SECRET),
    ("alpha-sending-it-elsewhere", "alpha", ask("other.test", "/", bearer(SHARED_PH)),
     ELSEWHERE, None),
    ("beta-holds-none-of-it", "beta", ask("api.openai.test", "/", bearer(SHARED_PH),
     bearer(BETA_PH)), Reason.CREDENTIAL_REQUIRED, None),
    ("beta-sending-it-anywhere", "beta", ask("other.test", f"/?k={SHARED_PH}"),
     Reason.ALLOWLISTED, None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("sandbox", "request_ask", "reason", "value"),
    [c[1:] for c in SHARED_CASES],
    ids=[c[0] for c in SHARED_CASES],
)
def test_a_placeholder_shared_by_sandbox_files_is_swapped_from_each_ones_own(
    sandbox: str, request_ask: RequestAsk, reason: Reason, value: str | None
) -> None:
    policy = SHARED.policy(sandbox)
    answer = asyncio.run(decide_request(policy, resolve, ConnectionFacts(), request_ask))
    assert answer.decision.reason is reason
    if value is not None:
        assert answer.fields is not None
        assert (b"Authorization", f"Bearer {value}".encode()) in answer.fields


def test_check_reports_a_repeated_placeholder(tmp_path: Path) -> None:
    node = tmp_path / "node.yaml"
    node.write_text(
        "network:\n  allowlist:\n    - domain: api.node.test\n"
        f"      secrets: [{{placeholder: {NODE_PH}, value: v-0123456789}}]\n"
        "sandboxes: {directory: sandboxes}\n"
    )
    (tmp_path / "sandboxes").mkdir()
    (tmp_path / "sandboxes" / "alpha.yaml").write_text(sandbox_text(NODE_PH))
    with pytest.raises(ConfigError) as refused:
        check_node(node, secrets=False)
    assert [p.message for p in refused.value.problems] == [
        "placeholder already used by the node file"
    ]
