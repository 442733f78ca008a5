"""End to end, what the proxy lets through: allowlist matches, token transformation,
redaction, kept-alive connections and HTTP/2, checked on what the upstream received.

The client is this process (the sandbox); the proxy and the upstreams run in network
namespaces built by `conftest.py`. Upstream records come from the echo servers' log.
"""

from __future__ import annotations

import time

import h2.config as h2_config
import h2.connection as h2_connection
import h2.events as h2_events
import pytest

from testbed.expect import Observed, assert_refused, header_values
from testbed.harness import Harness
from testbed.netns import UPSTREAM_IP
from testbed.rawhttp import chunked
from tests.e2e.conftest import FAST_PATH

pytestmark = [pytest.mark.netns, pytest.mark.both_paths]

TRANSFORM_HEADERS = ("authorization", "x-api-key")


def secret(h: Harness) -> str:
    return h.secrets[0]


def file_secret(h: Harness) -> str:
    return h.secrets[1]


# -- token transformation -------------------------------------------------------


def test_transform_replaces_every_case_variant_and_duplicate(harness: Harness, obs: Observed):
    sandbox_headers = [
        ("Authorization", "Bearer sandbox-one"),
        ("authorization", "Bearer sandbox-two"),
        ("X-API-KEY", "sandbox-key"),
        ("x-api-key", "sandbox-key-2"),
        ("X-Kept", "kept"),
    ]
    response = harness.https("api.allowed.test:443", "/inject", sandbox_headers)

    assert response.status == 200, response.describe()
    record = obs.only_request()
    assert (record["listener"], record["sni"], record["target"]) == (
        f"{UPSTREAM_IP}:443",
        "api.allowed.test",
        "/inject",
    )
    assert header_values(record, "Authorization") == [f"Bearer {secret(harness)}"]
    assert header_values(record, "X-Api-Key") == [secret(harness)]
    assert header_values(record, "X-Kept") == ["kept"]
    assert "sandbox-" not in str(record["headers"])


def test_transform_added_when_the_sandbox_sends_none(harness: Harness, obs: Observed):
    response = harness.https("api.allowed.test:443", "/no-header")

    assert response.status == 200, response.describe()
    record = obs.only_request()
    assert header_values(record, "Authorization") == [f"Bearer {secret(harness)}"]
    assert header_values(record, "X-Api-Key") == [secret(harness)]


@pytest.mark.parametrize(
    "host_header",
    ["api.allowed.test", "API.Allowed.TEST", "api.allowed.test.", "api.allowed.test:443"],
)
def test_host_header_spellings_of_the_tunnel_target_are_the_same_host(
    harness: Harness, obs: Observed, host_header: str
):
    response = harness.https("api.allowed.test:443", "/spelling", host=host_header)

    assert response.status == 200, response.describe()
    assert header_values(obs.only_request(), "Authorization") == [f"Bearer {secret(harness)}"]


def test_transform_applies_on_any_allowed_port(harness: Harness, obs: Observed):
    response = harness.https("api.allowed.test:8443", "/port-8443")

    assert response.status == 200, response.describe()
    record = obs.only_request()
    assert record["listener"] == f"{UPSTREAM_IP}:8443"
    assert header_values(record, "Authorization") == [f"Bearer {secret(harness)}"]


@pytest.mark.parametrize("authority", ["other.allowed.test:443", "x.wild.test:443"])
def test_no_transform_for_a_host_whose_entry_has_none(
    harness: Harness, obs: Observed, authority: str
):
    response = harness.https(authority, "/own", [("Authorization", "Bearer sandbox-own")])

    assert response.status == 200, response.describe()
    record = obs.only_request()
    assert record["sni"] == authority.split(":")[0]
    assert header_values(record, "Authorization") == ["Bearer sandbox-own"]
    assert header_values(record, "X-Api-Key") == []
    assert all(s not in str(record) for s in harness.secrets)


def test_plain_http_to_a_host_without_transform_passes_untouched(harness: Harness, obs: Observed):
    response = harness.plain(
        "http://other.allowed.test/plain?q=1", [("Authorization", "Bearer sandbox-own")]
    )

    assert response.status == 200, response.describe()
    record = obs.only_request()
    assert (record["listener"], record["tls"], record["method"], record["target"]) == (
        f"{UPSTREAM_IP}:80",
        False,
        "GET",
        "/plain?q=1",
    )
    assert header_values(record, "Host") == ["other.allowed.test"]
    assert header_values(record, "Authorization") == ["Bearer sandbox-own"]
    assert all(s not in str(record) for s in harness.secrets)


def test_allow_plaintext_entry_gets_its_transform_over_plain_http(harness: Harness, obs: Observed):
    response = harness.plain(
        "http://plain.allowed.test/plaintext",
        [("x-plain-token", "sandbox-a"), ("X-Plain-Token", "sandbox-b")],
    )

    assert response.status == 200, response.describe()
    record = obs.only_request()
    assert record["tls"] is False
    # The value comes from ${file:...}, with the file's trailing newline stripped.
    assert header_values(record, "X-Plain-Token") == [file_secret(harness)]


def test_plaintext_transform_host_is_refused_over_plain_http(harness: Harness, obs: Observed):
    response = harness.plain("http://api.allowed.test/leak", [("Authorization", "Bearer x")])

    assert_refused(response, "plaintext_credentials", host="api.allowed.test")
    obs.assert_nothing_reached()


# -- what the upstream sends back -------------------------------------------------


@pytest.mark.parametrize("echoed", TRANSFORM_HEADERS)
def test_injected_value_echoed_in_a_response_header_is_redacted(
    harness: Harness, obs: Observed, echoed: str
):
    response = harness.https("api.allowed.test:443", f"/echo-header?name={echoed}")

    assert response.status == 200, response.describe()
    record = obs.only_request()
    assert secret(harness) in str(header_values(record, echoed))  # it was injected...
    for name, value in response.headers:  # ...and is in no header the sandbox sees
        assert secret(harness) not in name, (name, value)
        assert secret(harness) not in value, (name, value)


def test_echoed_header_that_is_not_a_secret_passes_unchanged(harness: Harness):
    # The control for the redaction tests: the echo does copy the header back.
    response = harness.https(
        "other.allowed.test:443", "/echo-header?name=X-Visible", [("X-Visible", "plain-value")]
    )

    assert response.status == 200, response.describe()
    assert response.header_all("X-Echoed") == ["plain-value"]
    assert response.header_all("X-Echoed-Embedded") == ["before;plain-value;after"]


def test_file_secret_echoed_over_plain_http_is_redacted(harness: Harness, obs: Observed):
    response = harness.plain("http://plain.allowed.test/echo-header?name=X-Plain-Token")

    assert response.status == 200, response.describe()
    assert header_values(obs.only_request(), "X-Plain-Token") == [file_secret(harness)]
    for name, value in response.headers:
        assert file_secret(harness) not in name + value, (name, value)


@pytest.mark.parametrize("scheme", ["https", "http"])
def test_upstream_x_egress_denied_header_is_stripped(harness: Harness, obs: Observed, scheme: str):
    if scheme == "https":
        response = harness.https("other.allowed.test:443", "/fake-denied")
    else:
        response = harness.plain("http://other.allowed.test/fake-denied")

    assert response.status == 200, response.describe()
    assert obs.only_request()["target"] == "/fake-denied"
    assert response.header_all("X-Egress-Denied") == [], response.describe()


# -- addresses opened by IP/CIDR entries -------------------------------------------


def test_cidr_entry_opens_an_ip_literal_over_plain_http(harness: Harness, obs: Observed):
    response = harness.plain(f"http://{UPSTREAM_IP}/cidr")

    assert response.status == 200, response.describe()
    assert obs.only_request()["listener"] == f"{UPSTREAM_IP}:80"


def test_cidr_entry_opens_an_ip_literal_tunnel_without_sni(harness: Harness, obs: Observed):
    # No SNI is allowed when the destination address itself is opened by an IP/CIDR entry.
    with harness.tunnel(f"{UPSTREAM_IP}:443", sni=None) as conn:
        response = harness.remember(conn.request("GET", "/cidr-tls", [("Host", UPSTREAM_IP)]))

    assert response.status == 200, response.describe()
    record = obs.only_request()
    assert (record["listener"], record["tls"]) == (f"{UPSTREAM_IP}:443", True)
    assert header_values(record, "Authorization") == []


def test_wildcard_entry_and_exact_ports_entry(harness: Harness, obs: Observed):
    assert harness.https("x.wild.test:443", "/wild").status == 200
    assert harness.https("ports.allowed.test:8443", "/ports").status == 200

    listeners = [(r["sni"], r["listener"]) for r in obs.requests()]
    assert listeners == [
        ("x.wild.test", f"{UPSTREAM_IP}:443"),
        ("ports.allowed.test", f"{UPSTREAM_IP}:8443"),
    ]


def test_name_with_a_loopback_and_an_upstream_address_never_reaches_loopback(
    harness: Harness, obs: Observed
):
    # mixed.allowed.test resolves to 127.0.0.1 first, then to the upstream. Refusing the
    # name or using the checked upstream address are both correct; the trap is not.
    outcomes = []
    for attempt in range(3):
        response = harness.plain(f"http://mixed.allowed.test/mixed-{attempt}")
        if response.status != 200:
            assert_refused(response, "loopback")
        outcomes.append(response.status)
    assert obs.traps() == []
    assert len(obs.requests()) == outcomes.count(200)


# -- connections that carry several requests ---------------------------------------


def test_plain_keep_alive_connection_decides_each_request(harness: Harness, obs: Observed):
    with harness.conn() as conn:
        first = harness.remember(
            conn.request("GET", "http://other.allowed.test/ka-1", [("Host", "other.allowed.test")])
        )
        second = harness.remember(
            conn.request("GET", "http://notlisted.test/ka-2", [("Host", "notlisted.test")])
        )

    assert first.status == 200, first.describe()
    assert_refused(second, "not_allowlisted", host="notlisted.test")
    assert [r["target"] for r in obs.requests()] == ["/ka-1"]


def test_tunnel_keep_alive_second_request_for_another_host_is_refused(
    harness: Harness, obs: Observed
):
    with harness.tunnel("api.allowed.test:443") as conn:
        first = harness.remember(conn.request("GET", "/ka-1", [("Host", "api.allowed.test")]))
        second = harness.remember(
            conn.request(
                "GET",
                "/ka-2",
                [("Host", "other.allowed.test"), ("Authorization", "Bearer sandbox")],
            )
        )

    assert first.status == 200, first.describe()
    assert_refused(second, "host_mismatch")
    assert [r["target"] for r in obs.requests()] == ["/ka-1"]


def test_tunnel_keep_alive_every_request_is_transformed(harness: Harness, obs: Observed):
    taken = _fast_taken(harness)
    with harness.tunnel("api.allowed.test:443") as conn:
        for n in (1, 2):
            headers = [("Host", "api.allowed.test"), ("authorization", f"Bearer sandbox-{n}")]
            response = harness.remember(conn.request("GET", f"/again-{n}", headers))
            assert response.status == 200, response.describe()

    records = obs.requests()
    assert [r["target"] for r in records] == ["/again-1", "/again-2"]
    for record in records:
        assert header_values(record, "Authorization") == [f"Bearer {secret(harness)}"]
    # Pinning must not cost keep-alive: both requests came over one upstream connection.
    assert records[0]["peer"] == records[1]["peer"]
    # The second request is the kind the fast path takes: taken when the suite runs on it
    # (`make test`'s both_paths run, D720), through the layers otherwise.
    assert _fast_taken(harness) == (taken + 1 if FAST_PATH else None)


def _fast_taken(harness: Harness) -> int | None:
    """How many reads the session proxy's fast path took; None: it runs without one."""
    fast = harness.status()["engine"].get("fast")
    return None if fast is None else int(fast["requests"])


def test_streamed_chunked_upload_is_transformed_and_complete(harness: Harness, obs: Observed):
    size = 8 * 1024 * 1024
    headers = [("Transfer-Encoding", "chunked"), ("Authorization", "Bearer sandbox")]
    response = harness.https(
        "api.allowed.test:443", "/upload", headers, method="POST", body=chunked(b"u" * size)
    )

    assert response.status == 200, response.describe()
    record = obs.only_request()
    assert record["body_len"] == size
    assert header_values(record, "Authorization") == [f"Bearer {secret(harness)}"]


def test_http2_streams_are_each_decided_and_transformed(harness: Harness, obs: Observed):
    with harness.tunnel("api.allowed.test:443", alpn=["h2"]) as conn:
        assert conn.sock.selected_alpn_protocol() == "h2"  # type: ignore[attr-defined]
        client = h2_connection.H2Connection(
            h2_config.H2Configuration(client_side=True, header_encoding="utf-8")
        )
        client.initiate_connection()
        for stream_id, authority, path in [
            (1, "api.allowed.test", "/h2-same"),
            (3, "other.allowed.test", "/h2-other"),
        ]:
            client.send_headers(
                stream_id,
                [
                    (":method", "GET"),
                    (":scheme", "https"),
                    (":authority", authority),
                    (":path", path),
                    ("authorization", "Bearer sandbox-h2"),
                ],
                end_stream=True,
            )
        conn.sock.sendall(client.data_to_send())

        headers: dict[int, dict[str, str]] = {}
        bodies: dict[int, bytes] = {1: b"", 3: b""}
        ended: set[int] = set()
        deadline = time.monotonic() + 10
        while ended != {1, 3} and time.monotonic() < deadline:
            data = conn.sock.recv(65536)
            if not data:
                break
            for event in client.receive_data(data):
                if isinstance(event, h2_events.ResponseReceived):
                    headers[event.stream_id] = dict(event.headers)
                elif isinstance(event, h2_events.DataReceived):
                    bodies[event.stream_id] += event.data
                    client.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2_events.StreamEnded | h2_events.StreamReset):
                    ended.add(event.stream_id)
            conn.sock.sendall(client.data_to_send())

    assert ended == {1, 3}, (headers, bodies)
    assert headers[1][":status"] == "200", headers
    assert headers[3][":status"] == "403", headers
    assert headers[3].get("x-egress-denied") == "host_mismatch", headers
    assert b'"host_mismatch"' in bodies[3]
    record = obs.only_request()
    assert record["target"] == "/h2-same"
    assert header_values(record, "Authorization") == [f"Bearer {secret(harness)}"]
