"""The mitmproxy calls the addons make that mitmproxy leaves unannotated, typed once here.

mitmproxy ships `py.typed`, but `Flow.kill`, `AddonManager.get` and
`http1.assemble_response` have no annotations: under `mypy --strict` each call is an
untyped call that returns `Any`. Each wrapper binds the mitmproxy function to a variable
annotated with the type this project relies on (mypy checks that assignment, so an
upstream annotation that disagrees fails `make lint` here) and calls through; it adds no
behaviour (D151). Subclasses of mitmproxy internals (`runtime/engine.py`) are typed where
they are written instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mitmproxy import ctx, flow, http
from mitmproxy.net.http import http1


def kill(killed: flow.Flow) -> None:
    """`killed.kill()`: mitmproxy ends the flow (and, for HTTP, its stream or connection)."""
    kill_flow: Callable[[], None] = killed.kill
    kill_flow()


def inject_websocket(into: http.HTTPFlow, text: bytes) -> None:
    """mitmproxy's `inject.websocket` command: a text message sent to the client."""
    inject: Callable[..., Any] = ctx.master.commands.call
    inject("inject.websocket", into, True, text, True)


def addon(name: str) -> Any:
    """The running master's addon called `name` (mitmproxy's own too), or None."""
    lookup: Callable[[str], Any] = ctx.master.addons.get
    return lookup(name)


def assemble_response(response: http.Response) -> bytes:
    """The HTTP/1 bytes of `response`: status line, headers, body."""
    assemble: Callable[[http.Response], bytes] = http1.assemble_response
    return assemble(response)
