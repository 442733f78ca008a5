"""End to end, sandbox files a node cannot trust (issue 43; D340-D342):
the real proxy, real sockets, real TLS.

* A node whose directory holds a broken file and files repeating a placeholder (inside
  one file, or the node's) starts, serves every other sandbox, gives the refused ones no
  egress, and lists them in /status with located reasons and no secret.
* Two sandbox files bind the same placeholder (the one every sandbox image holds) to
  different secrets: each upstream request carries its own sandbox's secret.
* A sandbox file cannot read the node's environment (`${VAR}`) nor another sandbox's
  secret file (directly, through `..`, or through a symlink), at start or later.
"""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from testbed import procs
from testbed.expect import Observed, assert_refused, header_values
from testbed.harness import Harness
from testbed.rawhttp import Response
from tests.e2e.conftest import SECRET_ENV, PrivateProxy
from tests.e2e.sandbox_node import basic

pytestmark = pytest.mark.netns

SHARED_PH = "sk-egress-placeholder-openai"
NODE_PH = "node-egress-placeholder-0001"
TOKENS = {name: f"{name}-proxy-token-0123456789" for name in
          ("alpha", "gamma", "broken", "deep", "twice", "nodes", "envy", "thief", "climber",
           "linked")}  # fmt: skip
OPENAI = {"alpha": "sk-alpha-real-secret-000111", "gamma": "sk-gamma-real-secret-222333"}

NODE = """\
network:
  allowlist:
    - domain: "*.allowed.test"
    - domain: 198.18.1.0/24                 # the test upstream's network
    - domain: plain.allowed.test
      secrets: [{{placeholder: "{node_ph}", value: node-real-secret-444555}}]
sandboxes:
  directory: {directory}
  secrets: {secrets}
  identify: [proxy_auth]
"""

SANDBOX = """\
token: "${{file:{secrets}/{name}/token}}"
network:
  allowlist:
    - domain: api.allowed.test
      secrets: [{{placeholder: "{placeholder}", value: "{value}", require: true}}]
    - domain: 198.18.1.0/24
"""


def sandbox(secrets: Path, name: str, value: str, placeholder: str = SHARED_PH) -> str:
    return SANDBOX.format(secrets=secrets, name=name, placeholder=placeholder, value=value)


def node_with(
    private_proxy: Callable[..., PrivateProxy], tmp_path: Path, files: dict[str, str]
) -> tuple[PrivateProxy, Path, Path]:
    """A node proxy whose directory holds `files`; each sandbox's token and its openai
    secret (where it has one) in `secrets/<id>/`."""
    directory, secrets = tmp_path / "sandboxes", tmp_path / "secrets"
    directory.mkdir()
    for name, token in TOKENS.items():
        (secrets / name).mkdir(parents=True, exist_ok=True)
        (secrets / name / "token").write_text(token + "\n")
        if name in OPENAI:
            (secrets / name / "openai").write_text(OPENAI[name] + "\n")
    for name, text in files.items():
        (directory / f"{name}.yaml").write_text(text.replace("{secrets}", str(secrets)))
    node = NODE.format(directory=directory, secrets=secrets, node_ph=NODE_PH)
    return private_proxy("sbxfiles", node, "--watch-interval", "0.2"), directory, secrets


def openai_as(view: Harness, sandbox: str, path: str, key: str = SHARED_PH) -> Response:
    """CONNECT as `sandbox`, TLS, one GET carrying `Authorization: Bearer <key>`."""
    with view.conn() as conn:
        auth = [("Proxy-Authorization", basic(sandbox, TOKENS[sandbox]))]
        response = conn.connect("api.allowed.test:443", auth)
        if response.status != 200:
            return response
        conn.start_tls(view.client_tls(), "api.allowed.test")
        headers = [("Host", "api.allowed.test"), ("Authorization", f"Bearer {key}")]
        return conn.request("GET", path, headers)


def allowed(secrets: Path, name: str) -> str:
    return f"{secrets}/{name}/ or {secrets}/{name}.<name>"


def own(name: str) -> str:
    return f"${{file:{{secrets}}/{name}/openai}}"


BROKEN = "token: x\nnetwork:\n  allowlist:\n    - domain: '**'\n"
TWICE = sandbox(Path("{secrets}"), "twice", "twice-value-0001") + (
    f'    - domain: other.allowed.test\n      secrets: [{{placeholder: "{SHARED_PH}", '
    'value: twice-value-0002}]\n'
)  # fmt: skip


def test_a_node_with_a_broken_and_a_repeating_file_starts_and_serves_the_others(
    private_proxy: Callable[..., PrivateProxy], tmp_path: Path, obs: Observed
) -> None:
    files = {
        "alpha": sandbox(Path("{secrets}"), "alpha", own("alpha")),
        "gamma": sandbox(Path("{secrets}"), "gamma", own("gamma")),
        "broken": BROKEN,
        "deep": "network: " + "[" * 5000 + "]" * 5000 + "\n",  # past the parser's recursion
        "twice": TWICE,  # one placeholder, two secrets, in one file
        "nodes": sandbox(Path("{secrets}"), "nodes", "nodes-value-0003", NODE_PH),
    }
    p, _, _ = node_with(private_proxy, tmp_path, files)
    mark = p.view.audit_log.mark()

    assert openai_as(p.view, "alpha", "/alpha").status == 200
    assert openai_as(p.view, "gamma", "/gamma").status == 200
    first, second = obs.requests()
    assert (first["target"], header_values(first, "Authorization")) == (
        "/alpha",
        [f"Bearer {OPENAI['alpha']}"],
    )
    assert (second["target"], header_values(second, "Authorization")) == (
        "/gamma",
        [f"Bearer {OPENAI['gamma']}"],
    )
    for refused in ("broken", "deep", "twice", "nodes"):  # no egress: its file is refused
        response = openai_as(p.view, refused, f"/{refused}")
        assert response.status == 407, response.describe()
    assert len(obs.requests()) == 2

    found = p.process.status()["sandboxes"]
    assert (found["count"], found["ids"]) == (2, ["alpha", "gamma"])
    assert [(r["file"], r["problems"]) for r in found["refused"]] == [
        (
            "broken.yaml",
            [
                "4:7: network.allowlist[0].domain: a wildcard may only be a single leading '*.' "
                "label, or '*' alone (got '**')",
                "token: must be at least 16 characters, without ':', CR, LF, NUL",
            ],
        ),
        ("deep.yaml", ["cannot be read: nested too deeply"]),
        (
            "nodes.yaml",
            [
                "5:18: network.allowlist[0].secrets[0].placeholder: placeholder already used by "
                "the node file"
            ],
        ),
        (
            "twice.yaml",
            [
                "8:18: network.allowlist[2].secrets[0].placeholder: placeholder already used at "
                "network.allowlist[0].secrets[0].placeholder"
            ],
        ),
    ]
    samples = p.process.scrape()
    assert samples[("egress_sandbox_files_invalid", ())] == 4
    lines = p.view.audit_log.wait_count(mark, 8)
    assert [(a["sandbox"], a["method"], a["decision"]) for a in lines[:4]] == [
        ("alpha", "CONNECT", "allow"),
        ("alpha", "GET", "allow"),
        ("gamma", "CONNECT", "allow"),
        ("gamma", "GET", "allow"),
    ]
    stderr = p.view.proxy_stderr.read_text()
    assert "sandbox file refused (start)" in stderr
    shown = stderr + p.process.audit.read_text() + json.dumps(p.process.status())
    for secret in [*OPENAI.values(), "twice-value-0001", "twice-value-0002", *TOKENS.values()]:
        assert secret not in shown

    # The health server, probed by something that gives up mid-request, prints nothing.
    for _ in range(3):
        probe = p.process.metrics_socket()
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        probe.sendall(b"GET /healthz HTTP/1.1\r\nHost: x")
        probe.close()
    assert p.process.healthz() == 200
    assert "Traceback" not in p.view.proxy_stderr.read_text()


def test_a_placeholder_elsewhere_is_still_refused_for_a_sandbox_that_holds_it(
    private_proxy: Callable[..., PrivateProxy], tmp_path: Path, obs: Observed
) -> None:
    files = {
        "alpha": sandbox(Path("{secrets}"), "alpha", own("alpha"))
        + "    - domain: other.allowed.test\n",
        "gamma": sandbox(Path("{secrets}"), "gamma", own("gamma")),
    }
    p, _, _ = node_with(private_proxy, tmp_path, files)
    with p.view.conn() as conn:
        auth = [("Proxy-Authorization", basic("alpha", TOKENS["alpha"]))]
        assert conn.connect("other.allowed.test:443", auth).status == 200
        conn.start_tls(p.view.client_tls(), "other.allowed.test")
        headers = [("Host", "other.allowed.test"), ("Authorization", f"Bearer {SHARED_PH}")]
        assert_refused(conn.request("GET", "/leak", headers), "placeholder_elsewhere")
    obs.assert_nothing_reached()


THIEF = """\
token: "${file:{secrets}/thief/token}"
network:
  allowlist:
    - domain: api.allowed.test
      transform: {X-Stolen: "${file:{secrets}/alpha/openai}"}
"""
ENVY = f"""\
token: "${{file:{{secrets}}/envy/token}}"
network:
  allowlist:
    - domain: api.allowed.test
      transform: {{X-Stolen: "${{{SECRET_ENV}}}"}}
"""
CLIMBER = THIEF.replace("thief/token", "climber/token").replace(
    "{secrets}/alpha/openai", "{secrets}/climber/../alpha/openai"
)
LINKED = THIEF.replace("thief/token", "linked/token").replace(
    "{secrets}/alpha/openai", "{secrets}/linked/openai-link"
)


def test_a_sandbox_file_reads_neither_the_nodes_environment_nor_another_sandboxs_secret(
    private_proxy: Callable[..., PrivateProxy], tmp_path: Path, obs: Observed
) -> None:
    files = {
        "alpha": sandbox(Path("{secrets}"), "alpha", own("alpha")),
        "thief": THIEF,
        "envy": ENVY,
        "climber": CLIMBER,
        "linked": LINKED,
    }
    (tmp_path / "secrets" / "linked").mkdir(parents=True)
    (tmp_path / "secrets" / "linked" / "openai-link").symlink_to("../alpha/openai")
    p, directory, secrets = node_with(private_proxy, tmp_path, files)

    for name in ("thief", "envy", "climber", "linked"):
        response = openai_as(p.view, name, f"/{name}")
        assert response.status == 407, response.describe()  # refused file: no egress
    assert openai_as(p.view, "alpha", "/alpha").status == 200
    assert [r["target"] for r in obs.requests()] == ["/alpha"]
    assert all(header_values(r, "X-Stolen") == [] for r in obs.requests())

    refused = {r["file"]: r["problems"] for r in p.process.status()["sandboxes"]["refused"]}
    where = "5:19: network.allowlist[0].transform.X-Stolen"
    assert refused == {
        "envy.yaml": [
            f"{where}: ${{{SECRET_ENV}}} is refused in a sandbox file: it would read the node "
            "proxy's environment"
        ],
        "thief.yaml": [
            f"{where}: ${{file:{secrets}/alpha/openai}} is outside this sandbox's secrets "
            f"({allowed(secrets, 'thief')})"
        ],
        "climber.yaml": [
            f"{where}: ${{file:{secrets}/climber/../alpha/openai}} is outside this sandbox's "
            f"secrets ({allowed(secrets, 'climber')})"
        ],
        "linked.yaml": [
            f"{where}: ${{file:{secrets}/linked/openai-link}} leads outside this sandbox's "
            f"secrets ({allowed(secrets, 'linked')})"
        ],
    }

    # Later, too: alpha's file rewritten to read gamma's secret is refused; alpha keeps
    # its last good policy (its own secret), and /status says why.
    loads = ("egress_sandbox_file_loads_total", (("result", "failed"),))
    before = p.process.scrape()[loads]
    (directory / "alpha.yaml").write_text(
        sandbox(secrets, "alpha", f"${{file:{secrets}/gamma/openai}}")
    )
    procs.wait_until(
        "alpha's new file refused",
        lambda: p.process.scrape()[loads] > before,
        timeout=10,
        child=p.process.child,
    )
    assert openai_as(p.view, "alpha", "/alpha-again").status == 200
    assert header_values(obs.requests()[-1], "Authorization") == [f"Bearer {OPENAI['alpha']}"]
    refused = {r["file"]: r["problems"] for r in p.process.status()["sandboxes"]["refused"]}
    assert refused["alpha.yaml"] == [
        f"5:63: network.allowlist[0].secrets[0].value: ${{file:{secrets}/gamma/openai}} is outside "
        f"this sandbox's secrets ({allowed(secrets, 'alpha')})"
    ]
    shown = json.dumps(p.process.status()) + p.view.proxy_stderr.read_text()
    assert p.view.secrets[0] not in shown and OPENAI["alpha"] not in shown
