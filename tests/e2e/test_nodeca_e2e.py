"""End to end, a node proxy that holds only its intermediate CA (issue 35, D256): the real
`egress-proxy run` with `--certs` a directory `egress-proxy ca --intermediate-of` wrote, and
real clients (curl, Python's ssl) that trust only the fleet root. They accept the leaves
the proxy mints, chained through the node's intermediate; a name-constrained intermediate's
leaf for another name is refused by the client before any request reaches the upstream.
"""

from __future__ import annotations

import dataclasses
import ssl
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from testbed.expect import Observed
from tests.e2e.conftest import EGRESS_PROXY, PrivateProxy

pytestmark = pytest.mark.netns

CONFIG = """\
network:
  allowlist:
    - domain: api.allowed.test
    - domain: 198.18.1.0/24               # the test upstream's address (not a public one)
"""


def egress_ca(*args: str) -> str:
    done = subprocess.run(
        [str(EGRESS_PROXY), "ca", *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fleet root, as on the operator's machine: its key never goes to the proxy."""
    directory = tmp_path_factory.mktemp("fleet-root")
    egress_ca("--certs", str(directory))
    return directory


def node_proxy(
    private_proxy: Callable[..., PrivateProxy], root: Path, node_dir: Path, *permit: str
) -> PrivateProxy:
    flags = [f"--permit={d}" for d in permit]
    trusted = egress_ca("--intermediate-of", str(root), "--name", "node-a", "--certs",
                        str(node_dir), *flags)  # fmt: skip
    assert Path(trusted).read_bytes() == (root / "mitmproxy-ca-cert.pem").read_bytes()
    p = private_proxy("node-ca", CONFIG, "--certs", str(node_dir))
    # the sandbox's view: it trusts the root's certificate and nothing else
    return dataclasses.replace(
        p, view=dataclasses.replace(p.view, proxy_ca=root / "mitmproxy-ca-cert.pem")
    )


def curl(p: PrivateProxy, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}",
         "--cacert", str(p.view.proxy_ca),
         "-x", f"http://{p.view.proxy_host}:{p.view.proxy_port}", url],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_clients_trusting_only_the_root_accept_a_node_proxys_leaves(
    private_proxy: Callable[..., PrivateProxy], root: Path, tmp_path: Path, obs: Observed
) -> None:
    p = node_proxy(private_proxy, root, tmp_path / "node-a")
    assert b"PRIVATE KEY" not in (tmp_path / "node-a" / "mitmproxy-ca-cert.pem").read_bytes()
    done = curl(p, "https://api.allowed.test/by-curl")
    assert (done.returncode, done.stdout) == (0, "200"), done.stderr
    with p.view.tunnel("api.allowed.test:443") as conn:
        assert isinstance(conn.sock, ssl.SSLSocket)
        peer: Any = conn.sock.getpeercert()
        issuer = dict(x[0] for x in peer["issuer"])
        response = conn.request("GET", "/by-python", [("Host", "api.allowed.test")])
    assert response.status == 200
    assert issuer["commonName"] == "sandbox egress node CA node-a"
    assert [r["target"] for r in obs.requests()] == ["/by-curl", "/by-python"]


def test_a_name_constrained_node_cannot_mint_for_other_names(
    private_proxy: Callable[..., PrivateProxy], root: Path, tmp_path: Path, obs: Observed
) -> None:
    p = node_proxy(private_proxy, root, tmp_path / "node-a", "elsewhere.test")
    done = curl(p, "https://api.allowed.test/constrained")
    assert done.returncode == 60, (done.returncode, done.stderr)  # peer certificate refused
    with pytest.raises(ssl.SSLCertVerificationError):
        p.view.https("api.allowed.test:443", "/constrained-python")
    assert obs.requests() == []
