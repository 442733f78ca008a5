"""A request's hooks start where its stream asks for them (issue 36, runtime/engine/streamhooks.py,
D311): kept-alive requests through the real lean engine, with the streams starting their
hooks and without (mitmproxy's trip through the layers), counting the `HookCompleted`
events that travel back down the layers."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import Any

import pytest
from mitmproxy import http, options
from mitmproxy.proxy import context, events, layer, server
from mitmproxy.proxy.layers import http as http_layers
from mitmproxy.test import tflow
from mitmproxy.utils import asyncio_utils

from sandbox_egress.addons.layers import limits, linger, pushgate
from sandbox_egress.runtime.engine import lean, patches, streamhooks
from testbed.fixed_upstream import FixedResponse, start_lean_engine
from testbed.hookaddon import HOOKS
from testbed.hookaddon import PerRequestHooks as Hooks

BODY = b"stream hooks " * 10
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
REQUESTS = 10


def through_proxy(tmp_path: Path, hooks: Hooks, streams: bool) -> tuple[int, list[bytes], int]:
    """`REQUESTS` kept-alive GETs after a first one: the `HookCompleted` events per request,
    what the client read for each (head and body, or b"" once the connection closed) and
    the requests the upstream answered."""
    completions = 0
    upstream_requests = 0
    original_init = events.HookCompleted.__init__

    def counting(self: events.HookCompleted, *args: Any, **kwargs: Any) -> None:
        nonlocal completions
        completions += 1
        original_init(self, *args, **kwargs)

    class Counted(FixedResponse):
        def data_received(self, data: bytes) -> None:
            nonlocal upstream_requests
            upstream_requests += data.count(b"\r\n\r\n")
            super().data_received(data)

    async def main() -> list[bytes]:
        nonlocal completions
        up = await asyncio.get_running_loop().create_server(
            Counted.serving(RESPONSE), "127.0.0.1", 0
        )
        up_port = up.sockets[0].getsockname()[1]
        master, runner, port = await start_lean_engine(
            tmp_path / "conf", lambda master: master.addons.add(hooks)
        )
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        read: list[bytes] = []

        async def one() -> None:
            writer.write(b"GET http://127.0.0.1:%d/ HTTP/1.1\r\nHost: x\r\n\r\n" % up_port)
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as closed:
                read.append(closed.partial)
                return
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            read.append(head + await reader.readexactly(length))

        await one()  # opens the upstream connection
        completions = 0
        for _ in range(REQUESTS):
            await one()
            if not read[-1]:
                break
        writer.close()
        master.shutdown()
        await runner
        up.close()
        return read

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(events.HookCompleted, "__init__", counting)
        if not streams:
            patch.setattr(streamhooks, "attach", lambda handler: None)
        read = asyncio.run(main())
    return completions // REQUESTS, read, upstream_requests


CASES = {
    # (hooks that wait a loop turn, HookCompleted per request: through the layers, in place)
    "every hook at once": ((), 4, 0),
    "the request head waits (a lookup)": (("requestheaders",), 4, 1),
    "every hook waits": (HOOKS, 4, 4),
}


@pytest.mark.parametrize(("waiting", "before", "after"), CASES.values(), ids=CASES.keys())
def test_a_hook_that_finishes_at_once_is_answered_in_its_stream(
    tmp_path: Path, waiting: tuple[str, ...], before: int, after: int
) -> None:
    hooks_before, hooks_after = Hooks(waiting), Hooks(waiting)
    completions_before, read_before, up_before = through_proxy(
        tmp_path / "before", hooks_before, streams=False
    )
    completions_after, read_after, up_after = through_proxy(
        tmp_path / "after", hooks_after, streams=True
    )
    assert (completions_before, completions_after) == (before, after)
    # The same answers, the same hooks once each in the same order, either way.
    assert len(read_after) == REQUESTS + 1
    assert all(r.startswith(b"HTTP/1.1 200") and b"x-hooked: /\r\n" in r for r in read_after)
    assert all(r.endswith(BODY) for r in read_after)
    assert read_after == read_before
    assert hooks_after.seen == hooks_before.seen == list(HOOKS) * (REQUESTS + 1)
    assert up_after == up_before == REQUESTS + 1


def test_a_request_hook_that_answers_keeps_the_request_from_the_upstream(
    tmp_path: Path,
) -> None:
    before, after = Hooks(answer=True), Hooks(answer=True)
    _, read_before, up_before = through_proxy(tmp_path / "before", before, streams=False)
    _, read_after, up_after = through_proxy(tmp_path / "after", after, streams=True)
    assert read_after == read_before
    assert read_after[0].startswith(b"HTTP/1.1 200")
    assert all(
        r.startswith(b"HTTP/1.1 403") and r.endswith(b"answered here") for r in read_after[1:]
    )
    assert up_after == up_before == 1  # only the first request reached it
    assert after.seen == before.seen


def test_a_hook_that_kills_the_flow_closes_the_connection_as_before(tmp_path: Path) -> None:
    before, after = Hooks(kill=True), Hooks(kill=True)
    _, read_before, _ = through_proxy(tmp_path / "before", before, streams=False)
    _, read_after, _ = through_proxy(tmp_path / "after", after, streams=True)
    assert read_after == read_before
    assert read_after[0].startswith(b"HTTP/1.1 200") and read_after[1:] == [b""]
    assert after.seen == before.seen == [*HOOKS, *HOOKS[:3]]


def test_only_a_stream_of_an_attached_connection_answers_in_place() -> None:
    streamhooks.install()

    class Root:
        pass

    def stream(root: object | None) -> http_layers.HttpStream:
        ctx = context.Context(tflow.tclient_conn(), options.Options())
        if root is not None:
            ctx.layers.append(root)
        return http_layers.HttpStream(ctx, 1)

    assert "_handle_event" not in stream(None).__dict__
    assert "_handle_event" not in stream(Root()).__dict__
    attached = Root()
    setattr(attached, streamhooks.STARTER, lambda hook: None)
    assert "_handle_event" in stream(attached).__dict__


def test_the_products_stream_wrappers_still_see_each_hook(tmp_path: Path) -> None:
    # addons/layers/limits.py marks, as the `requestheaders` hook passes it, whether a body
    # follows; addons/layers/pushgate.py wraps that. They wrap the class after the engine starts:
    # the stream answers its hooks outside of them.
    limits.install(lambda _limit: None)
    seen: list[object] = []

    class Marked(Hooks):
        def __init__(self) -> None:
            super().__init__()
            at_once = self.requestheaders

            def requestheaders(flow: http.HTTPFlow) -> None:
                seen.append(flow.metadata.get(limits.BODY_FOLLOWS))
                at_once(flow)

            self.requestheaders = requestheaders

    completions, read, _ = through_proxy(tmp_path, Marked(), streams=True)
    assert http_layers.HttpStream._handle_event is linger._lingering  # around pushgate's
    assert pushgate.installed()
    assert completions == 0
    assert seen == [False] * (REQUESTS + 1)  # a GET: no body follows
    assert all(r.startswith(b"HTTP/1.1 200") for r in read)


def test_the_internals_it_relies_on() -> None:
    # A blocking StartHook is started by the handler as `handle_hook` in a task, and its
    # completion hands the stream None; the stream asks for the four hooks by yielding.
    source = inspect.getsource(server.ConnectionHandler.server_event)
    assert "self.hook_task(command)" in source and 'name=f"handle_hook({command.name})"' in source
    hook_task = inspect.getsource(server.ConnectionHandler.hook_task)
    assert "await self.handle_hook(hook)" in hook_task
    assert events.HookCompleted.reply is None
    stream = inspect.getsource(http_layers.HttpStream)
    for hook in ("HttpRequestHeadersHook", "HttpRequestHook", "HttpResponseHeadersHook"):
        assert f"yield {hook}(self.flow)" in stream
    assert "yield HttpResponseHook(self.flow)" in stream
    assert "create_task" in inspect.getsource(asyncio_utils.create_task)
    # A layer runs the `_handle_event` its instance has; a stream is made with its context.
    assert "self._handle_event(event)" in inspect.getsource(layer.Layer.handle_event)
    assert list(inspect.signature(streamhooks.ORIGINAL_INIT).parameters) == [
        "self", "context", "stream_id"
    ]  # fmt: skip
    register = inspect.getsource(lean.CoalescingProxyserver.register_connection)
    assert "patches.attach(handler)" in register
    attached = [row.name for row in patches.rows(patches.Stage.CONNECTION)]
    assert attached.index("streamhooks.attach") < attached.index("inlinehooks")


CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"


def client_writes(tmp_path: Path, streams: bool) -> list[bytes]:
    """What the engine wrote to its client for one kept-alive GET whose chunked answer
    (head, chunk and last chunk) arrives in one read, each `write` separately."""
    written: list[bytes] = []
    original = asyncio.StreamWriter.write

    def recording(self: asyncio.StreamWriter, data: Any) -> None:
        if self.get_extra_info("sockname")[1] == port:  # the engine's client leg
            written.append(bytes(data))
        original(self, data)

    port = 0

    async def main() -> None:
        nonlocal port
        up = await asyncio.get_running_loop().create_server(
            FixedResponse.serving(CHUNKED), "127.0.0.1", 0
        )
        up_port = up.sockets[0].getsockname()[1]
        master, runner, port = await start_lean_engine(
            tmp_path / "conf", lambda master: master.addons.add(Hooks(stream=True))
        )
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(2):  # the second on the kept-alive connections
            written.clear()
            writer.write(b"GET http://127.0.0.1:%d/ HTTP/1.1\r\nHost: x\r\n\r\n" % up_port)
            await reader.readuntil(b"0\r\n\r\n")
        writer.close()
        master.shutdown()
        await runner
        up.close()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(asyncio.StreamWriter, "write", recording)
        if not streams:
            patch.setattr(streamhooks, "attach", lambda handler: None)
        asyncio.run(main())
    return written


def test_a_streamed_chunked_answer_goes_to_the_client_in_one_write(tmp_path: Path) -> None:
    # Read at once. Through the layers, the `response` hook came between the body and the
    # last chunk:
    # two writes (two TLS records on an intercepted connection). In place: one.
    before = client_writes(tmp_path / "before", streams=False)
    after = client_writes(tmp_path / "after", streams=True)
    assert b"".join(after) == b"".join(before)
    assert b"".join(after).endswith(b"5\r\nhello\r\n0\r\n\r\n")
    assert [w.endswith(b"0\r\n\r\n") for w in before] == [False, True]
    assert len(after) == 1


def test_a_streamed_body_that_ends_the_message_leaves_before_the_response_hook(
    tmp_path: Path,
) -> None:
    # A content-length answer, streamed: its last byte is the message's last. The response
    # hook goes through the layers (1 HookCompleted per request, the other three answered
    # in place), which write the body first: the client has it whole before the hook runs.
    written: list[bytes] = []
    at_response_hook: list[int] = []
    original = asyncio.StreamWriter.write

    def recording(self: asyncio.StreamWriter, data: Any) -> None:
        written.append(bytes(data))
        original(self, data)

    class Watching(Hooks):
        def __init__(self) -> None:
            super().__init__(stream=True)
            at_once = self.response

            def response(flow: http.HTTPFlow) -> None:
                at_response_hook.append(sum(w.count(BODY) for w in written))
                at_once(flow)

            self.response = response

    hooks = Watching()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(asyncio.StreamWriter, "write", recording)
        completions, read, _ = through_proxy(tmp_path, hooks, streams=True)
    assert completions == 1
    assert all(r.startswith(b"HTTP/1.1 200") and r.endswith(BODY) for r in read)
    # Each time, this answer's body was already written to the client (the upstream
    # writes through its transport, not a StreamWriter).
    assert at_response_hook == list(range(1, REQUESTS + 2))
    assert hooks.seen == list(HOOKS) * (REQUESTS + 1)
