"""A hook that finishes at once is handed on by the event that started it (issue 36,
runtime/engine/inlinehooks.py): kept-alive requests through the real lean engine, with hooks
that finish at once and hooks that wait, against mitmproxy's own hand-over."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path

import pytest
from mitmproxy.proxy import server

from sandbox_egress.runtime.engine import inlinehooks, lean, patches, streamhooks
from sandbox_egress.runtime.engine.inlinehooks import free
from testbed.fixed_upstream import FixedResponse, start_lean_engine
from testbed.hookaddon import HOOKS
from testbed.hookaddon import PerRequestHooks as Hooks

BODY = b"inline hooks " * 10
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
REQUESTS = 20


def through_proxy(
    tmp_path: Path, hooks: Hooks, inline: bool, streams: bool = False
) -> tuple[int, list[bytes]]:
    """`REQUESTS` kept-alive GETs through the engine: the handlers' lock waits per request
    (after the first) and every response head."""
    waits = 0

    async def main() -> list[bytes]:
        nonlocal waits
        up = await asyncio.get_running_loop().create_server(
            FixedResponse.serving(RESPONSE), "127.0.0.1", 0
        )
        up_port = up.sockets[0].getsockname()[1]
        master, runner, port = await start_lean_engine(
            tmp_path / "conf", lambda master: master.addons.add(hooks)
        )
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        heads = []

        async def one() -> None:
            writer.write(b"GET http://127.0.0.1:%d/ HTTP/1.1\r\nHost: x\r\n\r\n" % up_port)
            heads.append(await reader.readuntil(b"\r\n\r\n"))
            assert await reader.readexactly(len(BODY)) == BODY

        await one()  # opens the upstream connection
        original = asyncio.Lock.acquire

        async def counting(self: asyncio.Lock) -> bool:
            nonlocal waits
            waits += not free(self)
            return await original(self)

        asyncio.Lock.acquire = counting  # type: ignore[method-assign]
        try:
            for _ in range(REQUESTS):
                await one()
        finally:
            asyncio.Lock.acquire = original  # type: ignore[method-assign]
        writer.close()
        master.shutdown()
        await runner
        up.close()
        return heads

    if inline:
        with pytest.MonkeyPatch.context() as patch:
            if not streams:  # the hand-over alone (D311 answers most hooks before it)
                patch.setattr(streamhooks, "attach", lambda handler: None)
            heads = asyncio.run(main())
    else:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(inlinehooks, "answer_hooks_inline", lambda handler: None)
            # mitmproxy's hand-over: nor do the streams start their own hooks (D311)
            patch.setattr(streamhooks, "attach", lambda handler: None)
            heads = asyncio.run(main())
    return waits // REQUESTS, heads


CASES = {
    # (hooks that wait a loop turn, lock waits per request: mitmproxy's, inline)
    "every hook at once": ((), 4, 0),
    "the request head waits (a lookup)": (("requestheaders",), 3, 0),
    "every hook waits": (HOOKS, 0, 0),
}


@pytest.mark.parametrize(("waiting", "before", "after"), CASES.values(), ids=CASES.keys())
def test_hooks_that_finish_at_once_wait_for_no_lock(
    tmp_path: Path, waiting: tuple[str, ...], before: int, after: int
) -> None:
    hooks_before, hooks_after = Hooks(waiting), Hooks(waiting)
    waits_before, heads_before = through_proxy(tmp_path / "before", hooks_before, inline=False)
    waits_after, heads_after = through_proxy(tmp_path / "after", hooks_after, inline=True)
    assert (waits_before, waits_after) == (before, after)
    # The same answers and the same hooks, in the same order, either way.
    assert len(heads_after) == REQUESTS + 1
    assert all(h.startswith(b"HTTP/1.1 200") and b"x-hooked: /\r\n" in h for h in heads_after)
    assert heads_after == heads_before
    assert hooks_after.seen == hooks_before.seen == list(HOOKS) * (REQUESTS + 1)


def test_the_internals_inline_hooks_rely_on() -> None:
    """The handler's loop holds its lock and never waits inside it; a hook task hands its
    completion to `server_event`; asyncio's lock keeps its waiters where `free` reads them."""
    source = inspect.getsource(server.ConnectionHandler.server_event)
    held = source.index("async with self._server_event_lock:")
    inside = source[held:].splitlines()[1:]
    assert not [line for line in inside if "await" in line.partition("#")[0]]
    assert "self.hook_task(command)" in source
    hook_task = inspect.getsource(server.ConnectionHandler.hook_task)
    assert "await self.server_event(events.HookCompleted(hook))" in hook_task
    lock = asyncio.Lock()
    assert lock._waiters is None and free(lock)  # type: ignore[attr-defined]
    assert "self._waiters" in inspect.getsource(asyncio.Lock.acquire)
    register = inspect.getsource(lean.CoalescingProxyserver.register_connection)
    assert "patches.attach(handler)" in register
    assert "inlinehooks" in [row.name for row in patches.rows(patches.Stage.CONNECTION)]
