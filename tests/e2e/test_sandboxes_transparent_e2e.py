"""End to end, sandboxes identified by source address in transparent mode (issue 23, 1.12).

The transparent topology of tests/e2e/test_transparent_e2e.py (a sandbox namespace whose
TCP the gateway's firewall redirects to the proxy), with the module's proxy replaced by a
node proxy serving a sandbox directory: a client no sandbox file claims is refused
`unknown_sandbox`; once a file claims the sandbox's address (a live change), its own
allowlist and transform apply.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import nsock, procs
from testbed.expect import assert_refused, header_values
from testbed.harness import AuditLines
from testbed.proxyproc import start_proxy
from testbed.transparent import METRICS_PORT, PROXY_PORT, REAL_IP, SANDBOX_IP
from tests.e2e.conftest import EGRESS_PROXY
from tests.e2e.test_transparent_e2e import Seen, Transparent, listener
from tests.e2e.test_transparent_e2e import tp as tp  # the topology, built for this module

pytestmark = pytest.mark.netns

NODE = f"""\
network:
  allowlist:
    - domain: "*.t.test"
    - domain: {REAL_IP}/32
sandboxes:
  directory: {{directory}}
  identify: [source_address]
"""

CLAIMING = f"""\
class: transparent
addresses: [{{address}}]
network:
  allowlist:
    - domain: other.t.test
      transform:
        X-Sandbox-Key: by-address-credential
    - domain: {REAL_IP}/32
"""


@pytest.fixture(scope="module")
def node(tp: Transparent, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The module's proxy replaced by a node proxy on the same ports; yields its directory."""
    base = tmp_path_factory.mktemp("node-transparent")
    directory = base / "sandboxes"
    directory.mkdir()
    (directory / "elsewhere.yaml").write_text(CLAIMING.format(address="198.18.99.99"))
    config = base / "node.yaml"
    config.write_text(NODE.format(directory=directory))
    tp.proxy.child.stop()
    env = {k: v for k, v in os.environ.items() if not k.startswith("E2E_")}
    gateway = tp.topo.exec_prefix(tp.topo.ns_gateway)
    proxy = start_proxy(
        "tp-node-proxy",
        gateway,
        EGRESS_PROXY,
        config,
        ["--mode", "transparent", "--listen", f"0.0.0.0:{PROXY_PORT}"]
        + ["--metrics", f"0.0.0.0:{METRICS_PORT}", "--certs", str(tp.proxy_ca.parent)]
        + ["--upstream-ca", str(tp.upstream_ca), "--watch-interval", "0.2"],
        base,
        env,
        lambda: nsock.connect(tp.topo.ns_gateway, ("127.0.0.1", METRICS_PORT), timeout=5),
    )
    tp.proxy = proxy
    try:
        yield directory
    finally:
        proxy.child.stop()


@pytest.fixture
def seen(tp: Transparent) -> Seen:
    return Seen(tp, (tp.upstream_log.mark(), tp.raw_log.mark(), tp.trap_log.mark()))


def test_an_unclaimed_address_is_unknown_then_a_new_file_claims_it(
    tp: Transparent, node: Path, seen: Seen
) -> None:
    with tp.tls(REAL_IP, "other.t.test") as conn:
        assert_refused(tp.request(conn, "other.t.test", "/unknown"), "unknown_sandbox")
    with tp.plain(REAL_IP) as conn:
        assert_refused(tp.request(conn, "other.t.test", "/unknown-plain"), "unknown_sandbox")
    seen.assert_nothing_reached()

    (node / "mine.yaml").write_text(CLAIMING.format(address=SANDBOX_IP))
    key = ("egress_sandboxes", ())
    procs.wait_until("two sandboxes", lambda: tp.proxy.scrape().get(key) == 2, timeout=10)
    with tp.tls(REAL_IP, "other.t.test") as conn:
        response = tp.request(conn, "other.t.test", "/mine")
    assert response.status == 200, response.describe()
    record = seen.only_request(listener(REAL_IP, 443))
    assert header_values(record, "X-Sandbox-Key") == ["by-address-credential"]
    with tp.tls(REAL_IP, "api.t.test") as conn:  # inside the node's ceiling, not its own
        assert_refused(tp.request(conn, "api.t.test", "/not-mine"), "not_allowlisted")
    audit = AuditLines(tp.proxy.audit).text()
    assert '"sandbox":"mine"' in audit
