"""An attacker's round on `--fast-path` (issue 49, D630-D636): hostile kept-alive requests
inside an intercepted TLS tunnel, each sent to a proxy with the fast path off and to one
with it on, and compared exactly.

Each case opens a fresh tunnel to `api.allowed.test` (the echo upstream, which injects a
credential and denies `/denied/**`), sends a plain GET first (so that the hostile request
is a kept-alive one, the only kind the fast path takes), then the hostile bytes, and reads
what comes back until the proxy answers or closes. The oracle is differential: the status
and reason the client sees, the `X-Egress-Denied` reason code, the request head the
upstream received (the echo's `head_b64`, byte for byte) and the audit line's decision
fields must be equal both ways.
"""

from __future__ import annotations

import concurrent.futures
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testbed.harness import JsonLines
from testbed.netns import Topology
from testbed.testca import Pki
from tests.e2e.conftest import PrivateProxy, script_upstreams
from tests.e2e.h2_support import allowlist

pytestmark = [pytest.mark.netns]

HOST = "api.allowed.test"
CONFIG = allowlist("deny:", '  - paths: ["/denied/**"]', others=('"*.allowed.test"',))
WARM = b"GET /warm HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n"
# The audit fields that carry a decision (not times, ids or ports).
AUDITED = (
    "method", "host", "port", "decision", "reason", "rule", "injected", "status",
    "bytes_sent", "bytes_received", "sni", "upstream", "clause", "path",
)  # fmt: skip


Side = PrivateProxy  # a proxy of the module's own: its process, the harness seen through it


@pytest.fixture(scope="module")
def sides(module_private_proxy: Callable[..., PrivateProxy]) -> list[Side]:
    """Two proxies of this module's own: the fast path off, then on."""
    return [
        module_private_proxy("fpattack", CONFIG),
        module_private_proxy("fpattack", CONFIG, "--fast-path"),
    ]


def _read_answers(conn: Any, deadline: float) -> list[tuple[Any, ...]]:
    """Every answer the proxy sends until it closes or is silent for `deadline` s."""
    answers: list[tuple[Any, ...]] = []
    conn.sock.settimeout(deadline)
    while True:
        try:
            response = conn.read_response()
        except (OSError, ValueError, ConnectionError, TimeoutError):
            return answers
        headers = {k.lower(): v for k, v in response.headers}
        seen: Any = None
        if response.status == 200 and response.body.startswith(b'{"'):
            record = json.loads(response.body)
            # the head as the upstream received it; its base64 text is compared as is (the
            # proxy masks the injected credential inside it, both ways)
            head = f"{record['method']} {record['target']} {record['version']}".encode()
            fields = tuple(tuple(pair) for pair in record["headers"])
            seen = (head, record["head_b64"], fields)
        answers.append((response.status, response.reason, headers.get("x-egress-denied"), seen))


def _exchange(
    side: Side,
    parts: list[bytes],
    pause: float = 0.03,
    sni: str = "",
    warm: bytes = WARM,
    authority: str = f"{HOST}:443",
) -> dict[str, Any]:
    """The warm GET, then `parts` written one TLS record each; what the client and the
    audit saw."""
    audit = side.view.audit_log
    mark = audit.mark()
    with side.view.tunnel(authority, sni=sni, check_hostname=not sni) as conn:
        conn.send(warm)
        first = conn.read_response()
        if sni == "":
            assert first.status == 200
        time.sleep(pause)  # an upstream that closes after its answer: its close seen first
        for part in parts:
            conn.send(part)
            time.sleep(pause)
        answers = _read_answers(conn, 1.0)
    time.sleep(0.2)
    lines = [
        tuple(line.get(k) for k in AUDITED)
        for line in audit.since(mark)
        if line.get("event") != "connection"
    ]
    return {
        "first": (first.status, first.header("x-egress-denied")),
        "answers": answers,
        "audit": lines,
    }


def _fast_taken(side: Side) -> int:
    return int(side.process.status()["engine"]["fast"]["requests"])


def differential(sides: list[Side], parts: list[bytes], **how: Any) -> dict[str, Any]:
    # both sides at once (their own proxies, audits and tunnels): half the wall time
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        off, on = pool.map(lambda side: _exchange(side, parts, **how), sides)
    assert on == off
    return off


def _echoed(outcome: dict[str, Any]) -> list[bytes]:
    return [a[3][0] for a in outcome["answers"] if a[3]]


# -- the fast path engages on a plain kept-alive GET, and decides alike --------------------------


def test_a_plain_kept_alive_get_is_taken_by_the_fast_path_and_seen_alike(sides: list[Side]):
    before = _fast_taken(sides[1])
    out = differential(sides, [b"GET /s/a?x=1 HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n"])
    assert _fast_taken(sides[1]) > before
    assert [a[0] for a in out["answers"]] == [200]
    assert _echoed(out) == [b"GET /s/a?x=1 HTTP/1.1"]
    fields = out["answers"][0][3][2]
    assert [name for name, _ in fields if name.lower() == "authorization"] == ["Authorization"]


def test_a_second_request_to_a_denied_path_is_refused_alike(sides: list[Side]):
    out = differential(sides, [b"GET /denied/x HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n"])
    assert [a[0] for a in out["answers"]] == [403]
    assert out["answers"][0][2]
    assert _echoed(out) == []


# -- spellings the fast path must leave to the layers, or decide as they do ----------------------

HOSTILE = {
    "pipelined": b"GET /p1 HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n"
    b"GET /denied/p2 HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n",
    "get_with_content_length": b"GET /b HTTP/1.1\r\nHost: api.allowed.test\r\nContent-Length: 5\r\n\r\nhello",
    "get_chunked": b"GET /b HTTP/1.1\r\nHost: api.allowed.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    "content_length_space_before_colon": b"GET /b HTTP/1.1\r\nHost: api.allowed.test\r\nContent-Length : 5\r\n\r\nhello",
    "transfer_encoding_tab_name": b"GET /b HTTP/1.1\r\nHost: api.allowed.test\r\nTransfer-Encoding\t: chunked\r\n\r\n0\r\n\r\n",
    "obs_fold": b"GET /f HTTP/1.1\r\nHost: api.allowed.test\r\nX-A: one\r\n two\r\n\r\n",
    "obs_fold_host": b"GET /f HTTP/1.1\r\nHost: api.allowed.test\r\n evil.test\r\n\r\n",
    "bare_lf": b"GET /lf HTTP/1.1\nHost: api.allowed.test\n\n",
    "mixed_lf": b"GET /lf HTTP/1.1\r\nHost: api.allowed.test\n\r\n",
    "duplicate_host": b"GET /d HTTP/1.1\r\nHost: api.allowed.test\r\nHost: other.allowed.test\r\n\r\n",
    "duplicate_host_denied_first": b"GET /d HTTP/1.1\r\nHost: evil.test\r\nHost: api.allowed.test\r\n\r\n",
    "host_other_allowed": b"GET /h HTTP/1.1\r\nHost: other.allowed.test\r\n\r\n",
    "host_denied": b"GET /h HTTP/1.1\r\nHost: evil.test\r\n\r\n",
    "host_with_port": b"GET /h HTTP/1.1\r\nHost: api.allowed.test:8443\r\n\r\n",
    "no_host": b"GET /h HTTP/1.1\r\n\r\n",
    "absolute_other": b"GET https://other.allowed.test/x HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n",
    "absolute_denied": b"GET https://evil.test/x HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n",
    "absolute_denied_path": b"GET https://api.allowed.test/denied/x HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n",
    "connect": b"CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n",
    "options_star": b"OPTIONS * HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n",
    "expect": b"GET /e HTTP/1.1\r\nHost: api.allowed.test\r\nExpect: 100-continue\r\n\r\n",
    "upgrade_ws": b"GET /u HTTP/1.1\r\nHost: api.allowed.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
    "upgrade_h2c": b"GET /u HTTP/1.1\r\nHost: api.allowed.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n",
    "upgrade_without_connection": b"GET /u HTTP/1.1\r\nHost: api.allowed.test\r\nUpgrade: websocket\r\n\r\n",
    "http10": b"GET /v HTTP/1.0\r\nHost: api.allowed.test\r\n\r\n",
    "http10_keep_alive": b"GET /v HTTP/1.0\r\nHost: api.allowed.test\r\nConnection: keep-alive\r\n\r\n",
    "connection_close": b"GET /c HTTP/1.1\r\nHost: api.allowed.test\r\nConnection: close\r\n\r\n"
    b"GET /c2 HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n",
    "connection_keep_alive_case": b"GET /c HTTP/1.1\r\nHost: api.allowed.test\r\nConnection: Keep-Alive\r\n\r\n",
    "two_connection_headers": b"GET /c HTTP/1.1\r\nHost: api.allowed.test\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n",
    "huge_header": b"GET /big HTTP/1.1\r\nHost: api.allowed.test\r\nX-Big: "
    + b"a" * 70000
    + b"\r\n\r\n",
    "header_just_under_16k": b"GET /big HTTP/1.1\r\nHost: api.allowed.test\r\nX-Big: "
    + b"a" * 16300
    + b"\r\n\r\n",
    "nul_in_value": b"GET /n HTTP/1.1\r\nHost: api.allowed.test\r\nX-N: a\x00b\r\n\r\n",
    "cr_in_value": b"GET /n HTTP/1.1\r\nHost: api.allowed.test\r\nX-N: a\rb\r\n\r\n",
    "cr_in_host": b"GET /n HTTP/1.1\r\nHost: api.allowed.test\revil.test\r\n\r\n",
    "extra_spaces": b"GET  /s HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n",
    "tab_in_request_line": b"GET\t/s HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n",
    "trailing_space_version": b"GET /s HTTP/1.1 \r\nHost: api.allowed.test\r\n\r\n",
    "lowercase_get": b"get /s HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n",
    "head": b"HEAD /hd HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n",
    "space_in_path": b"GET /a b HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n",
    "dotdot_denied": b"GET /x/../denied/y HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n",
    "pct_denied": b"GET /%64enied/y HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n",
    "client_authorization": b"GET /a HTTP/1.1\r\nHost: api.allowed.test\r\nAuthorization: Bearer mine\r\n\r\n",
    "te_trailers": b"GET /a HTTP/1.1\r\nHost: api.allowed.test\r\nTE: trailers\r\n\r\n",
    "empty_line_first": b"\r\nGET /a HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_second_request_is_decided_alike(sides: list[Side], name: str):
    differential(sides, [HOSTILE[name]])


def test_a_denied_request_pipelined_behind_an_allowed_one_never_reaches_the_upstream(
    sides: list[Side],
):
    out = differential(sides, [HOSTILE["pipelined"]])
    assert _echoed(out) == [b"GET /p1 HTTP/1.1"]
    assert [a[0] for a in out["answers"]] == [200, 403]


def test_a_host_that_disagrees_with_the_tunnel_is_refused_alike(sides: list[Side]):
    for name in ("host_denied", "absolute_denied", "duplicate_host_denied_first"):
        out = differential(sides, [HOSTILE[name]])
        assert _echoed(out) == [], name


REQUEST = b"GET /split/r?q=1 HTTP/1.1\r\nHost: api.allowed.test\r\nX-Pad: abc\r\n\r\n"


@settings(
    max_examples=10,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.integers(min_value=1, max_value=len(REQUEST) - 1))
def test_a_request_split_across_records_is_seen_alike(sides: list[Side], cut: int):
    out = differential(sides, [REQUEST[:cut], REQUEST[cut:]])
    assert _echoed(out) == [b"GET /split/r?q=1 HTTP/1.1"]


def test_requests_after_the_upstream_closed_are_decided_alike(sides: list[Side]):
    # `Connection: close` answered, then a request on the tunnel the upstream has left.
    out = differential(
        sides,
        [
            b"GET /c HTTP/1.1\r\nHost: api.allowed.test\r\nConnection: close\r\n\r\n",
            b"GET /after HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n",
        ],
    )
    assert out["answers"][0][0] == 200


@pytest.mark.parametrize(
    "sni, host",
    [
        ("other.allowed.test", "api.allowed.test"),  # fronting: SNI and Host disagree
        ("other.allowed.test", "other.allowed.test"),  # SNI and Host agree, CONNECT differs
        ("evil.test", "evil.test"),
    ],
)
def test_sni_host_and_connect_that_disagree_are_refused_alike(
    sides: list[Side], sni: str, host: str
):
    request = f"GET /front HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    out = differential(sides, [request], sni=sni, warm=request)
    assert out["first"][0] != 200 or out["answers"] == [] or out["answers"][0][0] != 200


SCRIPT_PORT = 9448
CLOSING = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


@pytest.fixture(scope="module")
def closing_upstream(topology: Topology, pki: Pki, e2e_dir: Path) -> Iterator[JsonLines]:
    """testbed/script_server.py: `/s/closing` answers, then closes its connection."""
    with script_upstreams(topology, pki, e2e_dir, "fp-script", {SCRIPT_PORT: True}) as up:
        (up.scripts / "closing.json").write_text(json.dumps([["send", CLOSING.hex()], ["close"]]))
        yield up.log


def test_requests_after_the_upstream_closed_its_connection_are_decided_alike(
    sides: list[Side], closing_upstream: JsonLines
):
    """The upstream closes after each answer: the kept-alive requests after it (allowed,
    denied, allowed) reach a new upstream connection, or none, alike."""
    head = "GET {} HTTP/1.1\r\nHost: api.allowed.test:9448\r\n\r\n"
    mark = closing_upstream.mark()
    out = differential(
        sides,
        [head.format(p).encode() for p in ("/s/closing/2", "/denied/s/closing", "/s/closing/3")],
        pause=1.0,  # under load the proxy may not have read the upstream's close (D665)
        warm=head.format("/s/closing/1").encode(),
        authority=f"{HOST}:{SCRIPT_PORT}",
    )
    assert out["first"] == (200, None)
    assert [a[:3] for a in out["answers"]] == [
        (200, "OK", None),
        (403, "Forbidden", "rule_denied"),
        (200, "OK", None),
    ]
    received = [bytes.fromhex(e["received"]) for e in closing_upstream.wait_count(mark, 6)]
    targets = sorted(r.split(b"\r\n", 1)[0] for r in received)
    assert targets == sorted(
        [b"GET /s/closing/1 HTTP/1.1", b"GET /s/closing/2 HTTP/1.1", b"GET /s/closing/3 HTTP/1.1"]
        * 2
    )
