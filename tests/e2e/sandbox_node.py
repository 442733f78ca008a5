"""A node proxy serving a directory of sandbox files, for the sandboxes' e2e suites (issue 23).

The node's own entries admit `*.allowed.test` and the upstreams' range; each sandbox
file is written to `<tmp_path>/sandboxes/<name>.yaml` (its `SECRETS` replaced by the
node's secrets directory, where there is one), and a sandbox is identified by
`Proxy-Authorization: Basic` (`basic`). Used by test_sandboxes_e2e.py,
test_sandbox_attacks_e2e.py, test_sandboxes_ceiling_e2e.py and test_sandbox_files_e2e.py.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from pathlib import Path

from testbed import procs
from testbed.harness import Harness
from testbed.rawhttp import Response
from tests.e2e.conftest import PrivateProxy

NODE = """\
network:
  allowlist:
    - domain: "*.allowed.test"
    - domain: 198.18.1.0/24
sandboxes:
  directory: {directory}
{secrets}  identify: [{identify}]
"""


def basic(user: str, token: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()


def write_sandboxes(tmp_path: Path, files: Mapping[str, str], secrets: Path | None = None) -> Path:
    """The sandbox files (name: text) in a new directory `tmp_path/sandboxes`; that directory."""
    directory = tmp_path / "sandboxes"
    directory.mkdir()
    for name, text in files.items():
        if secrets is not None:
            text = text.replace("SECRETS", str(secrets))
        (directory / f"{name}.yaml").write_text(text)
    return directory


def node_config(directory: Path, identify: str = "proxy_auth", secrets: Path | None = None) -> str:
    held = "" if secrets is None else f"  secrets: {secrets}\n"
    return NODE.format(directory=directory, identify=identify, secrets=held)


def node_proxy(
    private_proxy: Callable[..., PrivateProxy], tmp_path: Path, identify: str, **files: str
) -> tuple[PrivateProxy, Path]:
    """The node watching its directory every 0.2 s; (the proxy, the directory)."""
    directory = write_sandboxes(tmp_path, files)
    node = node_config(directory, identify)
    return private_proxy("node", node, "--watch-interval", "0.2"), directory


def node_with_secrets(
    private_proxy: Callable[..., PrivateProxy], tmp_path: Path, **files: str
) -> tuple[PrivateProxy, Path]:
    """As `node_proxy` with `proxy_auth`, and a secrets directory; (the proxy, secrets)."""
    secrets = tmp_path / "secrets"
    secrets.mkdir(exist_ok=True)
    directory = write_sandboxes(tmp_path, files, secrets)
    node = node_config(directory, secrets=secrets)
    return private_proxy("node", node, "--watch-interval", "0.2"), secrets


def request_as(
    view: Harness, credential: str, host: str, headers: list[tuple[str, str]]
) -> Response:
    """CONNECT with the credential (its answer when refused), TLS, one GET with `headers`."""
    with view.conn() as conn:
        response = conn.connect(f"{host}:443", [("Proxy-Authorization", credential)])
        if response.status != 200:
            return response
        conn.start_tls(view.client_tls(), host)
        return conn.request("GET", "/", [("Host", host), *headers])


def wait_loads(p: PrivateProxy, result: str, count: float) -> None:
    key = ("egress_sandbox_file_loads_total", (("result", result),))
    procs.wait_until(
        f"{count} sandbox file loads {result}",
        lambda: p.process.scrape().get(key, 0) >= count,
        timeout=10,
        child=p.process.child,
    )
