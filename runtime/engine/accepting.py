"""Out of descriptors: pause accepting, say so once, count it — never spin.

asyncio's selector loop (CPython 3.12) meets `EMFILE` on `accept()` by removing the
listener's reader and retrying a second later — but it does not stop there: the loop of
up to `backlog` accepts goes on, each failing, each logging a traceback and scheduling
another retry. Measured on the proxy at a 256-descriptor limit (issue 21): ~6,500
tracebacks in 12 s, a busy loop, and a second client never answered.

`install(on_pause)` replaces `BaseSelectorEventLoop._accept_connection` with the same
loop that returns at the first resource error: the listener is paused for `PAUSE_S`
and `on_pause()` is called (a count of `egress_bound_hits_total{bound="accept"}`);
accepting resumes by itself. One log line says so, at most once per `LOG_EVERY_S`. Every other
path is CPython's own (`_accept_connection2`, `_start_serving`);
tests/proxy/test_accepting.py pins the signatures this relies on.
"""

from __future__ import annotations

import errno
import logging
import socket
from asyncio import selector_events
from collections.abc import Callable
from typing import Any

log = logging.getLogger("egress")

PAUSE_S = 1.0
LOG_EVERY_S = 10.0
OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

_LOOP = selector_events.BaseSelectorEventLoop
_METHOD = "_accept_connection"  # private to CPython: typeshed does not list it
_original = getattr(_LOOP, _METHOD)
_state: dict[str, Any] = {"on_pause": None, "logged": None}


def install(on_pause: Callable[[], None]) -> None:
    """Use the bounded accept loop in every selector event loop of this process."""
    _state["on_pause"] = on_pause
    setattr(_LOOP, _METHOD, _accept_connection)


def _accept_connection(
    self: Any,
    protocol_factory: Any,
    sock: socket.socket,
    sslcontext: Any = None,
    server: Any = None,
    backlog: int = 100,
    *timeouts: Any,
) -> None:
    for _ in range(backlog):
        try:
            conn, addr = sock.accept()
            conn.setblocking(False)
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            return
        except OSError as exc:
            if exc.errno not in OUT_OF_RESOURCES:
                raise
            _pause(self, exc, (protocol_factory, sock, sslcontext, server, backlog, *timeouts))
            return
        accept = self._accept_connection2(
            protocol_factory, conn, {"peername": addr}, sslcontext, server, *timeouts
        )
        self.create_task(accept)


def _pause(loop: Any, exc: OSError, serving: tuple[Any, ...]) -> None:
    """Stop reading the listener for `PAUSE_S`; report the episode once."""
    sock = serving[1]
    loop._remove_reader(sock.fileno())
    loop.call_later(PAUSE_S, loop._start_serving, *serving)
    on_pause = _state["on_pause"]
    if on_pause is not None:
        on_pause()
    now, logged = loop.time(), _state["logged"]
    if logged is None or now - logged >= LOG_EVERY_S:
        _state["logged"] = now
        log.warning(
            "out of file descriptors (%s): accepting paused, retried every %g s", exc, PAUSE_S
        )
