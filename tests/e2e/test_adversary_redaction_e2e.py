"""End to end, an upstream that reflects the injected credential back (issue 10, item 6).

The upstream is the echo server (testbed/echo_server.py: `/echo-location`,
`/echo-body`) or, for HTTP/2 trailers, testbed/h2_echo.py (HTTP/2 only) started here in
the upstream namespace. Each test first checks that the secret did reach the upstream
(so the echo is real), then that the sandbox reads no spelling of it. The percent and
case tests use a proxy of their own whose secret holds the bytes encoders change.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest

from testbed import procs
from testbed.expect import Observed, assert_refused, header_values
from testbed.h2client import exchange
from testbed.harness import Harness, JsonLines
from testbed.netns import UPSTREAM_IP, Topology
from testbed.testca import Pki
from tests.e2e.conftest import PrivateProxy

pytestmark = [pytest.mark.netns, pytest.mark.both_paths]

H2_PORT = 9443
H2_SERVER = ["-m", "testbed.h2_echo"]
# 27 bytes: a whole number of base64 groups, so its base64 echo is redacted whole.
ODD_SECRET = f"e2e/To+en= {secrets.token_hex(8)}"
ODD_CONFIG = f"""\
network:
  allowlist:
    - domain: api.allowed.test
      transform:
        X-Api-Key: "{ODD_SECRET}"
    - domain: 198.18.1.0/24
"""
LOCATION = "https://cb.test/back?token=[redacted]&next=%2Fhome"


def masked(length: int) -> bytes:
    """What replaces a secret of `length` (>= 10) bytes in a body (docs/decisions.md D32)."""
    return b"[redacted" + b"*" * (length - 10) + b"]"


def body_echo(value: bytes) -> bytes:
    """The body `/echo-body` sends around an echoed value (see echo_server.echo_body)."""
    return (
        b'{"pad": "' + b"p" * 61 + b'", "echoed": "' + value + b'", "tail": "' + b"t" * 70 + b'"}'
    )


@pytest.fixture(scope="module")
def shared_odd_proxy(module_private_proxy) -> PrivateProxy:  # type: ignore[no-untyped-def]
    return module_private_proxy("odd-secret", ODD_CONFIG)


@pytest.fixture
def odd_proxy(shared_odd_proxy: PrivateProxy) -> PrivateProxy:
    """The module's proxy with the odd secret (issue 49, D641: masking keeps no state
    between requests), once no connection of an earlier test is open in it."""
    shared_odd_proxy.wait_idle()
    return shared_odd_proxy


@pytest.fixture(scope="module")
def h2_upstream(topology: Topology, pki: Pki, e2e_dir: Path) -> Iterator[JsonLines]:
    log, ready = e2e_dir / "h2-echo.jsonl", e2e_dir / "h2-echo.ready"
    log.touch()
    argv = topology.exec_prefix(topology.ns_upstream) + [
        sys.executable, *H2_SERVER, "--log", str(log), "--ready", str(ready),
        "--cert", str(pki.server_cert), "--key", str(pki.server_key),
        "--listen", f"{UPSTREAM_IP}:{H2_PORT}", "--alpn", "h2",
    ]  # fmt: skip
    child = procs.start("h2-echo-upstream", argv, e2e_dir)
    try:
        procs.wait_until("h2 echo upstream ready", ready.exists, timeout=15, child=child)
        yield JsonLines(log)
    finally:
        child.stop()


# -- headers ---------------------------------------------------------------------------


@pytest.mark.parametrize("enc", ["pct", "pct-lower", "form", "upper", "lower", "b64"])
def test_encoded_echo_in_location_is_redacted(odd_proxy: PrivateProxy, obs: Observed, enc: str):
    response = odd_proxy.view.https(
        "api.allowed.test:443", f"/echo-location?name=X-Api-Key&enc={enc}"
    )

    assert header_values(obs.only_request(), "X-Api-Key") == [ODD_SECRET]
    assert response.status == 302, response.describe()
    assert response.header_all("Location") == [LOCATION]


def test_case_changed_echo_of_the_session_secret_is_redacted(harness: Harness, obs: Observed):
    response = harness.https("api.allowed.test:443", "/echo-location?name=Authorization&enc=upper")

    assert header_values(obs.only_request(), "Authorization") == [f"Bearer {harness.secrets[0]}"]
    assert response.status == 302, response.describe()
    assert response.header_all("Location") == [LOCATION]


def test_http2_trailers_echoing_the_secret_are_redacted(harness: Harness, h2_upstream: JsonLines):
    mark = h2_upstream.mark()
    with harness.tunnel(f"api.allowed.test:{H2_PORT}", alpn=["h2"]) as conn:
        assert conn.sock.selected_alpn_protocol() == "h2"  # type: ignore[attr-defined]
        result = exchange(
            conn.sock,
            [
                [
                    (":method", "GET"),
                    (":scheme", "https"),
                    (":authority", f"api.allowed.test:{H2_PORT}"),
                    (":path", "/trailers?name=authorization"),
                    ("te", "trailers"),
                ]
            ],
        )

    events = h2_upstream.wait_count(mark, 2)  # the handshake, then the request
    assert [(e["event"], e.get("alpn")) for e in events] == [("tls", "h2"), ("request", None)]
    record = events[1]
    assert header_values(record, "authorization") == [f"Bearer {harness.secrets[0]}"]
    assert result.status(1) == "200", result.headers
    assert result.bodies[1] == b"trailers follow\n"
    assert result.trailers[1] == [
        ("x-echoed", "[redacted]"),
        ("x-echoed-pct", "[redacted]"),
        ("x-echoed-upper", "[redacted]"),
    ]


# -- bodies ----------------------------------------------------------------------------


@pytest.mark.parametrize("frame", ["chunked", "length"])
@pytest.mark.parametrize("name", ["X-Api-Key", "Authorization"])
def test_body_echo_split_across_chunks_is_masked(
    harness: Harness, obs: Observed, frame: str, name: str
):
    response = harness.https(
        "api.allowed.test:443", f"/echo-body?name={name}&chunk=7&frame={frame}"
    )

    injected = header_values(obs.only_request(), name)
    assert len(injected) == 1
    assert harness.secrets[0] in injected[0]
    assert response.status == 200, response.describe()
    # Same length as the echo, so a Content-Length stays true.
    assert response.body == body_echo(masked(len(injected[0])))


BODY_SPELLINGS = {
    "json-slash": json.dumps(ODD_SECRET)[1:-1].replace("/", "\\/"),
    "json-u": "".join(f"\\u{ord(c):04X}" if c in '"\\/' else c for c in ODD_SECRET),
    "pct-lowhex": re.sub("%[0-9A-F]{2}", lambda m: m[0].lower(), quote(ODD_SECRET, safe="")),
    "form": quote_plus(ODD_SECRET),
    "b64": base64.b64encode(ODD_SECRET.encode()).decode(),
    "b64url": base64.urlsafe_b64encode(ODD_SECRET.encode()).decode().rstrip("="),
}


@pytest.mark.parametrize("sse", ["0", "1"], ids=["json", "server-sent events"])
@pytest.mark.parametrize("enc", BODY_SPELLINGS.keys())
def test_body_echo_in_another_spelling_is_masked(
    odd_proxy: PrivateProxy, obs: Observed, enc: str, sse: str
):
    """Issue 43: a body echo JSON-escaped (`\\/`) reached the sandbox; so did every
    spelling but the raw bytes. Sent in 7-byte writes, so the value spans several."""
    response = odd_proxy.view.https(
        "api.allowed.test:443", f"/echo-body?name=X-Api-Key&chunk=7&enc={enc}&sse={sse}"
    )

    assert header_values(obs.only_request(), "X-Api-Key") == [ODD_SECRET]
    assert response.status == 200, response.describe()
    spelled = BODY_SPELLINGS[enc].encode()
    expected = body_echo(masked(len(spelled)))
    if sse == "1":
        expected = b"data: " + expected + b"\n\ndata: [DONE]\n\n"
    assert response.body == expected


def test_body_echo_to_a_host_without_transform_is_untouched(harness: Harness):
    # The control: the echo does carry the value back when nothing was injected.
    response = harness.https(
        "other.allowed.test:443", "/echo-body?name=X-Visible&chunk=5", [("X-Visible", "v" * 30)]
    )

    assert response.status == 200, response.describe()
    assert response.body == body_echo(b"v" * 30)


# -- methods whose answer is the request ----------------------------------------------


@pytest.mark.parametrize("method", ["TRACE", "TRACK"])
def test_trace_to_a_transform_host_is_refused_before_the_upstream(
    harness: Harness, obs: Observed, method: str
):
    response = harness.https("api.allowed.test:443", "/trace", method=method)

    assert_refused(response, "method_not_allowed", host="api.allowed.test")
    obs.assert_nothing_reached()


def test_trace_to_a_host_without_transform_is_forwarded(harness: Harness, obs: Observed):
    response = harness.https("other.allowed.test:443", "/trace", method="TRACE")

    assert response.status == 200, response.describe()
    assert obs.only_request()["method"] == "TRACE"
