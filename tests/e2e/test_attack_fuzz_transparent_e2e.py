"""Protocol fuzzer in transparent mode: hostile HTTP/1.1 heads over TLS to the transform host.

The sandbox of tests/e2e/test_transparent_e2e.py (its module fixture `tp`, a stage of
its own for this module) opens TLS with SNI `api.t.test` to the host's real address;
the gateway's firewall sends it to the transparent proxy. Each generated head is then
judged by the property of testbed/fuzz_property.py (docs/decisions.md D36), as in
tests/e2e/test_attack_fuzz_e2e.py; the raw-TCP listeners must see nothing either.
"""

from __future__ import annotations

import itertools
import ssl
from dataclasses import dataclass

import pytest
from hypothesis import example, given

from testbed.attack_strategies import Field, Head, request_heads
from testbed.fuzz_property import Expected
from testbed.harness import JsonLines
from testbed.rawhttp import Conn
from testbed.transparent import REAL_IP
from tests.e2e.test_attack_fuzz_e2e import (
    FUZZ,
    TIMEOUT,
    exchange_http1,
    judge,
    offset_of,
    outcome_of,
    since,
)
from tests.e2e.test_transparent_e2e import Transparent, tp  # noqa: F401 - the fixture

pytestmark = pytest.mark.both_paths

DECIDED_TP = "api.t.test"
HOST_TP = b"Host: " + DECIDED_TP.encode()
_barriers = itertools.count()


@dataclass(frozen=True)
class View:
    """The transparent stage as the fuzzer's judge reads it."""

    tp: Transparent
    upstream_log: JsonLines
    trap_log: JsonLines


def barrier(view: View) -> str:
    """A clean plain request from the sandbox; once it is logged, the example's are too."""
    path = f"/fuzz-barrier-tp-{next(_barriers)}"
    with view.tp.plain(REAL_IP) as conn:
        response = conn.request("GET", path, [("Host", "other.t.test"), ("Connection", "close")])
    assert response.status == 200, response.describe()
    return path


@pytest.mark.slow
@FUZZ
@given(head=request_heads(DECIDED_TP))
@example(head=Head(b"GET", b"https://evil.test/x", [HOST_TP], []))  # issue 10 item 1
@example(head=Head(b"GET", b"http://evil.test/x", [b"Host: evil.test"], []))
@example(head=Head(b"GET", b"/x", [HOST_TP], [Field(b"X-A", b"a\rb")]))  # item 4
@example(head=Head(b"GET", b"/x", [HOST_TP], [Field(b"X-A", b"a\r\n b")]))
def test_transparent_http1_heads_to_the_transform_host(
    tp: Transparent,  # noqa: F811 - the imported fixture
    head: Head,
) -> None:
    view = View(tp, tp.upstream_log, tp.trap_log)
    marks = offset_of(tp.upstream_log), offset_of(tp.trap_log)
    raw_mark = offset_of(tp.raw_log)
    sock = tp.socket(REAL_IP, 443, timeout=TIMEOUT)
    context = ssl.create_default_context(cafile=str(tp.proxy_ca))
    context.set_alpn_protocols(["http/1.1"])
    with Conn.over(context.wrap_socket(sock, server_hostname=DECIDED_TP)) as conn:
        response = exchange_http1(conn, head)
    injected = {"Authorization": f"Bearer {tp.secret}"}
    expected = Expected(DECIDED_TP, 443, True, injected, f"{REAL_IP}:443")
    judge(view, marks, outcome_of(response, head.method), expected, barrier)
    assert since(tp.raw_log, raw_mark) == [], "a raw-TCP listener was reached"
