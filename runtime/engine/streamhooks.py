"""A request's hooks start where its stream asks for them (issue 36, D311).

mitmproxy's `HttpStream` asks for the four hooks of each request (`requestheaders`,
`request`, `responseheaders`, `response`) by yielding a blocking `StartHook`. The command
climbs the layer stack (HTTP layer, client TLS layer, the root and our wrappers), the
connection handler starts it in a task, and its `HookCompleted` climbs back down the same
layers to the stream, which was paused meanwhile and queued what arrived. Under
mitmproxy's eager task factory the hook's addons have usually run to their end before
`create_task` returned; the two trips through the layers are all that is left (D311
measures what they cost).

`install()` gives each `HttpStream` of a connection whose handler has `attach`ed its own
`_handle_event`: the class's (with whatever wraps it then), and when it yields one of
those four hooks, the hook's task starts right there, as
the handler would start it (`handle_hook` in a task of mitmproxy's, same name). If the
task has finished without an error, the stream goes on at once, as it does when a
`HookCompleted` arrives (its reply is None). Otherwise (an addon waited: a lookup, an
intercepted flow; or it raised), the `StartHook` is yielded as before, carrying its
running task, and the handler's `handle_hook` awaits that task instead of starting the
hook a second time: the completion comes back the usual way.

What a layer or addon sees does not change: every hook runs, in the same order, with the
same flow, inside the handler's event (mitmproxy's eager task ran it there too). What a
stream sent before a hook answered in place leaves with what it sends after it, in one
write: a streamed chunked answer's body and last chunk, around the `response` hook. Where
nothing follows the hook on the wire (a streamed body on an HTTP/1 leg without chunked
coding, `ends_with_body`), the hook goes through the layers as before, so the peer has the
whole message before the hook's work runs. Only the two trips through the layers go.
tests/runtime/test_streamhooks.py counts `HookCompleted` events per request and pins the
mitmproxy internals this relies on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from typing import Any

from mitmproxy.proxy import commands
from mitmproxy.proxy.layers import http
from mitmproxy.utils import asyncio_utils

PER_REQUEST = (
    http.HttpRequestHeadersHook,
    http.HttpRequestHook,
    http.HttpResponseHeadersHook,
    http.HttpResponseHook,
)
RUNNING = "egress_running_task"  # on a StartHook yielded with its task already started
STARTER = "egress_start_hook"  # on a connection's root layer: how its streams start a hook
ORIGINAL_INIT = http.HttpStream.__init__

Start = Callable[[commands.StartHook], "asyncio.Task[None]"]
Commands = Generator[commands.Command, Any, None]


def attach(handler: Any) -> None:
    """Let the streams of `handler` (a mitmproxy `ConnectionHandler`, before
    `handle_client`) start their hooks themselves. Call it before anything wraps
    `handler.handle_hook` (runtime/engine/inlinehooks.py reads it once)."""
    handle_hook = handler.handle_hook

    def start(hook: commands.StartHook) -> asyncio.Task[None]:
        # What the handler's `server_event` does with a StartHook, less the completion.
        return asyncio_utils.create_task(
            handle_hook(hook),
            name=f"handle_hook({hook.name})",
            keep_ref=True,
            client=handler.client.peername,
        )

    async def handling(hook: commands.StartHook) -> None:
        running: asyncio.Task[None] | None = hook.__dict__.pop(RUNNING, None)
        if running is None:
            await handle_hook(hook)
        else:
            await running  # started by the stream: not a second time

    handler.handle_hook = handling
    setattr(handler.layer, STARTER, start)


def _init(self: http.HttpStream, context: Any, stream_id: int) -> None:
    ORIGINAL_INIT(self, context, stream_id)
    start: Start | None = getattr(context.layers[0], STARTER, None)
    if start is not None:
        self._handle_event = _answering(self, start)


def _answering(stream: http.HttpStream, start: Start) -> Callable[[Any], Commands]:
    """The stream's own `_handle_event`: the class's, whatever wraps it now (our addons'
    `addons/layers/limits.py` and `addons/layers/pushgate.py` do, after the engine starts), with the
    hooks that come out of it answered in place. Outermost, so every wrapper sees each
    hook as it did."""
    cls = type(stream)

    def handle_event(event: Any) -> Commands:
        return _answered(cls._handle_event(stream, event), start, stream)

    return handle_event


def ends_with_body(stream: http.HttpStream, hook: commands.StartHook) -> bool:
    """Whether `hook` follows a body `stream` has streamed and whose last byte was the
    message's last: an HTTP/1 leg without chunked coding sends nothing at its end. Such a
    hook goes through the layers, which hand on what was sent before it first: the peer
    has its whole message before the hook runs, as before (D311)."""
    flow = hook.flow  # type: ignore[attr-defined]  # the four per-request hooks carry it
    if type(hook) is http.HttpResponseHook:
        if stream.server_state != stream.state_stream_response_body:
            return False
        message, http1 = flow.response, not (flow.request.is_http2 or flow.request.is_http3)
    elif type(hook) is http.HttpRequestHook:
        if stream.client_state != stream.state_stream_request_body:
            return False
        message, http1 = flow.request, flow.server_conn.alpn not in (b"h2", b"h3")
    else:
        return False
    return http1 and "chunked" not in message.headers.get("transfer-encoding", "").lower()


def _answered(produced: Commands, start: Start, stream: http.HttpStream) -> Commands:
    """`produced`, with each per-request hook that finishes at once answered in place."""
    try:
        sent: Any = None
        while True:
            try:
                command = produced.send(sent)
            except StopIteration:
                return
            while isinstance(command, PER_REQUEST) and not ends_with_body(stream, command):
                running = start(command)
                if not running.done() or running.cancelled() or running.exception() is not None:
                    setattr(command, RUNNING, running)  # its completion comes as before
                    break
                try:
                    command = produced.send(None)  # what HookCompleted hands the stream
                except StopIteration:
                    return
            sent = yield command
    finally:
        produced.close()


def install() -> None:
    """From now on a stream of an attached handler starts its own hooks (idempotent)."""
    http.HttpStream.__init__ = _init  # type: ignore[method-assign]
