"""The lean engine (runtime/engine/lean.py) keeps mitmproxy's hook semantics, and what it relies
on in the installed mitmproxy is still there: each test here fails when an upgrade
changes an internal the lean master uses (the pin is `mitmproxy>=12,<13`)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import pytest
from mitmproxy import addonmanager, exceptions, hooks, options, optmanager
from mitmproxy.addonmanager import AddonManager
from mitmproxy.master import Master
from mitmproxy.proxy.layers.http import HttpRequestHeadersHook, HttpResponseHook
from mitmproxy.test import tflow

from sandbox_egress.runtime.engine.lean import (
    LeanAddonManager,
    LeanMaster,
    LeanOptions,
    lean_addons,
)


class Recorder:
    """An addon that writes down which of its hooks ran, in order, into a shared list."""

    def __init__(self, name: str, calls: list[str], *, fail: bool = False,
                 halt: bool = False, sub: list[Any] | None = None) -> None:  # fmt: skip
        self.name, self.calls, self.fail, self.halt = name, calls, fail, halt
        self.addons = sub or []

    def requestheaders(self, flow: Any) -> None:
        self.calls.append(f"{self.name}.requestheaders")
        if self.fail:
            raise RuntimeError(f"{self.name} failed")
        if self.halt:
            raise exceptions.AddonHalt()

    async def response(self, flow: Any) -> None:
        await asyncio.sleep(0)
        self.calls.append(f"{self.name}.response")


@dataclass
class Updates:
    calls: list[str]
    name: str = "updates"

    def update(self, flows: Any) -> None:
        self.calls.append("updates.update")


def chains(build: Any) -> list[list[str]]:
    """Run the same events through mitmproxy's own manager and the lean one."""
    seen = []
    for manager_class in (AddonManager, LeanAddonManager):

        async def main(manager_class: type[AddonManager] = manager_class) -> list[str]:
            master = Master(options.Options())
            master.addons = manager_class(master)
            calls: list[str] = []
            master.addons.add(*build(calls))
            flow = tflow.tflow(resp=True)
            await master.addons.handle_lifecycle(HttpRequestHeadersHook(flow))
            await master.addons.handle_lifecycle(HttpResponseHook(flow))
            await master.done()  # removes the master's log handlers with its loop
            return calls

        seen.append(asyncio.run(main()))
    return seen


def test_order_sub_addons_and_async_hooks_are_mitmproxys() -> None:
    mitmproxy, lean = chains(lambda calls: [
        Recorder("a", calls, sub=[Recorder("a1", calls, sub=[Recorder("a11", calls)])]),
        Recorder("b", calls),
    ])  # fmt: skip
    assert lean == mitmproxy == [
        "a.requestheaders", "a1.requestheaders", "a11.requestheaders", "b.requestheaders",
        "a.response", "a1.response", "a11.response", "b.response",
    ]  # fmt: skip


def test_an_error_is_logged_and_the_chain_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)
    mitmproxy, lean = chains(lambda calls: [
        Recorder("a", calls, fail=True, sub=[Recorder("a1", calls)]), Recorder("b", calls),
    ])  # fmt: skip
    # As in mitmproxy: the failing addon's own sub-addons are skipped, the next one runs.
    assert lean == mitmproxy == [
        "a.requestheaders", "b.requestheaders", "a.response", "a1.response", "b.response",
    ]  # fmt: skip
    assert [r.getMessage() for r in caplog.records] == ["Addon error: a failed"] * 2


def test_addon_halt_stops_the_chain() -> None:
    mitmproxy, lean = chains(lambda calls: [Recorder("a", calls, halt=True), Recorder("b", calls)])
    assert lean == mitmproxy == ["a.requestheaders", "a.response", "b.response"]


def test_update_follows_flow_hooks_only_when_an_addon_has_it() -> None:
    mitmproxy, lean = chains(lambda calls: [Recorder("a", calls), Updates(calls)])
    assert lean == mitmproxy == [
        "a.requestheaders", "updates.update", "a.response", "updates.update",
    ]  # fmt: skip


def test_adding_an_addon_later_is_seen() -> None:
    async def main() -> list[str]:
        master = Master(options.Options())
        master.addons = LeanAddonManager(master)
        calls: list[str] = []
        master.addons.add(Recorder("a", calls))
        flow = tflow.tflow(resp=True)
        await master.addons.handle_lifecycle(HttpRequestHeadersHook(flow))
        master.addons.add(Recorder("b", calls))
        await master.addons.handle_lifecycle(HttpRequestHeadersHook(flow))
        return calls

    assert asyncio.run(main()) == ["a.requestheaders", "a.requestheaders", "b.requestheaders"]


def test_options_read_the_same_values_without_copies() -> None:
    async def main() -> None:
        plain, lean = options.Options(), LeanOptions()
        Master(plain).addons.add(*lean_addons())
        LeanMaster(lean)
        lean.update(listen_port=8123, mode=["transparent"])
        plain.update(listen_port=8123, mode=["transparent"])
        for name in plain.keys():  # noqa: SIM118 - an OptManager is not iterable
            assert getattr(lean, name) == getattr(plain, name), name
        mode = lean.mode
        mode.append("mutated")  # a list is still copied: the option is unchanged
        assert lean.mode == ["transparent"]
        with pytest.raises(AttributeError):
            _ = lean.no_such_option

    asyncio.run(main())


def test_the_internals_the_lean_engine_relies_on() -> None:
    """What runtime/engine/lean.py reaches into; an upgrade that changes one fails here."""
    assert hasattr(optmanager, "unset")
    option = options.Options()._options["listen_port"]
    assert hasattr(option, "_default")
    assert hasattr(option, "value")
    assert callable(addonmanager.safecall)
    assert callable(addonmanager.traverse)

    async def manager() -> AddonManager:
        return AddonManager(Master(options.Options()))

    made = asyncio.run(manager())
    assert hasattr(made, "chain")
    assert hasattr(made, "_configure_all")
    for method in ("register", "add", "remove", "clear", "handle_lifecycle", "trigger_event"):
        assert callable(getattr(AddonManager, method)), method
    assert hooks.UpdateHook.name == "update"


def test_the_lean_master_has_only_the_addons_it_needs() -> None:
    async def main() -> list[str]:
        return [type(a).__name__ for a in LeanMaster(LeanOptions()).addons.chain]

    assert asyncio.run(main()) == [
        "Core", "Block", "DisableH2C", "CoalescingProxyserver", "CoalescingNextLayer", "TlsConfig",
        "ErrorCheck", "ReleaseIdleTlsBuffers", "OneRecordPerRequest", "NoSessionTickets",
        "DropUpstreamChainCopy", "FreezeAtStart",
    ]  # fmt: skip


def test_what_is_loaded_at_start_is_frozen_out_of_the_collector() -> None:
    import gc

    async def main() -> int:
        master = LeanMaster(LeanOptions())
        master.options.update(listen_host="127.0.0.1", listen_port=0, server=False)
        runner = asyncio.create_task(master.run())
        for _ in range(200):
            if gc.get_freeze_count():
                break
            await asyncio.sleep(0.01)
        frozen = gc.get_freeze_count()
        master.shutdown()
        await runner
        return frozen

    gc.unfreeze()
    try:
        assert asyncio.run(main()) > 1000
    finally:
        gc.unfreeze()


def test_both_tls_legs_release_their_buffers_while_idle() -> None:
    """The mode is set on the connection TlsConfig made; pyOpenSSL internals pinned."""
    from mitmproxy import connection
    from mitmproxy.proxy import context
    from mitmproxy.proxy.layers import tls
    from OpenSSL import SSL
    from OpenSSL._util import lib

    from sandbox_egress.runtime.engine.lean import ReleaseIdleTlsBuffers

    client = connection.Client(peername=("127.0.0.1", 1), sockname=("127.0.0.1", 2))
    ctx = context.Context(client, options.Options())
    for hook in ("tls_start_client", "tls_start_server"):
        made = SSL.Connection(SSL.Context(SSL.TLS_METHOD))
        assert lib.SSL_set_mode(made._ssl, 0) & SSL.MODE_RELEASE_BUFFERS == 0
        getattr(ReleaseIdleTlsBuffers(), hook)(tls.TlsData(client, ctx, made))
        assert lib.SSL_set_mode(made._ssl, 0) & SSL.MODE_RELEASE_BUFFERS
    # A TLS start that made no connection (an addon refused it) is left alone.
    ReleaseIdleTlsBuffers().tls_start_client(tls.TlsData(client, ctx, None))


def test_hook_args_are_mitmproxys_args_for_every_hook() -> None:
    import inspect

    from mitmproxy.proxy.layers import tls

    from sandbox_egress.runtime.engine.hookargs import hook_args

    # mitmproxy's `Hook.args` is the dataclass fields' values, in order, for every hook.
    assert "fields(self)" in inspect.getsource(hooks.Hook.args)
    assert not any("args" in vars(h) for h in hooks.all_hooks.values())
    flow = tflow.tflow(resp=True)
    data = tls.TlsData(flow.client_conn, None)  # type: ignore[arg-type]
    for event in (
        HttpRequestHeadersHook(flow),
        HttpResponseHook(flow),
        hooks.UpdateHook([flow]),
        tls.TlsStartServerHook(data),
    ):
        assert hook_args(event) == event.args()
        assert hook_args(event)[0] is event.args()[0]
