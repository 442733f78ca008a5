"""The push gate (addons/layers/pushgate.py) in mitmproxy 12's real `HttpStream`, driven event by
event without a network: no command of a refused push, not even its head, goes to the
upstream; an allowed one streams on with every byte, whatever the chunking. (The real
`git` through the real proxy: tests/e2e/test_git_e2e.py.)"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mitmproxy import http
from mitmproxy.addons.proxyserver import Proxyserver
from mitmproxy.proxy import commands, context, events
from mitmproxy.proxy.layers.http import (
    GetHttpConnection,
    GetHttpConnectionCompleted,
    HTTPMode,
    HttpStream,
    SendHttp,
)
from mitmproxy.proxy.layers.http._events import (
    RequestData,
    RequestEndOfMessage,
    RequestHeaders,
    ResponseHeaders,
    ResponseProtocolError,
)
from mitmproxy.proxy.layers.http._hooks import HttpRequestHeadersHook
from mitmproxy.test import taddons, tflow

from sandbox_egress.addons.layers import limits, pushgate
from sandbox_egress.proxy.clauses.git import COMMANDS_LIMIT, Commands, pkt

OLD, NEW = "a" * 40, "b" * 40
COMMANDS = pkt(f"{OLD} {NEW} refs/heads/agent/x\0report-status\n".encode()) + b"0000"
PACK = b"PACK" + bytes(range(256)) * 64
Judge = Callable[[Commands | str], bool]


@pytest.fixture(autouse=True)
def installed() -> None:
    limits.install(lambda _limit: None)  # installs the gate after its own stream wrapper


@pytest.fixture
def ctx() -> Iterator[context.Context]:
    with taddons.context(Proxyserver()) as tctx:
        yield context.Context(tflow.tclient_conn(), tctx.options)


class Stream:
    """One request through a real `HttpStream`, every hook answered at once."""

    def __init__(self, ctx: context.Context, judge: Judge) -> None:
        self.ctx, self.judge = ctx, judge
        self.layer = HttpStream(ctx, 1)
        self.layer.__dict__["mode"] = HTTPMode.regular  # its HttpLayer parent would say so
        self.server = tflow.tserver_conn()
        self.out: list[commands.Command] = []
        self.judged: list[Commands | str] = []
        self.feed(events.Start())
        request = tflow.treq(method=b"POST", path=b"/acme/web.git/git-receive-pack")
        request.headers.clear()
        request.headers["Transfer-Encoding"] = "chunked"
        self.feed(RequestHeaders(1, request, end_stream=False))

    def feed(self, *evts: events.Event) -> None:
        queue = list(evts)
        while queue:
            for command in self.layer.handle_event(queue.pop(0)):
                self.out.append(command)
                if isinstance(command, HttpRequestHeadersHook):
                    assert pushgate.hold(command.flow, self._judge)
                if isinstance(command, GetHttpConnection):
                    queue.insert(0, GetHttpConnectionCompleted(command, (self.server, None)))
                elif isinstance(command, commands.StartHook):
                    queue.insert(0, events.HookCompleted(command))

    def _judge(self, answer: Commands | str) -> bool:
        self.judged.append(answer)
        return self.judge(answer)

    def body(self, *chunks: bytes, end: bool = True) -> None:
        self.feed(*(RequestData(1, c) for c in chunks if c))
        if end:
            self.feed(RequestEndOfMessage(1))

    def upstream(self) -> list[object]:
        """Every event sent towards the upstream, and whether a connection was asked for."""
        sent: list[object] = [c.event for c in self.out if isinstance(c, SendHttp)
                              and c.connection is not self.ctx.client]  # fmt: skip
        return sent + [c for c in self.out if isinstance(c, GetHttpConnection)]

    def sent_bytes(self) -> bytes:
        return b"".join(e.data for e in self.upstream() if isinstance(e, RequestData))

    def to_client(self) -> list[object]:
        return [c.event for c in self.out if isinstance(c, SendHttp)
                and c.connection is self.ctx.client]  # fmt: skip


def allowed(ctx: context.Context) -> tuple[Stream, list[bytes]]:
    metered: list[bytes] = []
    holder: list[Stream] = []

    def judge(answer: Commands | str) -> bool:
        assert isinstance(answer, Commands)
        flow = holder[0].layer.flow

        def count(chunk: bytes) -> bytes:
            metered.append(chunk)
            return chunk

        flow.request.stream = count
        return True

    holder.append(Stream(ctx, judge))
    return holder[0], metered


def refused(ctx: context.Context) -> Stream:
    holder: list[Stream] = []

    def judge(_answer: Commands | str) -> bool:
        holder[0].layer.flow.response = http.Response.make(200, b"report-status")
        return False

    holder.append(Stream(ctx, judge))
    return holder[0]


def test_the_internals_the_gate_relies_on_are_where_they_were() -> None:
    source = inspect.getsource(HttpStream)
    for name in ("state_consume_request_body", "state_stream_request_body",
                 "start_request_stream", "check_killed"):  # fmt: skip
        assert hasattr(HttpStream, name), name
    assert "if self.flow.request.stream and not event.end_stream:" in source
    assert pushgate.installed()


def test_nothing_goes_upstream_until_the_command_list_is_complete(ctx: context.Context) -> None:
    stream, metered = allowed(ctx)
    stream.body(COMMANDS[:-1], end=False)
    assert stream.upstream() == [] and stream.judged == []
    stream.body(COMMANDS[-1:] + PACK[:10], PACK[10:], end=True)
    heads = [e for e in stream.upstream() if isinstance(e, RequestHeaders)]
    assert len(heads) == 1 and stream.sent_bytes() == COMMANDS + PACK
    assert b"".join(metered) == COMMANDS + PACK  # the held bytes are metered too
    assert isinstance(stream.upstream()[-2], RequestEndOfMessage)


def test_a_refused_push_sends_nothing_upstream_and_is_answered_at_its_end(
    ctx: context.Context,
) -> None:
    stream = refused(ctx)
    stream.body(COMMANDS, PACK, end=False)
    assert stream.to_client() == []  # answered once the body was read (git reads it then)
    stream.body(PACK, end=True)
    assert stream.upstream() == []
    answer = [e for e in stream.to_client() if isinstance(e, ResponseHeaders)]
    assert answer[0].response.status_code == 200
    assert stream.layer.flow.request.raw_content == b""  # nothing of it was kept


def test_a_list_that_never_ends_is_refused_at_the_bound(ctx: context.Context) -> None:
    stream = refused(ctx)
    line = pkt(f"{OLD} {NEW} refs/heads/agent/x\n".encode())
    stream.body(*[line] * (COMMANDS_LIMIT // len(line) + 1), end=False)
    assert len(stream.judged) == 1 and "within the bound" in str(stream.judged[0])
    assert stream.upstream() == []


def test_a_refused_body_past_the_drain_limit_is_cut(
    ctx: context.Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pushgate, "DRAIN_LIMIT", 2 * len(PACK))
    stream = refused(ctx)
    stream.body(COMMANDS, PACK, PACK, PACK, end=False)
    assert stream.layer.flow.error is not None
    assert any(isinstance(e, ResponseProtocolError) for e in stream.to_client())
    assert stream.upstream() == []


def test_a_judge_that_raises_refuses(ctx: context.Context) -> None:
    def judge(_answer: Commands | str) -> bool:
        raise ValueError("boom")

    stream = Stream(ctx, judge)
    stream.body(COMMANDS, PACK, end=True)
    assert stream.upstream() == [] and stream.layer.flow.error is not None


def test_without_the_gate_a_push_is_not_held(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(HttpStream, "_handle_event", limits._marking_stream)
    flow = tflow.tflow()
    assert not pushgate.hold(flow, lambda _answer: True)
    assert pushgate.GATE not in flow.metadata


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_any_chunking_streams_every_byte_in_order(data: st.DataObject) -> None:
    body = COMMANDS + PACK[:300]
    cuts = sorted(set(data.draw(st.lists(st.integers(1, len(body) - 1), max_size=12))))
    chunks = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    with taddons.context(Proxyserver()) as tctx:
        stream, _ = allowed(context.Context(tflow.tclient_conn(), tctx.options))
        stream.body(*chunks)
    assert stream.sent_bytes() == body
    assert len(stream.judged) == 1


def test_every_split_of_a_refused_push_sends_nothing(ctx: context.Context) -> None:
    body = pkt(f"{OLD} {NEW} refs/heads/main\0report-status\n".encode()) + b"0000" + PACK[:50]
    for cut in range(1, len(body)):
        with taddons.context(Proxyserver()) as tctx:
            stream = refused(context.Context(tflow.tclient_conn(), tctx.options))
            stream.body(body[:cut], body[cut:])
        assert stream.upstream() == [] and len(stream.judged) == 1, cut


def wakeup(stream: Stream) -> events.Wakeup:
    timers = [c for c in stream.out if isinstance(c, commands.RequestWakeup)]
    assert [t.delay for t in timers] == [pushgate.COMMANDS_TIMEOUT_S]  # asked once, held
    return events.Wakeup(timers[0])


def test_a_list_not_complete_in_time_is_refused_and_cut(ctx: context.Context) -> None:
    stream = refused(ctx)
    stream.body(COMMANDS[:20], end=False)
    stream.feed(wakeup(stream))
    assert len(stream.judged) == 1 and "not complete within 30 s" in str(stream.judged[0])
    assert stream.layer.flow.error is not None
    assert any(isinstance(e, ResponseProtocolError) for e in stream.to_client())
    assert stream.upstream() == []


def test_the_timer_of_a_push_judged_in_time_does_nothing(ctx: context.Context) -> None:
    stream, _ = allowed(ctx)
    stream.body(COMMANDS, PACK, end=False)
    before = len(stream.out)
    stream.feed(wakeup(stream))
    assert len(stream.out) == before and stream.layer.flow.error is None
    assert len(stream.judged) == 1
