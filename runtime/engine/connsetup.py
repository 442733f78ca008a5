"""Work a new connection repeated that depends only on a hook's class or a host's name,
or that it threw away (issue 36, D315).

* mitmproxy's `ProxyConnectionHandler.handle_hook` unpacks each hook's one argument with
  `hook.args()`, which reads the hook class's dataclass fields anew every time (nineteen
  hooks per new intercepted connection), inside `TimeoutWatchdog.disarm()`, a context
  manager made from a generator per hook. `handle_hook` here is mitmproxy's method with
  `hook_args` (runtime/engine/hookargs.py: the field names kept per class, D151), and
  `disarm`'s body written out around it.
* mitmproxy's `TlsConfig.get_cert` turns the client's SNI and the upstream's address into
  `x509.GeneralName`s for each client handshake (`_ip_or_dns_name`: an `ip_address` parse
  that fails for every host name, then an IDNA encoding). The function is pure and its
  results are immutable, so they are kept per name (`NAMES`, least recently used first
  out): a sandbox that names many hosts only recycles the cache. A name that fails to
  encode raises each time, as before (nothing is kept for it). The certificate lookup
  itself is mitmproxy's (its store keys certificates by name and expires them).
* mitmproxy's `Context.fork` builds a `Context` through its `__init__`, which makes a new
  `Server` (a UUID from `os.urandom`, a dataclass of 20 fields each set through
  `Server.__setattr__`), and then replaces it by the parent's: five of the seven `Server`s
  of a new intercepted connection were made to be dropped. `fork` here sets the same four
  attributes, in the same order, without making one.

tests/runtime/test_connsetup.py pins the mitmproxy source each replacement copies.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from mitmproxy import flow
from mitmproxy.addons import tlsconfig
from mitmproxy.proxy import commands, context, mode_servers

from sandbox_egress.runtime.engine.hookargs import hook_args

NAMES = 1024  # names whose GeneralName is kept
ORIGINAL_HANDLE_HOOK = mode_servers.ProxyConnectionHandler.handle_hook
ORIGINAL_IP_OR_DNS_NAME = tlsconfig._ip_or_dns_name
ORIGINAL_FORK = context.Context.fork
general_name = functools.lru_cache(maxsize=NAMES)(ORIGINAL_IP_OR_DNS_NAME)
_hook_args: Callable[[commands.StartHook], list[Any]] = commands.StartHook.args


async def handle_hook(self: Any, hook: commands.StartHook) -> None:
    # mitmproxy 12's `ProxyConnectionHandler.handle_hook` with `hook_args(hook)` for
    # `hook.args()` and `TimeoutWatchdog.disarm`'s body for the context manager (a
    # generator and its manager per hook).
    watchdog = self.timeout_watchdog
    watchdog.can_timeout.clear()
    watchdog.blocker += 1
    try:
        # We currently only support single-argument hooks.
        (data,) = _hook_args(hook)
        await self.master.addons.handle_lifecycle(hook)
        if isinstance(data, flow.Flow):
            await data.wait_for_resume()  # type: ignore[no-untyped-call]  # pragma: no cover
    finally:
        watchdog.blocker -= 1
        if watchdog.blocker == 0:
            watchdog.register_activity()
            watchdog.can_timeout.set()


def fork(self: context.Context) -> context.Context:
    """mitmproxy 12's `Context.fork` without the `Server` its `__init__` made."""
    ret = context.Context.__new__(context.Context)
    ret.client = self.client
    ret.options = self.options
    ret.server = self.server
    ret.layers = self.layers.copy()
    return ret


def install() -> None:
    """Hook arguments read per class, names turned into certificate names once, contexts
    forked without a spare `Server` (idempotent)."""
    global _hook_args
    _hook_args = hook_args
    mode_servers.ProxyConnectionHandler.handle_hook = handle_hook  # type: ignore[method-assign]
    tlsconfig._ip_or_dns_name = general_name
    context.Context.fork = fork  # type: ignore[method-assign]
