"""A hook that finishes at once is answered by the event that started it (issue 36).

mitmproxy's connection handler runs each hook an addon has (four per kept-alive request)
in a task of its own, which then hands the layers `HookCompleted` through
`server_event`. Under the eager task factory mitmproxy installs, that task runs at once,
inside the `server_event` that started it: when the addons finish without waiting, its
`server_event(HookCompleted)` meets the handler's lock, still held by that very call,
and waits for a turn of the event loop (a future, a wake-up, one more loop iteration per
hook: about a tenth of a kept-alive request's CPU).

`answer_hooks_inline(handler)` keeps the hooks' tasks and their semantics and changes
only who hands on a completion that came back while the handler was still dispatching:
the `server_event` that started the hook does, right after its own loop, before it
returns (taking the lock again, behind any event already waiting for it). A hook that
waited (a lookup, a held body) is handed on by its task, as before. The order of the
events a layer sees is one mitmproxy allows anyway: the completion of a hook that ran
to its end before anything else happened.

tests/runtime/test_inlinehooks.py pins the mitmproxy internals this relies on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from mitmproxy.proxy import commands, events
from mitmproxy.utils import asyncio_utils

from sandbox_egress.runtime.engine.hooksinplace import DONE

ServerEvent = Callable[[events.Event], Coroutine[Any, Any, None]]


def answer_hooks_inline(handler: Any) -> None:
    """Install on `handler` (a mitmproxy `ConnectionHandler`).

    The handler's lock is held exactly while one `server_event` runs its loop, which never
    waits: a hook task that finds it held runs inside that loop (eagerly started by it).
    """
    lock: asyncio.Lock = handler._server_event_lock
    server_event: ServerEvent = handler.server_event
    handle_hook = handler.handle_hook
    completed: list[commands.StartHook] = []  # finished inside a loop: handed on after it

    async def hook_task(hook: commands.StartHook) -> None:
        await handle_hook(hook)
        if not hook.blocking:
            return
        if lock.locked():
            completed.append(hook)
            hook.__dict__[DONE] = completed  # the paused layer may take it back (D314)
        else:
            await handler.server_event(events.HookCompleted(hook))

    async def answering(event: events.Event) -> None:
        await server_event(event)
        while completed and not lock.locked():  # (held: an outer loop's call hands them on)
            completion = events.HookCompleted(completed.pop(0))
            if free(lock):  # taken at once: this await never suspends, nothing can cut it
                await server_event(completion)
            else:  # others wait for the lock: this one waits in line in a task, as before
                asyncio_utils.create_task(
                    answering(completion),
                    name=f"handle_hook({completion.command.name}) completed",
                    keep_ref=True,
                    client=handler.client.peername,
                )

    handler.hook_task = hook_task
    handler.server_event = answering


def free(lock: asyncio.Lock) -> bool:
    """Whether `lock.acquire()` would take the lock without waiting (asyncio's own test:
    unlocked, and no waiter that is not cancelled)."""
    waiters = lock._waiters  # asyncio's, pinned by the tests
    return not lock.locked() and (waiters is None or all(w.cancelled() for w in waiters))
