"""The lean mitmproxy engine the proxy runs on: mitmproxy's own layers, less machinery.

`mitmdump` dispatches every hook to its ~36 addons and sends an `update` event after each
flow hook: about 300 addon calls per kept-alive request, almost none of which do anything
for an egress proxy. `LeanMaster` is a `mitmproxy.master.Master` with only the addons a
regular or transparent proxy needs (`ADDONS`) and an addon manager that keeps, per hook
name, the list of handlers that exist, so a hook costs one call per addon implementing it.
`LeanOptions` reads scalar options without mitmproxy's defensive deep copy.

Six changes below mitmproxy's hooks, none visible to clients (issue 26): what a layer
sends within one event goes out as one write per connection, one TLS record per message
to the client (runtime/engine/coalesce.py, D142) and per request upstream (D166); an idle TLS
connection frees OpenSSL's buffers (D144); what is loaded at start is frozen out of the
garbage collector (D143); the connections presenting one certificate share one OpenSSL
copy of it and its key (D161); a layer makes its queue of paused events only when one
arrives (D163). Issue 36 adds: an HTTP/2 body goes through the layers once per read, not
once per DATA frame (runtime/engine/h2data.py, D289); a layer whose hook finished at once
resumes in place (runtime/engine/hooksinplace.py, D314); what a new connection did per hook class
or per host, or made only to drop, is done once or not at all (runtime/engine/connsetup.py, D315).

It is mitmproxy underneath: the same proxy server, layers, TLS, options and hook
semantics. What `LeanAddonManager` keeps of `mitmproxy.addonmanager.AddonManager`:
chain order; sub-addons (`.addons`) after their parent, depth first; sync and async
handlers; an exception logged (`safecall`) and the chain going on with the next addon;
`AddonHalt` stopping the chain; the `update` hook after a flow hook (sent only when some
addon implements it). tests/proxy/test_engine.py pins each of these against the installed
mitmproxy and fails when an upgrade changes an internal this module relies on.
"""

from __future__ import annotations

import asyncio
import copy
import gc
import inspect
import types
from collections.abc import Callable, Iterator
from contextlib import _GeneratorContextManager
from typing import Any

from mitmproxy import exceptions, flow, hooks, master, options, optmanager
from mitmproxy.addonmanager import AddonManager, safecall, traverse
from mitmproxy.addons import (
    block,
    core,
    disable_h2c,
    errorcheck,
    next_layer,
    proxyserver,
    tlsconfig,
)
from mitmproxy.proxy import layer
from mitmproxy.proxy.layers import tls
from mitmproxy.tls import TlsData
from OpenSSL import SSL
from OpenSSL._util import lib as _ssl_lib

from sandbox_egress.runtime.engine import idlebios, patches, tickets
from sandbox_egress.runtime.engine.coalesce import (
    coalesce_decided,
    coalesce_request,
    coalesce_tunnel,
)
from sandbox_egress.runtime.engine.emptylines import skip_empty_lines
from sandbox_egress.runtime.engine.hookargs import hook_args
from sandbox_egress.runtime.engine.idlechain import DropUpstreamChainCopy
from sandbox_egress.runtime.engine.patches import Stage

# Immutable option values are handed out as they are; anything else is copied as before.
_IMMUTABLE = (str, int, float, bool, bytes, type(None), tuple, frozenset)

Handlers = tuple[tuple[Any, tuple[Callable[..., Any], ...]], ...]

# mitmproxy leaves `traverse` unannotated: its type as used here (D151).
_traverse: Callable[[list[Any]], Iterator[Any]] = traverse


def lean_addons() -> list[Any]:
    """mitmproxy's addons that a regular/transparent egress proxy needs, in mitmdump's order.

    Core (options and commands), Block (mitmproxy's refusal of non-local clients, as in
    mitmdump), DisableH2C, Proxyserver and NextLayer (coalescing their sends), TlsConfig,
    ErrorCheck (stop at start when an option or addon failed), then the engine's own
    ReleaseIdleTlsBuffers, OneRecordPerRequest, NoSessionTickets, DropUpstreamChainCopy
    (runtime/engine/idlechain.py) and FreezeAtStart. The
    egress addons and the log sink are added by the launcher.
    """
    return [
        core.Core(),
        block.Block(),
        disable_h2c.DisableH2C(),
        CoalescingProxyserver(),  # type: ignore[no-untyped-call]  # mitmproxy: unannotated
        CoalescingNextLayer(),
        tlsconfig.TlsConfig(),
        errorcheck.ErrorCheck(),
        ReleaseIdleTlsBuffers(),
        OneRecordPerRequest(),
        NoSessionTickets(),
        DropUpstreamChainCopy(),
        FreezeAtStart(),
    ]


class ReleaseIdleTlsBuffers:
    """Each TLS connection (both legs) frees OpenSSL's read and write buffers while idle
    (`SSL_MODE_RELEASE_BUFFERS`, as nginx does): an idle intercepted connection holds two
    TLS objects without their ~50 KiB of buffers (issue 26, D144). Runs after TlsConfig,
    which made the connection; pyOpenSSL offers the mode only on a context not yet used,
    so it is set on the connection itself (pinned by tests/proxy/test_engine.py). Its
    memory BIOs' buffers are given back by a sweep once a second while it is running
    (runtime/engine/idlebios.py, D299)."""

    def __init__(self) -> None:
        self.sweeper = idlebios.Sweeper()
        self._sweeping: asyncio.Task[None] | None = None

    def tls_start_client(self, tls_start: TlsData) -> None:
        self._release_buffers(tls_start)

    def tls_start_server(self, tls_start: TlsData) -> None:
        self._release_buffers(tls_start)

    def _release_buffers(self, tls_start: TlsData) -> None:
        if tls_start.ssl_conn is not None:
            _ssl_lib.SSL_set_mode(tls_start.ssl_conn._ssl, SSL.MODE_RELEASE_BUFFERS)
            self.sweeper.add(tls_start.ssl_conn)

    def running(self) -> None:
        if self._sweeping is None:
            self._sweeping = asyncio.get_running_loop().create_task(
                self.sweeper.run(), name="release-idle-bios"
            )

    def done(self) -> None:
        if self._sweeping is not None:
            self._sweeping.cancel()
            self._sweeping = None


class OneRecordPerRequest:
    """A request with a body goes upstream over TLS as one TLS record, not one for its head
    and one for its body: the server TLS layer mitmproxy's HTTP layer builds for the
    upstream connection gets its child wrapped when its handshake starts (D166)."""

    def tls_start_server(self, tls_start: tls.TlsData) -> None:
        coalesce_request(tls_start)


class NoSessionTickets:
    """No TLS 1.3 session tickets to a client (D301): OpenSSL's two per handshake cost
    their sealing and a `send` of their own, and most clients never resume. Runs after
    TlsConfig; where `runtime.engine.tickets` cannot find OpenSSL's setter, tickets are sent."""

    def __init__(self) -> None:
        self._tickets = tickets.resolve()

    def tls_start_client(self, tls_start: TlsData) -> None:
        if self._tickets is not None and tls_start.ssl_conn is not None:
            self._tickets.set(tls_start.ssl_conn, 0)


class FreezeAtStart:
    """Once the proxy runs, what it has loaded (policy, addons, mitmproxy) is frozen out of
    the garbage collector's reach (`gc.freeze`): a full collection during a request no
    longer walks the policy's objects (issue 26, D143)."""

    def running(self) -> None:
        gc.collect()
        gc.freeze()


class CoalescingProxyserver(proxyserver.Proxyserver):
    """mitmproxy's `Proxyserver`; each connection's root layer sends one write per event."""

    name = "proxyserver"  # mitmproxy's master and proxyserver look it up by this name

    def register_connection(
        self, connection_id: Any, handler: Any
    ) -> _GeneratorContextManager[None]:
        # Called by the server instance after the top layer is set, right before it enters
        # the context and runs handle_client. mitmproxy's context manager is handed back as
        # it is, not wrapped in a second one suspended for the connection's life (D308).
        patches.attach(handler)  # the CONNECTION rows of runtime/engine/patches.py
        return super().register_connection(connection_id, handler)


class CoalescingNextLayer(next_layer.NextLayer):
    """mitmproxy's `NextLayer`; a client TLS layer gets one record per message; empty
    lines before a request line are skipped first (runtime/engine/emptylines.py, D336)."""

    name = "nextlayer"

    def next_layer(self, nextlayer: layer.NextLayer) -> None:
        if nextlayer.layer is None and not skip_empty_lines(nextlayer):
            return  # empty lines only, so far: decided on the request line (D336)
        super().next_layer(nextlayer)
        coalesce_decided(nextlayer)
        # The decided layer may be a stack (server TLS over client TLS): walk it down.
        found = nextlayer.layer
        while found is not None:
            if isinstance(found, tls.ClientTLSLayer):
                coalesce_tunnel(found)
            found = getattr(found, "child_layer", None)


class LeanOptions(options.Options):
    """`Options` whose reads return immutable values without `copy.deepcopy`."""

    def __getattr__(self, attr: str) -> Any:
        found = self.__dict__["_options"].get(attr)
        if found is None:
            raise AttributeError(f"No such option: {attr}")
        value = found._default if found.value is optmanager.unset else found.value
        return value if isinstance(value, _IMMUTABLE) else copy.deepcopy(value)


class LeanAddonManager(AddonManager):
    """An `AddonManager` that finds each hook's handlers once, not on every event."""

    def __init__(self, owner: master.Master) -> None:
        super().__init__(owner)  # type: ignore[no-untyped-call]  # AddonManager is unannotated
        self._handlers: dict[str, Handlers] = {}

    # Every change of the chain forgets the cached handler lists.
    def register(self, addon: Any) -> Any:
        self._handlers.clear()
        return super().register(addon)  # type: ignore[no-untyped-call]  # AddonManager is unannotated

    def add(self, *addons: Any) -> None:
        self._handlers.clear()
        super().add(*addons)  # type: ignore[no-untyped-call]  # AddonManager is unannotated

    def remove(self, addon: Any) -> None:
        self._handlers.clear()
        super().remove(addon)  # type: ignore[no-untyped-call]  # AddonManager is unannotated

    def clear(self) -> None:
        self._handlers.clear()
        super().clear()  # type: ignore[no-untyped-call]  # AddonManager is unannotated

    def handlers(self, name: str) -> Handlers:
        """Per chain member that has any: the handlers of hook `name`, depth first."""
        cached = self._handlers.get(name)
        if cached is None:
            found = []
            for top in self.chain:
                funcs = tuple(_handlers_of(top, name))
                if funcs:
                    found.append((top, funcs))
            cached = self._handlers[name] = tuple(found)
        return cached

    async def handle_lifecycle(self, event: hooks.Hook) -> None:
        args = hook_args(event)
        await self._trigger(event.name, args)
        message = args[0]
        if isinstance(message, flow.Flow) and self.handlers(hooks.UpdateHook.name):
            await self.trigger_event(hooks.UpdateHook([message]))

    async def trigger_event(self, event: hooks.Hook) -> None:
        await self._trigger(event.name, hook_args(event))

    async def _trigger(self, name: str, args: list[Any]) -> None:
        for _top, funcs in self.handlers(name):
            try:
                for func in funcs:
                    result = func(*args)
                    if result is not None and inspect.isawaitable(result):
                        await result
            except exceptions.AddonHalt:
                return
            except exceptions.OptionsError:
                raise
            except Exception:
                # mitmproxy's `safecall` logs it, the chain goes on: entered only on an
                # error (a generator context manager per addon and hook cost 0.5 % of a
                # kept-alive request's CPU, issue 36).
                with safecall():
                    raise


def _handlers_of(addon: Any, name: str) -> list[Callable[..., Any]]:
    """What `AddonManager._iter_hooks` yields, as a list of callables."""
    found = []
    for each in _traverse([addon]):
        func = getattr(each, name, None)
        if func is None or isinstance(func, types.ModuleType):
            continue
        if not callable(func):
            message = f"Addon handler {name} ({each}) not callable"
            raise exceptions.AddonManagerError(message)  # type: ignore[no-untyped-call]  # unannotated
        found.append(func)
    return found


class LeanMaster(master.Master):
    """A mitmproxy master with `lean_addons()` and the caching addon manager."""

    def __init__(self, opts: LeanOptions, switches: frozenset[str] = frozenset()) -> None:
        super().__init__(opts)
        # Master made a plain AddonManager and connected it to option changes: replace it
        # before any addon exists.
        self.options.changed.disconnect(self.addons._configure_all)
        self.addons = LeanAddonManager(self)
        self.addons.add(*lean_addons())
        # the class-level rows of runtime/engine/patches.py (the relay's and the fast
        # path's with their switches)
        patches.install(Stage.ENGINE, arguments={name: True for name in switches})
