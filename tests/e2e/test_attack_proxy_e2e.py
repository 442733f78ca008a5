"""A fresh attacker's review of the refusal answers and the secret spellings (D520-D529).

Each test drives the real proxy of the session (tests/e2e/conftest.py) with real
clients over real TLS: raw HTTP/1 bytes (testbed/rawhttp.py) and h2 frames. The
findings a test pins say which decision fixed them; the others pin attacks that held.
"""

from __future__ import annotations

import socket
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import hyperframe.frame
import pytest

from sandbox_egress.proxy.values.redact import mask
from testbed import procs
from testbed.expect import Observed, assert_refused, header_values
from testbed.harness import Harness, JsonLines
from testbed.netns import UPSTREAM_IP, Topology
from testbed.rawhttp import Conn, request_bytes
from testbed.testca import Pki
from tests.e2e.conftest import PrivateProxy

pytestmark = pytest.mark.both_paths

REFUSED = "http://notlisted.test/upload"
SMUGGLED = "/smuggled-after-refusal"


def _read_to_close(conn: Conn, within: float) -> tuple[bytes, bool]:
    """Every byte the proxy sends until it closes (True) or `within` seconds pass (False)."""
    data, deadline = b"", time.monotonic() + within
    while time.monotonic() < deadline:
        conn.sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            got = conn.sock.recv(65536)
        except TimeoutError:
            break
        except OSError:
            return data, True
        if not got:
            return data, True
        data += got
    return data, False


# Chunked bodies of a refused upload, each followed on the same connection by a request
# for an allowed host: mitmproxy's parser reads the body (extensions, trailers, a chunk
# size of 20 hex digits, a size that is not hex) and must never take the bytes after it
# for a request of its own.
CHUNKED_BODIES = {
    "trailers": b"5\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n",
    "extensions": b"5;name=value\r\nhello\r\n0;last\r\n\r\n",
    "bad-size": b"zz\r\nhello\r\n0\r\n\r\n",
    "huge-size": b"ffffffffffffffffffff\r\nhello",
    "lying-length": b"",  # Content-Length says more than is ever sent
}


@pytest.mark.parametrize("framing", sorted(CHUNKED_BODIES))
def test_no_request_is_read_out_of_a_refused_body(harness: Harness, framing: str) -> None:
    obs = Observed.start(harness)
    if framing == "lying-length":
        head = [("Host", "notlisted.test"), ("Content-Length", str(1 << 30))]
    else:
        head = [("Host", "notlisted.test"), ("Transfer-Encoding", "chunked")]
    pipelined = request_bytes(
        "GET", f"http://other.allowed.test{SMUGGLED}", [("Host", "other.allowed.test")]
    )
    with harness.conn() as conn:
        conn.send(request_bytes("POST", REFUSED, head) + CHUNKED_BODIES[framing] + pipelined)
        data, closed = _read_to_close(conn, 4.0)
    head_text, _, body = data.partition(b"\r\n\r\n")
    assert head_text.startswith(b"HTTP/1.1 403 "), data[:300]
    assert b"X-Egress-Denied: not_allowlisted" in head_text
    assert b"Connection: close" in head_text
    assert data.count(b"HTTP/1.1 ") == 1, data  # one answer: the pipelined bytes were body
    assert body.endswith(b'"host": "notlisted.test"}\n'), body
    assert closed or framing in ("huge-size", "lying-length"), data  # those linger (D351)
    assert obs.requests() == [] and obs.traps() == []


def test_an_echo_in_a_transfer_coded_answer_never_reaches_the_sandbox(harness: Harness) -> None:
    """D520: `Transfer-Encoding: gzip, chunked` carries the injected value compressed; the
    body matcher sees only gzip, and the sandbox can inflate it. Such an answer to an
    injected request is dropped, as a compressed `Content-Encoding` one is (D99)."""
    secret = harness.secrets[0]
    obs = Observed.start(harness)
    with harness.tunnel("api.allowed.test:443") as conn:
        conn.send(
            request_bytes(
                "GET",
                "/echo-compressed?name=Authorization&te=1",
                [("Host", "api.allowed.test"), ("Connection", "close")],
            )
        )
        data, _ = _read_to_close(conn, 5.0)
    sent = obs.only_request()
    assert ["Authorization", f"Bearer {secret}"] in sent["headers"]  # it was injected
    inflated = b""
    if b"\x1f\x8b" in data:
        inflated = zlib.decompressobj(31).decompress(data[data.index(b"\x1f\x8b") :])
    assert secret.encode() not in inflated, "the injected value reached the sandbox gzipped"
    assert not data.startswith(b"HTTP/1.1 200"), data[:300]


def test_a_value_in_a_header_name_is_secret_elsewhere(harness: Harness) -> None:
    """D521: a resolved value written as a header's name went to another host (only
    values were searched); HTTP/1 keeps a name's bytes as sent."""
    secret = harness.secrets[0]
    obs = Observed.start(harness)
    response = harness.https("other.allowed.test:443", "/", [(f"X-{secret}", "1")])
    assert_refused(response, "secret_elsewhere", host="other.allowed.test")
    obs.assert_nothing_reached()


def _h2_client(sock: socket.socket) -> h2.connection.H2Connection:
    client = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
    )
    client.initiate_connection()
    sock.sendall(client.data_to_send())
    return client


def test_many_refused_http2_uploads_and_data_after_their_reset(harness: Harness) -> None:
    """50 streams refused at once with their bodies still to come, then 1.25 MB of DATA
    the client sends on them anyway after the proxy ended them: each stream gets the
    product's 403, nothing reaches an upstream, and the connection still serves."""
    secret = harness.secrets[0]
    obs = Observed.start(harness)
    authority = "other.allowed.test"
    with harness.tunnel(f"{authority}:443", alpn=["h2"]) as conn:
        sock, client = conn.sock, _h2_client(conn.sock)
        ids = []
        for _ in range(50):
            stream = client.get_next_available_stream_id()
            head = [(":method", "POST"), (":path", "/up"), (":scheme", "https")]
            client.send_headers(stream, [*head, (":authority", authority), ("x-leak", secret)])
            ids.append(stream)
        sock.sendall(client.data_to_send())
        statuses: dict[int, str] = {}
        bodies: dict[int, bytes] = {i: b"" for i in ids}
        ended: set[int] = set()
        deadline = time.monotonic() + 10
        sock.settimeout(10)
        while ended != set(ids) and time.monotonic() < deadline:
            data = sock.recv(65536)
            assert data, "the proxy closed the connection"
            for event in client.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    statuses[event.stream_id] = dict(event.headers)[":status"]
                elif isinstance(event, h2.events.DataReceived):
                    bodies[event.stream_id] += event.data
                    client.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded | h2.events.StreamReset):
                    ended.add(event.stream_id)
            sock.sendall(client.data_to_send())
        assert statuses == {i: "403" for i in ids}
        assert all(b'"reason": "secret_elsewhere"' in bodies[i] for i in ids)
        for stream in ids[:20]:  # raw frames: h2 itself would not send on an ended stream
            for _ in range(4):
                frame = hyperframe.frame.DataFrame(stream)
                frame.data = b"x" * 16000
                sock.sendall(frame.serialize())
        after = client.get_next_available_stream_id()
        head = [(":method", "GET"), (":path", "/after"), (":scheme", "https")]
        client.send_headers(after, [*head, (":authority", authority)], end_stream=True)
        sock.sendall(client.data_to_send())
        status = None
        while status is None and time.monotonic() < deadline + 10:
            data = sock.recv(65536)
            assert data, "the proxy closed the connection after data on ended streams"
            for event in client.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived) and event.stream_id == after:
                    status = dict(event.headers)[":status"]
                elif isinstance(event, h2.events.DataReceived):
                    client.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            sock.sendall(client.data_to_send())
    assert status == "200"
    assert [r["target"] for r in obs.requests()] == ["/after"]


MCP_CONFIG = """\
network:
  allowlist:
    - domain: api.allowed.test
      transform: {Authorization: "Bearer ${E2E_SECRET}"}
    - domain: x.wild.test                 # the echo upstream, through intercepted TLS
      mcp:
        endpoint: ["/mcp"]
        tools: [search_repositories]
    - domain: 198.18.1.0/24               # opens the upstreams' range (198.18/15 is reserved)
"""


def _json_mixed(value: str) -> str:
    """Every other character as a JSON `\\u` escape: any JSON decoder reads the value."""
    return "".join(f"\\u{ord(c):04x}" if i % 2 else c for i, c in enumerate(value))


@pytest.mark.parametrize("spelling", ["raw", "json-mixed"])
def test_a_value_in_a_held_mcp_body_is_refused_however_json_escapes_it(
    private_proxy: Callable[..., PrivateProxy], obs: Observed, spelling: str
) -> None:
    """D523: the MCP server JSON-decodes the arguments; a value with some characters
    `\\u`-escaped went through, since only encoders' whole spellings were searched."""
    view = private_proxy("attack-mcp", MCP_CONFIG)
    secret = view.view.secrets[0]
    written = secret if spelling == "raw" else _json_mixed(secret)
    body = (
        '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"search_repositories",'
        f'"arguments":{{"query":"{written}"}}}}}}'
    ).encode()
    with view.view.tunnel("x.wild.test:443") as conn:
        response = conn.request(
            "POST", "/mcp", [("Host", "x.wild.test"), ("Content-Type", "application/json")], body
        )
    assert_refused(response, "secret_elsewhere", host="x.wild.test")
    assert obs.requests() == []


H2_PORT = 9443  # testbed/h2_echo.py, HTTP/2 only, started here (module scope)


@pytest.fixture(scope="module")
def h2_upstream(topology: Topology, pki: Pki, e2e_dir: Path) -> Iterator[JsonLines]:
    log, ready = e2e_dir / "atk-h2-echo.jsonl", e2e_dir / "atk-h2-echo.ready"
    log.touch()
    argv = topology.exec_prefix(topology.ns_upstream) + [
        sys.executable, "-m", "testbed.h2_echo", "--log", str(log), "--ready", str(ready),
        "--cert", str(pki.server_cert), "--key", str(pki.server_key),
        "--listen", f"{UPSTREAM_IP}:{H2_PORT}", "--alpn", "h2",
    ]  # fmt: skip
    child = procs.start("atk-h2-echo-upstream", argv, e2e_dir)
    try:
        procs.wait_until("h2 echo upstream ready", ready.exists, timeout=15, child=child)
        yield JsonLines(log)
    finally:
        child.stop()


@pytest.mark.parametrize("carried", ["value", "placeholder-free"])
def test_a_value_in_request_trailers_never_reaches_another_host(
    harness: Harness, h2_upstream: JsonLines, carried: str
) -> None:
    """D524: HTTP/2 request trailers are header fields the upstream reads, sent after the
    body streamed (too late to refuse): a block holding a resolved value is dropped, the
    request goes on without it; a block without one goes on."""
    secret = harness.secrets[0]
    value = f"v={secret}" if carried == "value" else "v=plain"
    authority = f"other.allowed.test:{H2_PORT}"
    mark = h2_upstream.mark()
    with harness.tunnel(authority, alpn=["h2"]) as conn:
        sock, client = conn.sock, _h2_client(conn.sock)
        head = [(":method", "POST"), (":path", "/upload"), (":scheme", "https")]
        client.send_headers(1, [*head, (":authority", authority), ("te", "trailers")])
        client.send_data(1, b"body bytes")
        client.send_headers(1, [("x-checksum", value)], end_stream=True)
        sock.sendall(client.data_to_send())
        status, deadline = None, time.monotonic() + 10
        sock.settimeout(10)
        while status is None and time.monotonic() < deadline:
            data = sock.recv(65536)
            assert data, "the proxy closed the connection"
            for event in client.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    status = dict(event.headers)[":status"]
            sock.sendall(client.data_to_send())
    assert status == "200"
    requests = [e for e in h2_upstream.wait_count(mark, 2) if e["event"] == "request"]
    assert len(requests) == 1 and requests[0]["body_len"] == len(b"body bytes")
    if carried == "value":
        assert "trailers" not in requests[0], requests[0]
    else:
        assert requests[0]["trailers"] == [["x-checksum", "v=plain"]]


WS_PORT = 9451  # testbed/ws_echo.py, started here (module scope)


@pytest.fixture(scope="module")
def ws_upstream(topology: Topology, pki: Pki, e2e_dir: Path) -> Iterator[JsonLines]:
    log, ready = e2e_dir / "atk-ws.jsonl", e2e_dir / "atk-ws.ready"
    log.touch()
    argv = topology.exec_prefix(topology.ns_upstream) + [
        sys.executable, "-m", "testbed.ws_echo", "--log", str(log), "--ready", str(ready),
        "--cert", str(pki.server_cert), "--key", str(pki.server_key),
        "--listen", f"{UPSTREAM_IP}:{WS_PORT}",
    ]  # fmt: skip
    child = procs.start("atk-ws-echo-upstream", argv, e2e_dir)
    try:
        procs.wait_until("ws echo upstream ready", ready.exists, timeout=15, child=child)
        yield JsonLines(log)
    finally:
        child.stop()


def test_a_websocket_message_echoing_the_injected_value_is_masked(
    harness: Harness, ws_upstream: JsonLines
) -> None:
    """D525: a WebSocket upgrade carries the transform like any request; a server that
    reflects it in a message reached the sandbox unmasked (messages were never scanned)."""
    from websockets.sync.client import connect

    secret = harness.secrets[0]
    mark = ws_upstream.mark()
    with harness.tunnel(f"api.allowed.test:{WS_PORT}") as conn:
        url = f"ws://api.allowed.test:{WS_PORT}/echo-header?name=Authorization"
        with connect(url, sock=conn.sock, open_timeout=20) as ws:
            text, binary = ws.recv(timeout=20), ws.recv(timeout=20)
            ws.send(f"the sandbox's own {secret[:6]}")
            own = ws.recv(timeout=20)
    upgrade = ws_upstream.wait_count(mark, 1)[0]
    assert ["Authorization", f"Bearer {secret}"] in upgrade["headers"]  # it was injected
    assert isinstance(text, str) and isinstance(binary, bytes)
    hidden = mask(len(f"Bearer {secret}"))  # the whole injected value, same length
    assert text == f"text before;{hidden.decode()};after"
    assert binary == b"binary before;" + hidden + b";after"
    assert own == f"the sandbox's own {secret[:6]}"  # the sandbox's messages go unchanged


def test_a_switch_nobody_asked_for_does_not_relay_the_injected_value(harness: Harness) -> None:
    """D526: an upstream answering 101 to a request that asked for no upgrade made
    mitmproxy relay raw TCP both ways, unscanned (to an address entry's range)."""
    secret = harness.secrets[0]
    obs = Observed.start(harness)
    with harness.tunnel("api.allowed.test:443") as conn:
        conn.send(
            request_bytes("GET", "/echo-switch?name=Authorization", [("Host", "api.allowed.test")])
        )
        data, _ = _read_to_close(conn, 5.0)
    assert ["Authorization", f"Bearer {secret}"] in obs.only_request()["headers"]
    assert data == b"", data  # the switch dropped: the connection closed unanswered


def test_an_answer_field_named_after_the_injected_value_is_dropped(harness: Harness) -> None:
    """D527: header redaction replaced values only; a field whose name held the value
    reached the sandbox (a name cannot hold `[redacted]`: the field is dropped)."""
    secret = harness.secrets[0]
    obs = Observed.start(harness)
    response = harness.https("api.allowed.test:443", "/echo-header-name?name=X-Api-Key")
    assert header_values(obs.only_request(), "X-Api-Key") == [secret]  # it was injected
    assert response.status == 200, response.describe()
    assert response.header("X-Echo-Server") == "e2e"
    assert not [n for n, _ in response.headers if secret.lower() in n.lower()], response.headers


HTML_SECRET = "tok&en<e2e>\"q'0123456789"
HTML_CONFIG = """\
network:
  allowlist:
    - domain: api.allowed.test
      transform:
        X-Api-Key: 'tok&en<e2e>"q''0123456789'
    - domain: 198.18.1.0/24
"""


@pytest.mark.parametrize("enc", ["html", "html-39"])
def test_an_html_escaped_echo_of_the_injected_value_is_masked(
    private_proxy: Callable[..., PrivateProxy], obs: Observed, enc: str
) -> None:
    """D522: a page that echoes the value writes `&amp;`, `&lt;`, `&#39;`..."""
    import html

    view = private_proxy("attack-html", HTML_CONFIG).view
    escaped = html.escape(HTML_SECRET)
    if enc == "html-39":
        escaped = escaped.replace("&#x27;", "&#39;").replace("&quot;", "&#34;")
    response = view.https("api.allowed.test:443", f"/echo-body?name=X-Api-Key&enc={enc}&chunk=5")
    assert header_values(obs.only_request(), "X-Api-Key") == [HTML_SECRET]  # injected
    assert response.status == 200, response.describe()
    assert escaped.encode() not in response.body
    assert f'"echoed": "{mask(len(escaped)).decode()}"'.encode() in response.body


def test_a_reason_phrase_echoing_the_injected_value_is_replaced(harness: Harness) -> None:
    """D528: the status line's reason phrase is the upstream's text too; an echo there
    reached an HTTP/1 sandbox as sent."""
    secret = harness.secrets[0]
    obs = Observed.start(harness)
    response = harness.https("api.allowed.test:443", "/echo-reason?name=X-Api-Key")
    assert header_values(obs.only_request(), "X-Api-Key") == [secret]
    assert response.status == 401
    assert response.reason == "Unauthorized", response.reason
