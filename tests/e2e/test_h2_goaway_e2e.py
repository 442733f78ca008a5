"""End to end: an HTTP/2 upstream's GOAWAY and REFUSED_STREAM (runtime/engine/goaway.py, D701).

A scripted TLS upstream (testbed/h2script.py) that speaks HTTP/2 only writes the frames
each case names; an h2 client (testbed/h2stream.py) sends through a proxy of the module's
own, the body relay off and on. Each case asserts what the client got, which upstream
connections carried which request (the upstream's own record of paths per connection),
the bodies that reached it, and the audit line:
* a graceful GOAWAY naming the stream being answered: the answer arrives whole, and the
  next request goes on a new connection;
* a graceful GOAWAY naming no stream (the request unprocessed), or a REFUSED_STREAM: the
  request goes once more and gets its answer; refused twice, a 502; a body the proxy
  streamed (an allowed body is never held whole) is not sent again, a 502;
* a GOAWAY with an error code: a 502, the request not sent again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from testbed.h2script import END_STREAM, H2Script, Step, data, headers
from testbed.h2stream import H2Stream
from testbed.netns import Topology
from testbed.testca import Pki
from tests.e2e.conftest import PrivateProxy
from tests.e2e.h2_support import CONFIG, answer, goaway, h2_client, h2_upstream, refuse, unique
from tests.e2e.memory_support import h2_request

pytestmark = pytest.mark.netns

PORT = 9473
HOST = "api.allowed.test"
AUTHORITY = f"{HOST}:{PORT}"
ENHANCE_YOUR_CALM = 0xB
BODY = b"the request's body, held whole by the proxy"


@pytest.fixture(scope="module")
def upstream(topology: Topology, pki: Pki) -> Iterator[H2Script]:
    with h2_upstream(topology, pki, PORT, H2Script) as server:
        seen: set[str] = set()

        def first_time(fields: dict[str, str]) -> bool:
            path = fields[":path"]
            if path in seen:
                return False
            seen.add(path)
            return True

        def drain(sid: int, _fields: dict[str, str]) -> list[Step]:
            return [headers(sid, [(":status", "200")]), 0.05, goaway(sid), 0.05,
                    data(sid, b"the rest of the answer", END_STREAM)]  # fmt: skip

        def unprocessed(sid: int, fields: dict[str, str]) -> list[Step]:
            if first_time(fields):
                return [0.1, goaway(0), 0.05, None]  # the body read first (the script waits)
            return [answer(sid, b"answered the second time")]

        def refused(sid: int, fields: dict[str, str]) -> list[Step]:
            if first_time(fields):
                return [0.1, refuse(sid)]
            return [answer(sid, b"answered the second time")]

        def always(sid: int, _fields: dict[str, str]) -> list[Step]:
            return [0.1, goaway(0), 0.05, None]

        def calm(sid: int, _fields: dict[str, str]) -> list[Step]:
            return [0.1, goaway(sid, ENHANCE_YOUR_CALM), 0.05, None]

        def plain(sid: int, _fields: dict[str, str]) -> list[Step]:
            return [answer(sid, b"plain")]

        server.scripts.update(
            drain=drain, unprocessed=unprocessed, refused=refused, always=always, calm=calm,
            plain=plain,
        )  # fmt: skip
        yield server


@pytest.fixture(scope="module")
def proxy(module_relaying: Callable[..., PrivateProxy]) -> PrivateProxy:
    return module_relaying("goaway", CONFIG)


def post(client: H2Stream, path: str) -> int:
    sid = client.open(h2_request(AUTHORITY, "POST", path, ("content-length", str(len(BODY)))))
    client.send_body(sid, [BODY])
    return sid


def carried(upstream: H2Script, mark: int) -> list[list[str]]:
    """The paths each upstream connection opened since `mark` carried."""
    time.sleep(0.3)  # the upstream's record of the last frames
    return [list(paths) for paths in upstream.paths[mark:]]


def sent_again(proxy: PrivateProxy, outcome: str) -> float:
    """`egress_upstream_sent_again_total{cause="unprocessed", outcome}` now."""
    key = (("cause", "unprocessed"), ("outcome", outcome))
    return proxy.process.scrape()[("egress_upstream_sent_again_total", key)]


def audit(proxy: PrivateProxy, mark: int, path: str) -> list[Any]:
    line = proxy.view.audit_log.wait_for(mark, lambda a: a.get("path") == path)
    return [line["status"], line["decision"]]


def test_a_graceful_goaway_lets_the_answer_finish_and_the_next_request_opens_a_connection(
    proxy: PrivateProxy, upstream: H2Script
) -> None:
    mark, audit_mark = len(upstream.paths), proxy.view.audit_log.mark()
    with h2_client(proxy, AUTHORITY, 10) as client:
        drain, plain = unique("drain"), unique("plain")
        first = client.read_response(client.open(h2_request(AUTHORITY, "GET", drain), True))
        second = client.read_response(client.open(h2_request(AUTHORITY, "GET", plain), True))
    assert (first.status, first.body_bytes, first.ended) == ("200", 22, True)
    assert (second.status, second.body_bytes, second.ended) == ("200", 5, True)
    assert carried(upstream, mark) == [[drain], [plain]]
    assert audit(proxy, audit_mark, drain) == [200, "allow"]


@pytest.mark.parametrize("case", ["unprocessed", "refused"])
def test_a_request_the_upstream_did_not_process_goes_once_more(
    proxy: PrivateProxy, upstream: H2Script, case: str
) -> None:
    mark, audit_mark = len(upstream.paths), proxy.view.audit_log.mark()
    before = sent_again(proxy, "answered"), sent_again(proxy, "failed")
    path = unique(case)
    with h2_client(proxy, AUTHORITY, 10) as client:
        outcome = client.read_response(client.open(h2_request(AUTHORITY, "GET", path), True))
    assert (outcome.status, outcome.body_bytes) == ("200", len(b"answered the second time"))
    if case == "unprocessed":  # the GOAWAY's connection ended: a new one
        assert carried(upstream, mark) == [[path], [path]]
    else:  # a refused stream leaves its connection open: it carries the second one
        assert carried(upstream, mark) == [[path, path]]
    assert audit(proxy, audit_mark, path) == [200, "allow"]
    time.sleep(0.3)
    lines = [a["path"] for a in proxy.view.audit_log.since(audit_mark) if "path" in a]
    assert lines == [path]  # one line for the request (the tunnel's CONNECT has its own)
    assert (sent_again(proxy, "answered"), sent_again(proxy, "failed")) == (
        before[0] + 1,
        before[1],
    )


def test_a_streamed_body_the_upstream_did_not_process_is_not_sent_again(
    proxy: PrivateProxy, upstream: H2Script
) -> None:
    """An allowed body streams on (metered, never held whole): nothing of it is kept to
    send again, so the client gets the 502 and sends it again itself if it wants to."""
    mark = len(upstream.paths)
    path = unique("unprocessed")
    with h2_client(proxy, AUTHORITY, 10) as client:
        outcome = client.read_response(post(client, path))
    assert outcome.status == "502"
    assert carried(upstream, mark) == [[path]]


def test_a_request_refused_twice_gets_a_502_and_goes_no_third_time(
    proxy: PrivateProxy, upstream: H2Script
) -> None:
    mark, before = len(upstream.paths), sent_again(proxy, "failed")
    with h2_client(proxy, AUTHORITY, 10) as client:
        path = unique("always")
        outcome = client.read_response(client.open(h2_request(AUTHORITY, "GET", path), True))
    assert outcome.status == "502"
    assert carried(upstream, mark) == [[path], [path]]
    assert sent_again(proxy, "failed") == before + 1


def test_a_goaway_with_an_error_fails_the_stream_and_is_not_sent_again(
    proxy: PrivateProxy, upstream: H2Script
) -> None:
    mark = len(upstream.paths)
    with h2_client(proxy, AUTHORITY, 10) as client:
        path = unique("calm")
        outcome = client.read_response(post(client, path))
    assert outcome.status == "502"
    assert carried(upstream, mark) == [[path]]
