"""End to end: a safe request that an idle kept-alive upstream connection lost is sent once
more, on a new connection (D680).

An upstream may close a kept-alive connection at the moment the proxy writes the next
request on it (its keep-alive timeout): the request is lost without an answer byte. A GET,
HEAD or OPTIONS whose whole request the proxy holds is then sent once more on a new
connection, which the connect-time checks judge again; anything else, a second loss or a
connection opened for the request itself is answered `502 upstream_reset` as before.

The upstream is testbed/script_server.py: the first request's script answers, reads what
follows on the connection and closes without answering it; the next connection's script
(named by the second request) answers or closes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from testbed.rawhttp import Conn
from tests.e2e.conftest import PrivateProxy, Scripted
from tests.e2e.test_relay_attack_e2e import CONFIG, HOST, PORT, head, scripted

__all__ = ["scripted"]  # the fixture, imported for this module's tests

pytestmark = pytest.mark.netns

AGAIN = head("Content-Length: 5") + b"again"
KEEP = [["send", (head("Content-Length: 2") + b"ok").hex()], ["drain", 1.0], ["close"]]
SCRIPTS: dict[str, list[list[Any]]] = {
    "keep": KEEP,  # answers, reads the next request, closes unanswered
    "answers": [["send", AGAIN.hex()]],
    "closes": [["close"]],
}


@pytest.fixture(scope="module", params=[False, True], ids=["layers", "fast"])
def proxy(
    request: pytest.FixtureRequest, module_private_proxy: Callable[..., PrivateProxy]
) -> PrivateProxy:
    fast = ["--fast-path"] if request.param else []
    return module_private_proxy(f"retry-{'fast' if fast else 'layers'}", CONFIG, *fast)


def _request(method: str, script: str, tag: str, body: bytes = b"") -> bytes:
    length = f"Content-Length: {len(body)}\r\n" if body or method == "POST" else ""
    return f"{method} /s/{script}/{tag} HTTP/1.1\r\nHost: {HOST}\r\n{length}\r\n".encode() + body


def _answer(conn: Conn) -> tuple[int, bytes]:
    response = conn.read_response()
    return response.status, response.body


def _run(p: PrivateProxy, up: Scripted, tag: str, second: bytes) -> tuple[list[Any], list[str]]:
    """GET `keep` on a new tunnel, then `second` on it once the first answer came: the
    answers, and the request lines each upstream connection of this test received."""
    for name, steps in SCRIPTS.items():
        (up.scripts / f"{name}.json").write_text(json.dumps(steps))
    p.wait_idle()
    mark = up.log.mark()
    with p.view.tunnel(f"{HOST}:{PORT}") as conn:
        conn.send(_request("GET", "keep", tag))
        answers: list[Any] = [_answer(conn)]
        time.sleep(0.3)  # the connection is idle in the proxy: it is reused
        conn.send(second)
        answers.append(_answer(conn))
    return answers, _lines(up, mark, tag)


def _lines(up: Scripted, mark: int, tag: str) -> list[str]:
    """The request lines of this test, per upstream connection (a connection's lines
    joined by ` | `), sorted; read once no connection has ended for 1 s (a connection
    ends when the proxy closes it after the client's tunnel closed)."""
    seen: list[str] = []
    stable_since, deadline = time.monotonic(), time.monotonic() + 15
    while time.monotonic() < deadline:
        now = sorted(
            joined
            for e in up.log.since(mark)
            if e["event"] == "conn"
            and (joined := " | ".join(_request_lines(bytes.fromhex(e["received"]), tag)))
        )
        if now != seen:
            seen, stable_since = now, time.monotonic()
        elif seen and time.monotonic() - stable_since > 1.0:
            break
        time.sleep(0.1)
    return seen


def _request_lines(received: bytes, tag: str) -> list[str]:
    return [
        line.decode()
        for line in received.split(b"\r\n")
        if line.endswith(b" HTTP/1.1") and f"/{tag} ".encode() in line
    ]


def _failed(body: bytes) -> str:
    return str(json.loads(body)["reason"])


def _sent_again(proxy: PrivateProxy) -> tuple[float, float]:
    """`egress_upstream_sent_again_total{cause="closed"}`, answered and failed, now."""
    samples = proxy.process.scrape()
    name = "egress_upstream_sent_again_total"
    answered = samples[(name, (("cause", "closed"), ("outcome", "answered")))]
    return answered, samples[(name, (("cause", "closed"), ("outcome", "failed")))]


def test_a_get_the_kept_alive_connection_lost_is_sent_again_on_a_new_one(
    proxy: PrivateProxy, scripted: Scripted
) -> None:
    answered, failed = _sent_again(proxy)
    answers, lines = _run(proxy, scripted, "t1", _request("GET", "answers", "t1"))
    assert answers == [(200, b"ok"), (200, b"again")]
    assert lines == [
        "GET /s/answers/t1 HTTP/1.1",
        "GET /s/keep/t1 HTTP/1.1 | GET /s/answers/t1 HTTP/1.1",
    ]
    assert _sent_again(proxy) == (answered + 1, failed)


def test_a_post_the_connection_lost_is_not_sent_again(
    proxy: PrivateProxy, scripted: Scripted
) -> None:
    answers, lines = _run(proxy, scripted, "t2", _request("POST", "answers", "t2", b"data"))
    assert [a[0] for a in answers] == [200, 502]
    assert _failed(answers[1][1]) == "upstream_reset"
    assert lines == ["GET /s/keep/t2 HTTP/1.1 | POST /s/answers/t2 HTTP/1.1"]


def test_a_get_lost_twice_is_answered_502(proxy: PrivateProxy, scripted: Scripted) -> None:
    answered, failed = _sent_again(proxy)
    answers, lines = _run(proxy, scripted, "t3", _request("GET", "closes", "t3"))
    assert [a[0] for a in answers] == [200, 502]
    assert _failed(answers[1][1]) == "upstream_reset"
    assert lines == [
        "GET /s/closes/t3 HTTP/1.1",
        "GET /s/keep/t3 HTTP/1.1 | GET /s/closes/t3 HTTP/1.1",
    ]
    assert _sent_again(proxy) == (answered, failed + 1)


def test_a_get_on_a_connection_opened_for_it_is_not_sent_again(
    proxy: PrivateProxy, scripted: Scripted
) -> None:
    for name, steps in SCRIPTS.items():
        (scripted.scripts / f"{name}.json").write_text(json.dumps(steps))
    proxy.wait_idle()
    mark = scripted.log.mark()
    with proxy.view.tunnel(f"{HOST}:{PORT}") as conn:
        conn.send(_request("GET", "closes", "t4"))
        status, body = _answer(conn)
    assert (status, _failed(body)) == (502, "upstream_reset")
    assert _lines(scripted, mark, "t4") == ["GET /s/closes/t4 HTTP/1.1"]
