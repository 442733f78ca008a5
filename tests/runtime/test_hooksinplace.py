"""A layer whose hook finished at once carries on in place (issue 36, D314,
runtime/engine/hooksinplace.py): new intercepted TLS connections through the real lean engine
(CONNECT, TLS on both legs, GETs), with hooks that finish at once and hooks that wait,
against mitmproxy's own `Layer.handle_event`; and the mitmproxy source it copies."""

from __future__ import annotations

import ast
import asyncio
import inspect
import ssl
import textwrap
from pathlib import Path
from typing import Any

import mitmproxy.proxy
import pytest
from mitmproxy.proxy import events, layer, server
from mitmproxy.proxy.layers.http import HttpLayer

from sandbox_egress.runtime.engine import hooksinplace, inlinehooks, streamhooks
from testbed.fixed_upstream import FixedResponse, server_context, start_lean_engine
from testbed.hookaddon import HOOKS as PER_REQUEST
from testbed.hookaddon import PerRequestHooks as Hooks

BODY = b"in place " * 10
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
CONNECTIONS = 3
REQUESTS = 4  # kept-alive GETs on each connection
# The hooks mitmproxy's layers start on a new intercepted connection (the handler itself
# starts client_connected, server_connect(ed) and the *_disconnected ones, not a layer).
PER_CONNECTION = (
    "next_layer", "http_connect", "http_connected", "next_layer", "tls_clienthello",
    "tls_start_client", "tls_established_client", "next_layer",
)  # fmt: skip
FIRST_REQUEST_ONLY = ("tls_start_server", "tls_established_server")  # the upstream's TLS
LAYER_HOOKS = len(PER_CONNECTION) + len(FIRST_REQUEST_ONLY) + len(PER_REQUEST) * REQUESTS


class Traffic:
    """What went through the engine: the completions handed to the handlers as events,
    the HTTP layers left at the end, the responses."""

    def __init__(self) -> None:
        self.completions = 0
        self.http_layers: list[HttpLayer] = []
        self.responses: list[bytes] = []


def through_engine(tmp_path: Path, hooks: Hooks, in_place: bool) -> Traffic:
    traffic = Traffic()
    original_event = server.ConnectionHandler.server_event

    async def counting(self: Any, event: events.Event) -> None:
        traffic.completions += isinstance(event, events.HookCompleted)
        await original_event(self, event)

    async def main() -> None:
        up = await asyncio.get_running_loop().create_server(
            FixedResponse.serving(RESPONSE), "127.0.0.1", 0, ssl=server_context(tmp_path)
        )
        up_port = up.sockets[0].getsockname()[1]
        master, runner, port = await start_lean_engine(
            tmp_path / "conf", lambda master: master.addons.add(hooks)
        )
        client_tls = ssl.create_default_context()
        client_tls.check_hostname, client_tls.verify_mode = False, ssl.CERT_NONE
        for n in range(CONNECTIONS):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"CONNECT localhost:%d HTTP/1.1\r\nHost: x\r\n\r\n" % up_port)
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
            await writer.start_tls(client_tls, server_hostname="localhost")
            for r in range(REQUESTS):
                writer.write(b"GET /%d/%d HTTP/1.1\r\nHost: localhost\r\n\r\n" % (n, r))
                head = await reader.readuntil(b"\r\n\r\n")
                traffic.responses.append(head + await reader.readexactly(len(BODY)))
            writer.close()
            await writer.wait_closed()
        master.shutdown()
        await runner
        up.close()

    original_init = HttpLayer.__init__

    def noted(self: HttpLayer, *args: Any) -> None:
        original_init(self, *args)
        traffic.http_layers.append(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(server.ConnectionHandler, "server_event", counting)
        patch.setattr(HttpLayer, "__init__", noted)
        # D311 answers a request's hooks inside its stream, before any layer sees them: off
        # in both runs, so that the layers' completions measure D314 alone.
        patch.setattr(streamhooks, "attach", lambda handler: None)
        if not in_place:  # mitmproxy's methods, and the engine does not install ours
            patch.setattr(hooksinplace, "install", lambda: None)
            patch.setattr(layer.Layer, "handle_event", hooksinplace.ORIGINAL_HANDLE_EVENT)
            patch.setattr(layer.Layer, "_Layer__process", hooksinplace.ORIGINAL_PROCESS)
        asyncio.run(main())
    return traffic


CASES = {
    # (hooks that wait a loop turn, completions sent as events: mitmproxy's, in place)
    "every hook at once": ((), LAYER_HOOKS, 0),
    "the request head waits (a lookup)": (("requestheaders",), LAYER_HOOKS, REQUESTS),
    "every request hook waits": (PER_REQUEST, LAYER_HOOKS, len(PER_REQUEST) * REQUESTS),
}


@pytest.mark.parametrize(("waiting", "before", "after"), CASES.values(), ids=CASES.keys())
def test_hooks_that_finish_at_once_are_answered_in_place(
    tmp_path: Path, waiting: tuple[str, ...], before: int, after: int
) -> None:
    hooks_before, hooks_after = Hooks(waiting), Hooks(waiting)
    mitmproxys = through_engine(tmp_path / "before", hooks_before, in_place=False)
    ours = through_engine(tmp_path / "after", hooks_after, in_place=True)
    assert mitmproxys.completions == before * CONNECTIONS
    assert ours.completions == after * CONNECTIONS
    # The same responses and the same hooks, in the same order, either way.
    assert ours.responses == mitmproxys.responses
    assert len(ours.responses) == CONNECTIONS * REQUESTS
    for n, response in enumerate(ours.responses):
        path = b"/%d/%d" % divmod(n, REQUESTS)
        assert response.startswith(b"HTTP/1.1 200") and b"x-hooked: " + path in response
    assert (hooks_after.seen, hooks_after.paths) == (hooks_before.seen, hooks_before.paths)
    assert len(hooks_after.seen) == CONNECTIONS * REQUESTS * len(PER_REQUEST)


def test_the_http_layer_forgets_the_hooks_answered_in_place(tmp_path: Path) -> None:
    # HttpLayer notes each blocking command it passes up, to route its completion; a
    # completion taken in place never reaches it, so the note is removed (else every
    # request's hooks would stay referenced for the connection's life).
    traffic = through_engine(tmp_path, Hooks(), in_place=True)
    assert traffic.http_layers
    assert [len(each.command_sources) for each in traffic.http_layers] == [0] * len(
        traffic.http_layers
    )


def _body(function: Any, drop_marked: bool) -> str:
    """The statements of `function`, comments and docstring left out, normalized."""
    lines = inspect.getsource(function).splitlines()
    if drop_marked:
        kept, skip_block = [], None
        for line in lines:
            indent = len(line) - len(line.lstrip())
            if skip_block is not None and indent > skip_block:
                continue
            skip_block = None
            if "# D314" in line:
                skip_block = indent
                continue
            kept.append(line)
        lines = kept
    tree = ast.parse(textwrap.dedent("\n".join(lines)))
    definition = tree.body[0]
    assert isinstance(definition, ast.FunctionDef | ast.AsyncFunctionDef)
    body = definition.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    # The product runs under `python -O` (D75), which strips mitmproxy's `assert`s: the
    # copy leaves them out (no `assert` in product code), so both sides are read without.
    body = [
        _without_asserts(statement) for statement in body if not isinstance(statement, ast.Assert)
    ]
    text = "\n".join(ast.unparse(statement) for statement in body)
    return text.replace("self._Layer__", "self.__").replace("layer.Paused(", "Paused(")


def _without_asserts(node: ast.stmt) -> ast.stmt:
    for child in ast.walk(node):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(child, field, None)
            if isinstance(block, list) and block:
                kept = [each for each in block if not isinstance(each, ast.Assert)]
                setattr(child, field, kept or [ast.Pass()])
    return node


def test_the_copies_are_mitmproxys_methods_and_two_lines() -> None:
    assert _body(hooksinplace.handle_event, drop_marked=True) == _body(
        hooksinplace.ORIGINAL_HANDLE_EVENT, drop_marked=False
    )
    assert _body(hooksinplace._process, drop_marked=True) == _body(
        hooksinplace.ORIGINAL_PROCESS, drop_marked=False
    )
    # What the added lines do is what a `HookCompleted` event would: `__continue`, which
    # goes on with `__process` (ours, once installed).
    assert "self.__process(command_generator, event.reply)" in inspect.getsource(
        layer.Layer._Layer__continue  # type: ignore[attr-defined]
    )


def test_only_the_http_and_quic_layers_track_the_blocking_commands_they_pass_up() -> None:
    # The layers that note a child's blocking command to route its completion, and how
    # they do (what `_answered` undoes).
    root = Path(mitmproxy.proxy.__file__).parent
    mentions = sorted(
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if ".blocking" in path.read_text()
    )
    assert mentions == [
        "layer.py", "layers/http/__init__.py", "layers/quic/_raw_layers.py", "server.py"
    ]  # fmt: skip
    routing = inspect.getsource(HttpLayer)
    assert "self.command_sources[command] = child" in routing
    assert "stream = self.command_sources.pop(event.command)" in routing
    quic = (root / "layers/quic/_raw_layers.py").read_text()
    assert "self.command_sources[command] = child_layer" in quic
    assert "self.command_sources.pop(event.command)" in quic


def test_a_completion_is_marked_only_while_the_handler_dispatches() -> None:
    # inlinehooks puts the mark the layer reads on a hook that finished inside the loop.
    assert "hook.__dict__[DONE] = completed" in inspect.getsource(inlinehooks)
    assert hooksinplace.DONE == inlinehooks.DONE
