"""End to end, D680's second sending attacked (D681-D689): a request a kept-alive upstream
connection lost goes once more only when sending it twice is harmless, and then exactly
as the first time.

testbed/script_server.py is the upstream. Each attack opens a tunnel, sends a warm request
(script `NAME-a`: answer it, read what comes next on the connection, then close or reset)
and then the attacked request (script `NAME-b`, which answers it wherever it arrives).
The warm connection reads the attacked request and ends it without an answer byte: the
race D680 repairs. What the upstream received (per connection), what the client read, the
audit lines and the budget are compared with what a second sending may and may not do.
The proxies serve the whole module: the default layers, `--fast-path` and `--body-relay`,
each with an answer deadline (`--upstream-timeout`).
"""

from __future__ import annotations

import contextlib
import json
import re
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from testbed.netns import Topology
from testbed.rawhttp import Conn, Response
from testbed.testca import Pki
from tests.e2e.conftest import PrivateProxy, Scripted, script_upstreams

pytestmark = [pytest.mark.netns, pytest.mark.both_paths]

PORT = 9471
HOST, METERED, SIGNED = "other.allowed.test", "x.wild.test", "api.allowed.test"
PLACEHOLDER = "AKIAEGRESSPLACEHOLDR"
ANSWER_S = 3  # --upstream-timeout
CONFIG = f"""\
credentials:
  aws-test: {{aws: {{access_key_id: AKIAREALKEYOFTHETEST0, secret_access_key: "${{E2E_SECRET}}"}}}}
network:
  allowlist:
    - domain: {SIGNED}  # a SigV4 request's body is held whole (not streamed)
      credential: {{name: aws-test, as: sigv4, placeholder_access_key_id: {PLACEHOLDER},
                   services: [es], regions: [us-east-1]}}
    - domain: {HOST}
      transform:
        Authorization: "Bearer ${{E2E_SECRET}}"
    - domain: {METERED}
      transform:
        Authorization: "Bearer ${{E2E_SECRET}}"
      budget: {{requests: "1000/day"}}
    - domain: 198.18.1.0/24  # opens the upstreams' reserved range
"""
SWITCHES = {"layers": (), "fast": ("--fast-path",), "relay": ("--body-relay",)}
WARM = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nwarm"
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nanswer"


@pytest.fixture(scope="module")
def scripted(topology: Topology, pki: Pki, e2e_dir: Path) -> Iterator[Scripted]:
    with script_upstreams(topology, pki, e2e_dir, "retry-script", {PORT: True}) as up:
        yield up


@pytest.fixture(scope="module")
def proxies(module_private_proxy: Callable[..., PrivateProxy]) -> dict[str, PrivateProxy]:
    timeout = ("--upstream-timeout", str(ANSWER_S))
    return {
        name: module_private_proxy(f"retry-{name}", CONFIG, *timeout, *extra)
        for name, extra in SWITCHES.items()
    }


@pytest.fixture(params=list(SWITCHES))
def proxy(request: pytest.FixtureRequest, proxies: dict[str, PrivateProxy]) -> PrivateProxy:
    return proxies[request.param]


@dataclass(frozen=True)
class Seen:
    answer: Response | None  # what the client read for the attacked request (None: nothing)
    heads: list[bytes]  # each time the upstream received the attacked request: its head
    bodies: list[bytes]  # what followed each of those heads on its connection
    audit: list[tuple[Any, ...]]  # (status, reason, bytes sent, bytes received) per line
    secret: str


def _sends(received: bytes, line: bytes) -> list[tuple[bytes, bytes]]:
    """(head, what follows it) of each request on one connection whose line is `line`."""
    found = []
    for part in received.split(line)[1:]:
        head, _, rest = part.partition(b"\r\n\r\n")
        found.append((line + head, rest))
    return found


def attack(
    p: PrivateProxy,
    up: Scripted,
    name: str,
    attacked: bytes,
    ending: list[list[Any]] | None = None,
    answer_steps: list[list[Any]] | None = None,
    host: str = HOST,
    then: Callable[[Conn], Response | None] | None = None,
    warm: bytes | None = None,
) -> Seen:
    """Warm a kept-alive connection with `NAME-a` (or `warm`), whose script reads what comes
    next and ends (`ending`, steps: a close by default) without an answer; then `attacked`
    (`@@`: `NAME-b`), which `NAME-b`'s script (`answer_steps`, default: the answer) answers
    where it arrives; `then` reads the client's side instead of one answer."""
    a, b = f"{name}-a", f"{name}-b"
    steps = [["send", WARM.hex()], ["drain", 0.5], *(ending or [["close"]])]
    (up.scripts / f"{a}.json").write_text(json.dumps(steps))
    (up.scripts / f"{b}.json").write_text(json.dumps(answer_steps or [["send", ANSWER.hex()]]))
    p.wait_idle()
    mark, audit_mark = up.log.mark(), p.view.audit_log.mark()
    with p.view.tunnel(f"{host}:{PORT}") as conn:
        conn.send(warm or f"GET /s/{a} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        warmed = conn.read_response()
        assert (warmed.status, warmed.body) == (200, b"warm"), warmed.describe()
        conn.send(attacked.replace(b"@@", b.encode()).replace(b"%%", host.encode()))
        if then is not None:
            answer = then(conn)
        else:
            try:
                answer = conn.read_response(attacked.split(b" ", 1)[0].decode())
            except (OSError, ConnectionError):
                answer = None
    p.wait_idle()
    # The proxy closed every connection; the upstream logs each as it reads the close.
    up.log.wait_for(mark, lambda e: f"/s/{a} ".encode() in bytes.fromhex(e["received"]))
    _quiet(up, mark)
    line = attacked.split(b"\r\n", 1)[0].replace(b"@@", b.encode())
    sends = [
        s for e in up.log.since(mark) for s in _sends(bytes.fromhex(e["received"]), line)
    ]  # fmt: skip
    p.view.audit_log.settle()
    audit = [
        (r["status"], r["reason"], r["bytes_sent"], r["bytes_received"])
        for r in p.view.audit_log.since(audit_mark)
        if r.get("host") == host and b in (r.get("path") or "")
    ]
    secret = p.view.secrets[0]
    return Seen(answer, [h for h, _ in sends], [r for _, r in sends], audit, secret)


def _quiet(up: Scripted, mark: int, quiet_s: float = 0.5, limit_s: float = 5.0) -> None:
    """Wait (bounded) until the upstream has logged no connection for `quiet_s`: the
    second sending's connection ends a moment after the warm one's, later under load."""
    seen, since, deadline = -1, time.monotonic(), time.monotonic() + limit_s
    while time.monotonic() < deadline:
        now = len(up.log.since(mark))
        if now != seen:
            seen, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return
        time.sleep(0.05)


def get(method: str = "GET", *fields: str, body: bytes = b"") -> bytes:
    lines = "".join(f"{f}\r\n" for f in fields)
    return f"{method} /s/@@ HTTP/1.1\r\nHost: %%\r\n{lines}\r\n".encode() + body


def credentials(head: bytes, secret: str) -> int:
    return len(re.findall(rb"(?im)^authorization: bearer " + re.escape(secret.encode()), head))


def status(seen: Seen) -> tuple[int, str | None]:
    assert seen.answer is not None
    return seen.answer.status, seen.answer.header("X-Egress-Denied")


# -- what may go twice, and goes exactly as the first time -------------------------------------


def test_a_lost_get_goes_again_once_with_its_credential_once(proxy, scripted):
    seen = attack(proxy, scripted, "plain", get())
    assert seen.answer is not None and (seen.answer.status, seen.answer.body) == (200, b"answer")
    assert len(seen.heads) == 2  # the lost one and the second sending
    assert [credentials(h, seen.secret) for h in seen.heads] == [1, 1]
    assert seen.heads[0] == seen.heads[1]
    assert seen.audit == [(200, "allowlisted", 0, 6)]  # one line, the answer's


@pytest.mark.parametrize("method", ["HEAD", "OPTIONS"])
def test_head_and_options_go_again_once(proxy, scripted, method: str):
    seen = attack(proxy, scripted, f"safe-{method}", get(method))
    assert seen.answer is not None and seen.answer.status == 200
    assert len(seen.heads) == 2 and seen.heads[0] == seen.heads[1]
    assert seen.audit == [(200, "allowlisted", 0, 0 if method == "HEAD" else 6)]


def test_a_budget_counts_a_request_sent_again_once(proxy, scripted):
    labels = (("budget", "requests"), ("rule", METERED))
    before = proxy.process.scrape()[("egress_budget_remaining", labels)]
    seen = attack(proxy, scripted, "budget", get(), host=METERED)
    assert seen.answer is not None and seen.answer.status == 200
    assert len(seen.heads) == 2
    # The warm request and the attacked one: two, not three (the bucket refills a little).
    spent = before - proxy.process.scrape()[("egress_budget_remaining", labels)]
    assert 1.9 < spent < 2.1, spent


def test_a_reset_instead_of_a_close_is_the_same_race(proxy, scripted):
    """An upstream that closes with the request unread in its socket sends an RST (no FIN
    first): the request was not read, so it goes once more, as for a close."""
    seen = attack(proxy, scripted, "rst", get(), ending=[["reset"]])
    assert seen.answer is not None and (seen.answer.status, seen.answer.body) == (200, b"answer")
    assert len(seen.heads) == 2
    assert seen.audit == [(200, "allowlisted", 0, 6)]


def test_expect_continue_on_a_bodiless_get_goes_again_without_it(proxy, scripted):
    def two(conn: Conn) -> Response:
        interim = conn.read_response()
        assert interim.status == 100, interim.describe()
        return conn.read_response()

    seen = attack(proxy, scripted, "continue", get("GET", "Expect: 100-continue"), then=two)
    assert seen.answer is not None and seen.answer.status == 200
    assert len(seen.heads) == 2 and seen.heads[0] == seen.heads[1]
    assert b"expect" not in seen.heads[0].lower()


# -- what must not go twice ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "attacked",
    [
        pytest.param(get("POST", "Content-Length: 0"), id="post"),
        pytest.param(get("PUT", "Content-Length: 0"), id="put"),
        pytest.param(get("DELETE"), id="delete"),
    ],
)
def test_a_method_that_is_not_safe_goes_once(proxies, scripted, attacked: bytes):
    seen = attack(proxies["layers"], scripted, f"method-{attacked[:3].decode()}", attacked)
    assert len(seen.heads) == 1, seen.heads
    assert status(seen) == (502, "upstream_reset")
    assert [a[:2] for a in seen.audit] == [(502, "upstream_reset")]


@pytest.mark.parametrize(
    "attacked",
    [
        pytest.param(get("GET", "Content-Length: 5", body=b"hello"), id="get-length-body"),
        pytest.param(
            get("GET", "Transfer-Encoding: chunked", body=b"5\r\nhello\r\n0\r\n\r\n"),
            id="get-chunked-body",
        ),
        pytest.param(
            get("GET", "Transfer-Encoding: chunked", body=b"0\r\n\r\n"), id="get-chunked-0"
        ),
        pytest.param(get("get"), id="lowercase-get"),  # D681: methods are case-sensitive
        pytest.param(get("GET", "X-HTTP-Method-Override: DELETE"), id="override"),  # D682
        pytest.param(get("GET", "X-HTTP-Method: POST"), id="x-http-method"),
        pytest.param(get("GET", "X-Method-Override: PUT"), id="x-method-override"),
    ],
)
def test_what_may_change_something_goes_once(proxy, scripted, attacked: bytes):
    """A body, a method spelled otherwise, a method override: the upstream may act on it."""
    seen = attack(proxy, scripted, f"once-{zlib.crc32(attacked):08x}", attacked)
    assert len(seen.heads) == 1, seen.heads
    assert status(seen) == (502, "upstream_reset")
    assert [a[:2] for a in seen.audit] == [(502, "upstream_reset")]


def test_a_partial_answer_head_is_not_sent_again(proxy, scripted):
    ending = [["send", b"HTTP/1.1 2".hex()], ["close"]]
    seen = attack(proxy, scripted, "part-head", get(), ending=ending)
    assert len(seen.heads) == 1
    assert status(seen) == (502, "upstream_reset")


def test_a_whole_head_and_part_of_a_body_is_not_sent_again(proxy, scripted):
    cut = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"
    seen = attack(proxy, scripted, "part-body", get(), ending=[["send", cut.hex()], ["close"]])
    assert len(seen.heads) == 1
    assert seen.answer is None  # the head, then the client connection ends inside the body
    assert [a[0] for a in seen.audit] == [200]


def test_lost_twice_is_answered_once_with_two_sendings(proxy, scripted):
    seen = attack(proxy, scripted, "twice", get(), answer_steps=[["close"]])
    assert len(seen.heads) == 2
    assert status(seen) == (502, "upstream_reset")
    assert [a[:2] for a in seen.audit] == [(502, "upstream_reset")]


def test_the_answer_deadline_holds_across_the_second_sending(proxy, scripted):
    started = time.monotonic()
    seen = attack(proxy, scripted, "deadline", get(), answer_steps=[["drain", 20]])
    took = time.monotonic() - started
    assert len(seen.heads) == 2
    assert status(seen) == (504, "upstream_timeout")
    assert [a[:2] for a in seen.audit] == [(504, "upstream_timeout")]
    assert took < ANSWER_S + 6, took


def test_the_first_request_of_a_tunnel_opened_upstream_first_goes_once(proxy, scripted):
    """A client offering a choice of ALPN has the upstream connection opened during its own
    handshake (D19), before its first request: that request is still the first the
    connection carries, and an upstream that read it and closed may have acted on it."""
    name = "first"
    (scripted.scripts / f"{name}.json").write_text(json.dumps([["drain", 0.3], ["close"]]))
    proxy.wait_idle()
    mark, audit_mark = scripted.log.mark(), proxy.view.audit_log.mark()
    with proxy.view.tunnel(f"{HOST}:{PORT}", alpn=["h2", "http/1.1"]) as conn:
        time.sleep(0.2)  # the request comes after the connection was opened
        answer = conn.request("GET", f"/s/{name}", [("Host", HOST)])
    proxy.wait_idle()
    time.sleep(0.3)
    line = f"GET /s/{name} HTTP/1.1".encode()
    sends = [
        s for e in scripted.log.since(mark) for s in _sends(bytes.fromhex(e["received"]), line)
    ]
    assert (answer.status, answer.header("X-Egress-Denied")) == (502, "upstream_reset")
    assert len(sends) == 1
    proxy.view.audit_log.settle()
    statuses = [r["status"] for r in proxy.view.audit_log.since(audit_mark) if r.get("path")]
    assert statuses == [502]


def test_a_client_gone_during_the_second_sending_closes_its_connection(proxy, scripted):
    def leave(conn: Conn) -> None:
        time.sleep(0.8)  # the warm connection ended at 0.5 s; the second sending waits
        conn.close()

    started = time.monotonic()
    seen = attack(proxy, scripted, "gone", get(), answer_steps=[["drain", 20]], then=leave)
    assert len(seen.heads) == 2
    assert time.monotonic() - started < 8  # the second connection did not wait for its drain
    assert seen.audit == [(None, "allowlisted", 0, 0)]  # one line: the client left unanswered


def test_a_second_connection_that_cannot_connect_is_answered_as_a_refused_connect(
    proxies, topology: Topology, pki: Pki, e2e_dir: Path
):
    """The upstream goes away while the proxy waits on the kept-alive connection: its
    listener closes, then the connection. The second sending's connect is refused."""
    port, steps = PORT + 1, [["send", WARM.hex()], ["drain", 0.3], ["sleep", 20]]
    p = proxies["layers"]
    with contextlib.ExitStack() as upstream:
        gone = {port: True}
        up = upstream.enter_context(script_upstreams(topology, pki, e2e_dir, "retry-gone", gone))
        (up.scripts / "gone.json").write_text(json.dumps(steps))
        p.wait_idle()
        audit_mark = p.view.audit_log.mark()
        with p.view.tunnel(f"{HOST}:{port}") as conn:
            warm = conn.request("GET", "/s/gone", [("Host", HOST)])
            assert (warm.status, warm.body) == (200, b"warm"), warm.describe()
            conn.send(f"GET /s/gone/second HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode())
            time.sleep(0.8)  # the upstream read it (its drain ended)
            upstream.close()  # its listener goes, then the connection
            answer = conn.read_response()
    assert (answer.status, answer.header("X-Egress-Denied")) == (502, "upstream_refused")
    p.view.audit_log.settle()
    lines = [
        (r["status"], r["reason"])
        for r in p.view.audit_log.since(audit_mark)
        if r.get("path") == "/s/gone/second"
    ]
    assert lines == [(502, "upstream_refused")]


def _signed_get(path: str, body: bytes) -> bytes:
    """A SigV4-signed `GET` with a body (OpenSearch's `_search`), as the sandbox signs it
    with the placeholder key: the proxy holds its body whole to sign it again."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    url = f"https://{SIGNED}:{PORT}{path}"
    request = AWSRequest("GET", url, data=body, headers={"Content-Type": "application/json"})
    SigV4Auth(Credentials(PLACEHOLDER, "fake-secret"), "es", "us-east-1").add_auth(request)
    fields = [("Host", f"{SIGNED}:{PORT}"), *request.headers.items()]
    fields.append(("Content-Length", str(len(body))))
    head = f"GET {path} HTTP/1.1\r\n" + "".join(f"{n}: {v}\r\n" for n, v in fields)
    return (head + "\r\n").encode() + body


def test_a_held_get_body_goes_once(proxies, scripted):
    """A body held whole (a SigV4 request's, re-signed) is still a body: not sent twice."""
    body = b'{"query": {"match_all": {}}}'
    attacked, warm = _signed_get("/s/held-b", body), _signed_get("/s/held-a", b"")
    seen = attack(proxies["layers"], scripted, "held", attacked, host=SIGNED, warm=warm)
    assert seen.bodies and seen.bodies[0].startswith(body)  # it did carry its body
    assert len(seen.heads) == 1, seen.heads
    assert status(seen) == (502, "upstream_reset")
