"""One write per message where mitmproxy does several (issue 26).

mitmproxy's HTTP/1 layer sends a message's head and its body as two `SendData` commands,
and its connection handler turns each into one `writer.write`: one `send()` per command,
and on a TLS leg one TLS record per command as well. All of a message's commands come out
of one `handle_event` call (one event-loop turn), so nothing needs to wait to merge them.

`coalesced` wraps a layer's `handle_event` output: consecutive `SendData` to the same TCP
connection become one `SendData` with their bytes joined. Order is kept: the pending bytes
are handed on before any other command (a close, a hook) and at the end of the event; a
log line is handed on at once without ending the run (D172). UDP is never merged (each
`SendData` is a datagram there).

Where it is applied (`coalesce_root`, `coalesce_tunnel`):
* the root layer of every connection handler: one `writer.write` per connection per
  event — one `send()` per message on each leg, plain or TLS;
* the child of a client-side TLS layer (and the layer decided under it): the head and
  body reach `SSL_write` as one plaintext, so one TLS record carries both;
* the child of a server-side TLS layer that mitmproxy's HTTP layer builds for an upstream
  connection (`coalesce_request`, D166): there the request's head, body and end arrive as
  separate events, one `handle_event` each, in one turn of the HTTP layer; what they send
  is held from the head to the end of the message and handed on as one plaintext, one
  TLS record. Only a request whose body is already read (`raw_content` set, not streamed,
  at most `MAX_JOINED`) is held: nothing waits for the client or for the next turn.

The bytes on the wire are the same; only how many writes carry them changes.
tests/proxy/test_coalesce.py pins the mitmproxy internals this relies on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from mitmproxy.proxy import commands, layer
from mitmproxy.proxy.layers import http, tls

HandleEvent = Callable[[Any], Iterable[commands.Command]]

# A joined write is capped so that one huge body does not become one huge bytes copy.
MAX_JOINED = 256 * 1024


def coalesced(produced: Iterable[commands.Command]) -> Iterator[commands.Command]:
    """`produced` with each run of `SendData` to one TCP connection joined into one."""
    pending: commands.SendData | None = None
    parts: list[bytes] = []
    size = 0
    try:
        for command in produced:
            if (
                type(command) is commands.SendData
                and command.connection.transport_protocol == "tcp"
            ):
                if (
                    pending is not None
                    and command.connection is pending.connection
                    and size + len(command.data) <= MAX_JOINED
                ):
                    parts.append(command.data)
                    size += len(command.data)
                    continue
                if pending is not None:
                    yield _joined(pending, parts)
                pending, parts, size = command, [command.data], len(command.data)
                continue
            if type(command) is commands.Log:
                # A log line is no part of any connection's bytes: it goes first and the
                # run goes on (mitmproxy logs between a streamed response's head and body).
                yield command
                continue
            if pending is not None:
                yield _joined(pending, parts)
                pending, parts, size = None, [], 0
            yield command
    except Exception:
        # The layer failed mid-event: what it had sent before still goes out, as before.
        if pending is not None:
            yield _joined(pending, parts)
        raise
    if pending is not None:
        yield _joined(pending, parts)


def _joined(first: commands.SendData, parts: list[bytes]) -> commands.SendData:
    if len(parts) == 1:
        return first
    return commands.SendData(first.connection, b"".join(parts))


def _wrap(layer: Any) -> None:
    """Make `layer.handle_event` (an instance attribute from now on) coalesce its output."""
    if getattr(layer.handle_event, "coalescing", False):
        return
    inner: HandleEvent = layer.handle_event

    def handle_event(event: Any) -> Iterator[commands.Command]:
        return coalesced(inner(event))

    handle_event.coalescing = True  # type: ignore[attr-defined]
    layer.handle_event = handle_event


def coalesce_root(handler: Any) -> None:
    """Coalesce what a connection handler's root layer sends (before `handle_client`)."""
    _wrap(handler.layer)


def coalesce_tunnel(layer: Any) -> None:
    """Coalesce what the child of a tunnel layer (TLS) sends into the tunnel.

    The child is usually a `NextLayer` that, once decided, replaces its own `handle_event`
    by the decided layer's: it is marked, and `coalesce_decided` wraps that layer too.
    """
    child = getattr(layer, "child_layer", None)
    if child is not None:
        child.coalesce_decided = True
        _wrap(child)


def coalesce_decided(nextlayer: Any) -> None:
    """After a `next_layer` decision: a marked `NextLayer`'s decided layer coalesces too."""
    if getattr(nextlayer, "coalesce_decided", False) and nextlayer.layer is not None:
        _wrap(nextlayer.layer)


def coalesce_request(tls_start: tls.TlsData) -> None:
    """At `tls_start_server`: the child of the server TLS layer that starts sends a request
    with a body as one plaintext (one TLS record) instead of one per event."""
    for found in tls_start.context.layers:
        if isinstance(found, tls.ServerTLSLayer) and found.conn is tls_start.conn:
            child = getattr(found, "child_layer", None)
            if child is not None and not isinstance(child, layer.NextLayer):
                _hold_messages(child)
            return


def _hold_messages(child: Any) -> None:
    if getattr(child.handle_event, "holding", False):
        return
    inner: HandleEvent = child.handle_event
    held: list[commands.SendData] = []  # what the message sent so far, not yet handed on

    def handle_event(event: Any) -> Iterator[commands.Command]:
        if type(event) is http.RequestHeaders:
            body = event.request.raw_content
            holding = not event.end_stream and body is not None and 0 < len(body) <= MAX_JOINED
        else:
            holding = bool(held) and isinstance(event, http.HttpEvent)
        ends = type(event) is http.RequestEndOfMessage
        try:
            for command in inner(event):
                if type(command) is commands.SendData and holding:
                    if held and command.connection is not held[0].connection:
                        yield _release(held)
                    held.append(command)
                    continue
                if held:
                    yield _release(held)
                yield command
        except Exception:
            if held:
                yield _release(held)
            raise
        if held and (ends or not holding):
            yield _release(held)

    handle_event.holding = True  # type: ignore[attr-defined]
    child.handle_event = handle_event


def _release(held: list[commands.SendData]) -> commands.SendData:
    joined = _joined(held[0], [c.data for c in held])
    held.clear()
    return joined
