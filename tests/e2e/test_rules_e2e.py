"""End to end, rules inside an allowed host (docs/configuration.md#rules): the real proxy decides each request
by method, path and query — HTTP/1 on a kept-alive connection inside a tunnel, plain
HTTP, HTTP/2 streams, and a WebSocket upgrade — and an ambiguous path never reaches the
upstream. Transparent mode: tests/e2e/test_transparent_e2e.py (rules section)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from testbed.expect import Observed, assert_refused
from testbed.h2client import exchange
from testbed.rawhttp import Response
from tests.e2e.conftest import PrivateProxy, fast_pathing

pytestmark = pytest.mark.netns


@pytest.fixture
def private_proxy(
    private_proxy: Callable[..., PrivateProxy], fast_path: bool
) -> Callable[..., PrivateProxy]:
    """Every proxy of this module's tests, with the fast path off and on (issue 49, D612)."""
    return fast_pathing(private_proxy, fast_path)


CONFIG = """\
network:
  allowlist:
    - domain: api.allowed.test
      rules:
        - methods: [GET, HEAD]
        - methods: [POST]
          paths: ["/repos/acme/*/issues", "/repos/acme/*/issues/**"]
      deny:
        - paths: ["/user/keys", "/user/keys/**"]
    - domain: other.allowed.test
      rules:
        - paths: ["/@acme%2f*"]
      allow_encoded_slash: true
    - domain: 198.18.1.0/24            # the upstreams' range (internal: opened explicitly)
"""


def test_each_request_of_a_kept_alive_connection_is_decided(
    private_proxy: Callable[..., PrivateProxy], obs: Observed
) -> None:
    p = private_proxy("rules-h1", CONFIG)
    mark = p.view.audit_log.mark()
    with p.view.tunnel("api.allowed.test:443") as conn:
        host = [("Host", "api.allowed.test")]
        statuses = [
            conn.request("GET", "/repos/acme/web", host),
            conn.request("POST", "/repos/acme/web/issues", host, b"{}"),
            conn.request("POST", "/repos/evil/web/issues", host, b"{}"),
            conn.request("GET", "/user/keys", host),
            conn.request("GET", "/user/%6beys/1", host),
            conn.request("DELETE", "/repos/acme/web", host),
            conn.request("GET", "/repos/acme/web", host),
        ]
    assert [r.status for r in statuses[:2]] == [200, 200]
    assert_refused(statuses[2], "rule_mismatch")
    assert_refused(statuses[3], "rule_denied")
    assert_refused(statuses[4], "rule_denied")
    assert_refused(statuses[5], "rule_mismatch")
    assert statuses[6].status == 200
    assert [r["target"] for r in obs.requests()] == [
        "/repos/acme/web",
        "/repos/acme/web/issues",
        "/repos/acme/web",
    ]
    lines = [a for a in p.view.audit_log.wait_count(mark, 8) if a["method"] != "CONNECT"]
    assert [(a["reason"], a.get("clause")) for a in lines] == [
        ("allowlisted", "rules[0]"),
        ("allowlisted", "rules[1]"),
        ("rule_mismatch", None),
        ("rule_denied", "deny[0]"),
        ("rule_denied", "deny[0]"),
        ("rule_mismatch", None),
        ("allowlisted", "rules[0]"),
    ]
    engine = p.process.status()["engine"]
    if "fastpath" in engine["patches"]:  # the three kept-alive GETs went below the layers
        assert engine["fast"] == {"requests": 3, "upstream": 1}, engine
    else:
        assert "fast" not in engine


@pytest.mark.parametrize(
    "target", ["/user/./keys", "//user/keys", "/user%2fkeys", "/x/%2e%2e/user/keys", "/a\\..\\b"]
)
def test_an_ambiguous_path_never_reaches_the_upstream(
    private_proxy: Callable[..., PrivateProxy], obs: Observed, target: str
) -> None:
    p = private_proxy("rules-ambiguous", CONFIG)
    assert_refused(p.view.https("api.allowed.test:443", target), "bad_request")
    obs.assert_nothing_reached()


def test_plain_http_is_decided_too(
    private_proxy: Callable[..., PrivateProxy], obs: Observed
) -> None:
    p = private_proxy("rules-plain", CONFIG)
    refused = p.view.plain("http://api.allowed.test/user/keys", method="GET")
    assert_refused(refused, "rule_denied")
    assert p.view.plain("http://api.allowed.test/ok").status == 200
    assert [r["target"] for r in obs.requests()] == ["/ok"]


def test_http2_streams_are_decided_one_by_one(
    private_proxy: Callable[..., PrivateProxy], obs: Observed
) -> None:
    p = private_proxy("rules-h2", CONFIG)
    authority = "api.allowed.test:443"

    def get(path: str, method: str = "GET") -> list[tuple[str, str]]:
        return [(":method", method), (":scheme", "https"), (":authority", authority),
                (":path", path)]  # fmt: skip

    with p.view.tunnel(authority, alpn=["h2"]) as conn:
        assert conn.sock.selected_alpn_protocol() == "h2"
        result = exchange(conn.sock, [get("/fine"), get("/user/keys"), get("/x", "DELETE")])
    assert [result.status(i) for i in (1, 3, 5)] == ["200", "403", "403"]
    assert result.headers[3]["x-egress-denied"] == "rule_denied"
    assert result.headers[5]["x-egress-denied"] == "rule_mismatch"
    assert [r["target"] for r in obs.requests()] == ["/fine"]


def websocket_upgrade(p: PrivateProxy, path: str) -> Response:
    with p.view.tunnel("api.allowed.test:443") as conn:
        return conn.request(
            "GET",
            path,
            [("Host", "api.allowed.test"), ("Upgrade", "websocket"), ("Connection", "Upgrade"),
             ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="), ("Sec-WebSocket-Version", "13")],
        )  # fmt: skip


def test_a_websocket_upgrade_is_decided_by_the_rules(
    private_proxy: Callable[..., PrivateProxy], obs: Observed
) -> None:
    p = private_proxy("rules-ws", CONFIG)
    assert_refused(websocket_upgrade(p, "/user/keys/stream"), "rule_denied")
    obs.assert_nothing_reached()


def test_npm_scoped_names_pass_with_allow_encoded_slash(
    private_proxy: Callable[..., PrivateProxy], obs: Observed
) -> None:
    p = private_proxy("rules-npm", CONFIG)
    assert p.view.https("other.allowed.test:443", "/@acme%2fleft-pad").status == 200
    assert_refused(p.view.https("other.allowed.test:443", "/@evil%2fleft-pad"), "rule_mismatch")
    assert [r["target"] for r in obs.requests()] == ["/@acme%2fleft-pad"]
