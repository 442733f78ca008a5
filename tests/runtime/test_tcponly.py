"""A run loads neither aioquic, mitmproxy's QUIC and HTTP/3 layers nor mitmproxy_rs, and a
QUIC or UDP path that is reached anyway fails with a clear error (issue 36, D297). Each check runs in a fresh
interpreter: this process (pytest, other tests) has imported mitmproxy whole."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox_egress.runtime.engine import tcponly

REPO = Path(__file__).resolve().parents[2]


def _child(code: str, timeout: float = 120) -> list[object]:
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return list(json.loads(done.stdout.splitlines()[-1]))


# What launcher.serve imports for the lean engine, in its order (see test_addonimports.py).
RUN_IMPORTS = """
import asyncio, json, sys
import sandbox_egress.runtime.cli
from sandbox_egress.runtime import launcher
from sandbox_egress.runtime.engine import tcponly
from sandbox_egress.runtime.engine.addonimports import import_addons_one_by_one
import_addons_one_by_one()
installed = tcponly.install()
from mitmproxy.addons.termlog import TermLog
from sandbox_egress.addons.connections import Connections
from sandbox_egress.addons.egress import EgressPolicy
from sandbox_egress.addons.layers.limits import Limits
from sandbox_egress.addons.telemetry import CountingAudit, Telemetry
from sandbox_egress.addons.upstream import UpstreamFailures

async def engine():
    return type(launcher._engine("lean")[1]).__name__
made = asyncio.run(engine())
"""


def test_a_run_maps_no_aioquic_nor_mitmproxy_rs_and_imports_only_stand_ins() -> None:
    code = RUN_IMPORTS + (
        "maps = open('/proc/self/maps').read()\n"
        "quic = sorted(n for n in sys.modules if tcponly.covered(n))\n"
        "real = [n for n in quic if not tcponly.is_stand_in(sys.modules[n])]\n"
        "from mitmproxy.proxy.layers import http\n"
        "print(json.dumps([installed, made, [n for n in ('aioquic', 'pylsqpack', 'mitmproxy_rs')\n"
        "    if n in maps], real,\n"
        "    'aioquic.h3.connection' in quic, tcponly.is_stand_in(sys.modules[http.Http3Client.__module__])]))\n"
    )
    installed, made, mapped, real, h3, http3 = _child(code)
    assert (installed, made) == (True, "LeanMaster")
    # No file of aioquic, pylsqpack or mitmproxy_rs is mapped: neither their compiled code
    # nor their .py modules were loaded; what mitmproxy imported of them are stand-ins.
    assert (mapped, real) == ([], [])
    assert (h3, http3) == (True, True)  # tlsconfig's H3_ALPN, the HTTP layer's Http3Client


def test_reaching_a_quic_name_raises_quic_unavailable() -> None:
    code = RUN_IMPORTS + (
        "from mitmproxy.proxy.layers import quic\n"
        "from mitmproxy.proxy.layers.http import Http3Client\n"
        "from mitmproxy.addons import tlsconfig\n"
        "from mitmproxy.proxy import events\n"
        "from types import SimpleNamespace\n"
        "import mitmproxy_rs\n"
        "found = []\n"
        "for attempt in (lambda: quic.ServerQuicLayer(None), lambda: Http3Client(None),\n"
        "                lambda: tlsconfig.CipherSuite['AES_128_GCM_SHA256'],\n"
        "                lambda: tlsconfig.TlsConfig().quic_start_client(SimpleNamespace(settings=None)),\n"
        "                lambda: mitmproxy_rs.udp.open_udp_connection('localhost', 53)):\n"
        "    try:\n"
        "        attempt()\n"
        "        found.append('no error')\n"
        "    except tcponly.TcpOnly as exc:\n"
        "        found.append(str(exc))\n"
        "found.append(isinstance(events.DataReceived(None, b''), quic.QuicStreamEvent))\n"
        "print(json.dumps(found))\n"
    )
    *errors, matched = _child(code)
    tail = (
        ": egress-proxy speaks TCP only; QUIC, HTTP/3 and mitmproxy's UDP, WireGuard, local "
        "and TUN modes are not loaded (D297)"
    )
    assert errors == [
        f"mitmproxy.proxy.layers.quic.ServerQuicLayer{tail}",
        f"mitmproxy.proxy.layers.http._http3.Http3Client{tail}",
        f"aioquic.tls.CipherSuite['AES_128_GCM_SHA256']{tail}",
        f"mitmproxy.proxy.layers.quic.QuicTlsSettings{tail}",
        f"mitmproxy_rs.udp.open_udp_connection{tail}",
    ]
    assert matched is False  # isinstance against a stand-in: never true


# An upstream that picks ALPN "h3" over TCP sends mitmproxy's HTTP layer to its HTTP/3
# client: the one QUIC path a TCP proxy can reach. The lean engine runs in the child
# (loopback, no policy: the engine alone), the client asks for h3 too.
H3_OVER_TCP = """
import asyncio, json, logging, ssl, sys, tempfile
from pathlib import Path
from sandbox_egress.runtime.engine import tcponly
from sandbox_egress.runtime.engine.addonimports import import_addons_one_by_one
import_addons_one_by_one()
tcponly.install()
from sandbox_egress.runtime.engine.lean import LeanMaster, LeanOptions
from testbed.fixed_upstream import FixedResponse, server_context

crashes = []
class Keep(logging.Handler):
    def emit(self, record):
        if record.exc_info:
            crashes.append([record.getMessage(), type(record.exc_info[1]).__name__,
                            str(record.exc_info[1])])
logging.getLogger().addHandler(Keep())

async def main(work):
    tls = server_context(work)
    tls.set_alpn_protocols(["h3"])
    up = await asyncio.get_running_loop().create_server(
        FixedResponse.serving(b"HTTP/1.1 200 OK\\r\\nContent-Length: 2\\r\\n\\r\\nok"),
        "127.0.0.1", 0, ssl=tls)
    up_port = up.sockets[0].getsockname()[1]
    opts = LeanOptions()
    master = LeanMaster(opts)
    opts.update(listen_host="127.0.0.1", listen_port=0, confdir=str(work / "conf"),
                ssl_insecure=True, connection_strategy="lazy")
    runner = asyncio.create_task(master.run())
    server = master.addons.get("proxyserver")
    while not server.listen_addrs():
        await asyncio.sleep(0.02)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.listen_addrs()[0][1])
    writer.write(b"CONNECT localhost:%d HTTP/1.1\\r\\nHost: localhost\\r\\n\\r\\n" % up_port)
    head = await reader.readuntil(b"\\r\\n\\r\\n")
    client = ssl.create_default_context()
    client.check_hostname, client.verify_mode = False, ssl.CERT_NONE
    client.set_alpn_protocols(["h3"])
    await writer.start_tls(client, server_hostname="localhost")
    alpn = writer.get_extra_info("ssl_object").selected_alpn_protocol()
    writer.write(b"GET / HTTP/1.1\\r\\nHost: localhost\\r\\n\\r\\n")
    for _ in range(1500):  # the crash is logged once the request's bytes arrive
        if crashes:
            break
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.2)
    received = bytes(reader._buffer)
    master.shutdown()
    await runner
    up.close()
    print(json.dumps([head.split(b"\\r\\n")[0].decode(), alpn, received.decode(), crashes]))

with tempfile.TemporaryDirectory() as work:
    asyncio.run(main(Path(work)))
"""


def test_a_connection_that_negotiates_h3_over_tcp_gets_the_clear_error() -> None:
    connected, alpn, received, crashes = _child(H3_OVER_TCP)
    assert (connected, alpn) == ("HTTP/1.1 200 Connection established", "h3")
    # mitmproxy's HTTP layer made its HTTP/3 server for the client: TcpOnly, logged
    # by mitmproxy as a crash of that connection, and no response. (With aioquic loaded
    # the same connection crashed too: "Unexpected command: SendQuicStreamData", D297.)
    message = (
        "mitmproxy.proxy.layers.http._http3.Http3Server: egress-proxy speaks TCP only; QUIC, "
        "HTTP/3 and mitmproxy's UDP, WireGuard, local and TUN modes are not loaded (D297)"
    )
    assert crashes == [["mitmproxy has crashed!", "TcpOnly", message]]
    assert received == ""


def test_install_leaves_a_process_that_has_quic_alone() -> None:
    code = (
        "import json, sys\n"
        "import mitmproxy.proxy.layers\n"
        "from sandbox_egress.runtime.engine import tcponly\n"
        "print(json.dumps([tcponly.install(), tcponly.is_stand_in(sys.modules['aioquic']),\n"
        "    any(isinstance(f, tcponly.StandInFinder) for f in sys.meta_path)]))\n"
    )
    assert _child(code) == [False, False, False]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("aioquic", True),
        ("aioquic.h3.connection", True),
        ("aioquicx", False),
        ("mitmproxy.proxy.layers.quic._hooks", True),
        ("mitmproxy.proxy.layers.http", False),
        ("mitmproxy.proxy.layers.http._http3", True),
        ("mitmproxy.proxy.layers.http._http2", False),
        ("pylsqpack", True),
        ("mitmproxy_rs", True),
        ("mitmproxy_rs.udp", True),
        ("mitmproxy", False),
    ],
)
def test_covered(name: str, expected: bool) -> None:
    assert tcponly.covered(name) is expected


def test_a_stand_in_has_no_dunder_names() -> None:
    module = tcponly.StandInModule("aioquic.example")
    made = module.Thing
    assert module.Thing is made and made.__qualname__ == "aioquic.example.Thing"
    assert made.Inner is made.Inner and made.Inner.__qualname__ == "aioquic.example.Thing.Inner"
    assert not isinstance(object(), made.Inner)
    assert getattr(module, "__wrapped__", None) is None
    assert getattr(made, "__origin__", None) is None
    assert (made | int).__args__ == (made, int)  # usable in an annotation's union
