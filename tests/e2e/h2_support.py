"""What the scripted-HTTP/2-upstream tests share (test_h2_goaway_e2e.py,
test_goaway_attack_e2e.py, test_relay_h2_attack_e2e.py; the allowlist also
test_fastpath_attack_e2e.py).

* `allowlist(...)`: the configuration these modules' proxies run: api.allowed.test with the
  session's credential injected (`Authorization: Bearer ${E2E_SECRET}`), then the
  upstreams' range; `CONFIG` is it with nothing more.
* `h2_upstream(...)`: a scripted TLS upstream (testbed/h2script.py) in the upstream
  namespace, closed when the block ends; `goaway`, `answer` and `refuse` are frames its
  scripts write.
* `h2_client(...)`: an h2 client (testbed/h2stream.py) on a tunnel through a proxy;
  `unique(...)`: a request path of one test's own (the upstreams' scripts remember paths).

The proxies with the body relay off and on come from the conftest's module fixture
`module_relaying` (beside `body_relay` and `relaying`), found there by every module.
"""

from __future__ import annotations

import contextlib
import itertools
import struct
from collections.abc import Iterator

from testbed.h2script import END_STREAM, GOAWAY, RST_STREAM, H2Script, data, frame, headers
from testbed.h2stream import H2Stream
from testbed.netns import UPSTREAM_IP, Topology
from testbed.testca import Pki
from tests.e2e.conftest import PrivateProxy
from tests.e2e.memory_support import h2_tunnel

NO_ERROR, REFUSED_STREAM = 0, 7
UPSTREAMS = "198.18.1.0/24"  # the upstreams' range (198.18/15 is reserved)
_SERIAL = itertools.count()


def allowlist(*api: str, others: tuple[str, ...] = ()) -> str:
    """The configuration: api.allowed.test, injecting the session's credential, with `api`
    (YAML lines of that entry, as indented under `domain:`), then the domains `others`,
    then the upstreams' range."""
    lines = [
        "network:",
        "  allowlist:",
        "    - domain: api.allowed.test",
        "      transform:",
        '        Authorization: "Bearer ${E2E_SECRET}"',
        *(f"      {line}" for line in api),
        *(f"    - domain: {domain}" for domain in (*others, UPSTREAMS)),
    ]
    return "\n".join(lines) + "\n"


CONFIG = allowlist()


@contextlib.contextmanager
def h2_upstream[Server: H2Script](
    topology: Topology, pki: Pki, port: int, kind: type[Server]
) -> Iterator[Server]:
    """`kind` (an `H2Script`) listening on UPSTREAM_IP:`port` with the session's server
    certificate; closed when the block ends."""
    server = kind(
        topology.ns_upstream, (UPSTREAM_IP, port), str(pki.server_cert), str(pki.server_key)
    )
    try:
        yield server
    finally:
        server.close()


@contextlib.contextmanager
def h2_client(proxy: PrivateProxy, authority: str, timeout: float) -> Iterator[H2Stream]:
    """An h2 client on a tunnel through `proxy` to `authority`, each read bounded by
    `timeout` seconds; the tunnel closed when the block ends."""
    with h2_tunnel(proxy, authority) as tunnel:
        tunnel.sock.settimeout(timeout)
        yield H2Stream(tunnel.sock)


def unique(name: str) -> str:
    return f"/{name}/{next(_SERIAL)}"


def goaway(last: int, error: int = NO_ERROR) -> bytes:
    return frame(GOAWAY, 0, 0, struct.pack(">II", last, error))


def answer(sid: int, body: bytes) -> bytes:
    return headers(sid, [(":status", "200")]) + data(sid, body, END_STREAM)


def refuse(sid: int, error: int = REFUSED_STREAM) -> bytes:
    """RST_STREAM for `sid`: REFUSED_STREAM (not processed) unless `error` says otherwise."""
    return frame(RST_STREAM, 0, sid, struct.pack(">I", error))
