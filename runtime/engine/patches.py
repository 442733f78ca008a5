"""Every change the engine makes below mitmproxy's hooks, one row each, in install order.

A row names what it replaces (`replaces`, "module:attribute.path"; for a class-level
replacement `installs` names the replacement, in the same order), the decision that
argues for it, when it is installed (`Stage`), the function that installs it, whether a
`--engine mitmdump` run uses it, and the test that fails when mitmproxy changes under it.
Nothing else lists them: the launcher, `LeanMaster` and the connection set-up call
`install(stage)` / `attach(handler)`, which walk this table in its order, and `/status`
names the active ones (`active()`). Paths are strings, resolved on first use, so the
table is importable before mitmproxy is (the IMPORT stage must run first: D297, D162).

The stages, in the order a run meets them:
* IMPORT — before mitmproxy's modules load (the launcher).
* PROCESS — once per process, either engine (the launcher, after mitmproxy's import).
* ENGINE — once, when the lean engine is made (`LeanMaster.__init__`).
* CONNECTION — per client connection, on the connection's handler (`attach`, from
  `CoalescingProxyserver.register_connection`).
* ADDON — an engine addon in `lean_addons()`: mitmproxy's own addon replaced by a
  subclass, or one that acts per TLS leg.
* OWNED — installed by the product addon that owns the bound it enforces (addons/:
  limits, backpressure, pushgate, upstream failures); listed here so that the list is
  whole, never installed from here (addons must not import the runtime).

A row with a `switch` (the body relay's `--body-relay`, the fast path's `--fast-path`) is installed only when the
argument of that name is given and true: off, it is neither installed nor shown.

Three rows answer "a hook that finished at once"; runtime/engine/__init__.py states
their precedence.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

PACKAGE = "sandbox_egress"


class Stage(StrEnum):
    IMPORT = "import"
    PROCESS = "process"
    ENGINE = "engine"
    CONNECTION = "connection"
    ADDON = "addon"
    OWNED = "owned"


@dataclass(frozen=True)
class Patch:
    name: str
    replaces: tuple[str, ...]
    decision: str
    stage: Stage
    install: str  # "module:function" (an ADDON row: "module:Class")
    mitmdump: bool
    pinned_by: str  # "tests/...py::test_name"
    installs: tuple[str, ...] = ()  # a class-level row: the replacement of each `replaces`
    arguments: tuple[str, ...] = ()  # what `install` is called with, by name
    switch: str = ""  # the argument of `install(stage, ...)` that turns this row on


def _row(name: str, decision: str, stage: Stage, pinned_by: str, **rest: Any) -> Patch:
    module = "addons" if stage is Stage.OWNED else "runtime.engine"
    rest.setdefault("install", f"{module}.{name}:install")
    rest.setdefault("mitmdump", stage in (Stage.PROCESS, Stage.OWNED))
    return Patch(name, decision=decision, stage=stage, pinned_by=pinned_by, **rest)


_E = "runtime.engine."
_LEAN = "runtime.engine.lean:"
_PROXY = "mitmproxy.proxy."
_HTTP1 = "mitmproxy.proxy.layers.http._http1:Http1Connection."
_STREAM = "mitmproxy.proxy.layers.http:HttpStream."
_H2 = "mitmproxy.proxy.layers.http._http_h2:BufferedH2Connection."

# fmt: off
PATCHES: tuple[Patch, ...] = (
    _row("addonimports", "D162", Stage.IMPORT, "tests/runtime/test_addonimports.py",
         replaces=("mitmproxy.addons:__init__ (the package's ~35 addon imports)",),
         install=_E + "addonimports:import_addons_one_by_one", mitmdump=True),
    _row("tcponly", "D297", Stage.IMPORT, "tests/runtime/test_tcponly.py::test_a_run_maps_no_aioquic_nor_mitmproxy_rs_and_imports_only_stand_ins",
         replaces=("sys:meta_path (aioquic, mitmproxy's QUIC layers, mitmproxy_rs: stand-ins)",)),
    _row("deferimports", "D298", Stage.IMPORT, "tests/runtime/test_addonimports.py",
         replaces=("sys:modules (ruamel.yaml, brotli, zstd, pyparsing: loaded on first use)",),
         install=_E + "addonimports:defer_seldom_used", mitmdump=True),
    _row("tcpalpn", "D305", Stage.PROCESS, "tests/runtime/test_tcpalpn.py::test_mitmproxys_own_choice_is_h3_first",
         replaces=("mitmproxy.addons.tlsconfig:alpn_select_callback",),
         installs=(_E + "tcpalpn:select",)),
    _row("accepting", "D97", Stage.PROCESS, "tests/runtime/test_accepting.py",
         replaces=("asyncio.selector_events:BaseSelectorEventLoop._accept_connection",),
         installs=(_E + "accepting:_accept_connection",),
         arguments=("on_pause",)),
    _row("pipelined", "D670", Stage.PROCESS, "tests/runtime/test_pipelined.py::test_mitmproxy_hands_the_next_request_on_before_it_is_done",
         replaces=("mitmproxy.proxy.layers.http._http1:Http1Client.send", "mitmproxy.proxy.layers.http._http1:Http1Client.mark_done"),
         installs=(_E + "pipelined:_send", _E + "pipelined:_mark_done")),
    _row("emptyhead", "D672", Stage.PROCESS, "tests/runtime/test_emptyhead.py::test_mitmproxy_waits_for_another_read_after_an_empty_line",
         replaces=("mitmproxy.proxy.layers.http._http1:Http1Server.read_headers",),
         installs=(_E + "emptyhead:_read_headers",)),
    _row("interim", "D673", Stage.PROCESS, "tests/runtime/test_interim.py::test_mitmproxy_takes_an_interim_answer_for_the_answer",
         replaces=("mitmproxy.proxy.layers.http._http1:Http1Client.read_headers",),
         installs=(_E + "interim:_read_headers",)),
    _row("goaway", "D701", Stage.PROCESS, "tests/runtime/test_goaway.py::test_h2_and_mitmproxy_fail_the_stream_a_graceful_goaway_names",
         replaces=("h2.connection:H2Connection._receive_goaway_frame", "mitmproxy.proxy.layers.http._http2:Http2Client.handle_h2_event",
                   "mitmproxy.proxy.layers.http._http2:Http2Client._handle_event", "mitmproxy.proxy.layers.http._http2:Http2Client.close_connection",
                   "mitmproxy.proxy.layers.http:GetHttpConnection.connection_spec_matches"),
         installs=(_E + "goaway:_receive_goaway_frame", _E + "goaway:_handle_h2_event", _E + "goaway:_handle_event",
                   _E + "goaway:close_connection", _E + "goaway:connection_spec_matches")),
    _row("tlsshare", "D161", Stage.ENGINE, "tests/runtime/test_tlsshare.py::test_pyopenssl_alone_makes_a_copy_per_connection",
         replaces=("OpenSSL.SSL:Connection.use_certificate", "OpenSSL.SSL:Connection.use_privatekey"),
         installs=(_E + "tlsshare:_use_certificate", _E + "tlsshare:_use_privatekey"),
         install=_E + "tlsshare:share_certificates"),
    _row("layerqueues", "D163", Stage.ENGINE, "tests/runtime/test_layerqueues.py::test_what_mitmproxy_does_with_the_queue",
         replaces=(_PROXY + "layer:Layer.__init__",),
         installs=(_E + "layerqueues:_init",)),
    _row("h2data", "D289", Stage.ENGINE, "tests/runtime/test_h2data.py",
         replaces=(_H2 + "receive_data", "hyperframe.frame:DataFrame._body_repr"),
         installs=(_E + "h2data:_merging_receive_data", _E + "h2data:short_body_repr")),
    _row("h2frames", "D318", Stage.ENGINE, "tests/runtime/test_h2frames.py::test_an_upstream_frame_over_the_maximum_is_still_refused",
         replaces=(_H2 + "send_data",),
         installs=(_E + "h2frames:send_data",)),
    _row("bodyread", "D303", Stage.ENGINE, "tests/runtime/test_bodyread.py::test_the_same_events_as_mitmproxy_for_any_split_of_pipelined_requests",
         replaces=(_HTTP1 + "read_body",),
         installs=(_E + "bodyread:_read_body",)),
    _row("tlsread", "D304", Stage.ENGINE, "tests/runtime/test_tlsread.py::test_the_method_it_replaces_is_mitmproxys",
         replaces=(_PROXY + "layers.tls:TLSLayer.receive_data", _PROXY + "layers.tls:TLSLayer.tls_interact"),
         installs=(_E + "tlsread:_receive_data", _E + "tlsread:_tls_interact")),
    _row("relay", "D560", Stage.ENGINE, "tests/runtime/test_relay.py::test_the_internals_the_relay_reads_are_mitmproxys",
         replaces=(_PROXY + "layers.tls:TLSLayer.receive_data (with --body-relay; HTTP/2 downloads: relayh2, D575; uploads: relayh2up, D653)",),
         switch="body_relay"),
    _row("fastpath", "D610", Stage.ENGINE, "tests/runtime/test_fastpath.py::test_the_internals_it_copies_are_mitmproxys",
         replaces=(_PROXY + "layers.tls:ClientTLSLayer.event_to_child (with --fast-path)",),
         switch="fast_path"),
    _row("hooksinplace", "D314", Stage.ENGINE, "tests/runtime/test_hooksinplace.py::test_the_copies_are_mitmproxys_methods_and_two_lines",
         replaces=(_PROXY + "layer:Layer.handle_event", _PROXY + "layer:Layer._Layer__process"),
         installs=(_E + "hooksinplace:handle_event", _E + "hooksinplace:_process")),
    _row("connsetup", "D315", Stage.ENGINE, "tests/runtime/test_connsetup.py::test_the_handler_is_mitmproxys_with_disarm_written_out",
         replaces=(_PROXY + "mode_servers:ProxyConnectionHandler.handle_hook", "mitmproxy.addons.tlsconfig:_ip_or_dns_name", _PROXY + "context:Context.fork"),
         installs=(_E + "connsetup:handle_hook", _E + "connsetup:general_name", _E + "connsetup:fork")),
    _row("headerlookup", "D310", Stage.ENGINE, "tests/runtime/test_headerlookup.py::test_the_mitmproxy_source_it_replaces",
         replaces=("mitmproxy.http:Headers.get_all", "mitmproxy.http:Headers.__getitem__", "mitmproxy.http:Headers.get", "mitmproxy.http:Headers.__contains__"),
         installs=(_E + "headerlookup:get_all", _E + "headerlookup:getitem", _E + "headerlookup:get", _E + "headerlookup:contains")),
    _row("streamhooks", "D311", Stage.ENGINE, "tests/runtime/test_streamhooks.py::test_the_products_stream_wrappers_still_see_each_hook",
         replaces=(_STREAM + "__init__",),
         installs=(_E + "streamhooks:_init",)),
    _row("coalesce", "D142", Stage.CONNECTION, "tests/runtime/test_coalesce.py::test_what_was_sent_before_a_layer_failure_still_goes_out",
         replaces=(_PROXY + "server:ConnectionHandler.layer.handle_event (per connection)",),
         install=_E + "coalesce:coalesce_root"),
    _row("bulkio", "D272", Stage.CONNECTION, "tests/runtime/test_bulkio.py::test_an_upstream_leg_keeps_mitmproxys_read_size",
         replaces=(_PROXY + "server:ConnectionHandler.handle_connection (per connection)",),
         install=_E + "bulkio:widen"),
    _row("streamhooks.attach", "D311", Stage.CONNECTION, "tests/runtime/test_streamhooks.py::test_the_products_stream_wrappers_still_see_each_hook",
         replaces=(_PROXY + "server:ConnectionHandler.handle_hook (per connection)",),
         install=_E + "streamhooks:attach"),
    _row("inlinehooks", "D294", Stage.CONNECTION, "tests/runtime/test_inlinehooks.py",
         replaces=(_PROXY + "server:ConnectionHandler.hook_task (per connection)", _PROXY + "server:ConnectionHandler.server_event (per connection)"),
         install=_E + "inlinehooks:answer_hooks_inline"),
    _row("idlewaiters", "D307", Stage.CONNECTION, "tests/runtime/test_idlewaiters.py",
         replaces=(_PROXY + "server:TimeoutWatchdog (its waiters: a list, not a deque)",),
         install=_E + "idlewaiters:lighten_watchdog"),
    _row("proxyserver", "D308", Stage.ADDON, "tests/runtime/test_inlinehooks.py",
         replaces=("mitmproxy.addons.proxyserver:Proxyserver",),
         install=_LEAN + "CoalescingProxyserver"),
    _row("nextlayer", "D142", Stage.ADDON, "tests/runtime/test_coalesce.py",
         replaces=("mitmproxy.addons.next_layer:NextLayer",),
         install=_LEAN + "CoalescingNextLayer"),
    _row("emptylines", "D336", Stage.ADDON, "tests/runtime/test_emptylines.py",
         replaces=("mitmproxy.addons.next_layer:NextLayer._next_layer (the client data it reads first)",),
         install=_LEAN + "CoalescingNextLayer"),
    _row("idlebios", "D299", Stage.ADDON, "tests/runtime/test_idlebios.py::test_mitmproxy_never_shuts_a_bio_down",
         replaces=("OpenSSL:SSL_MODE_RELEASE_BUFFERS and memory BIOs (per TLS leg)",),
         install=_LEAN + "ReleaseIdleTlsBuffers"),
    _row("onerecord", "D166", Stage.ADDON, "tests/runtime/test_coalesce.py",
         replaces=(_PROXY + "layers.tls:ServerTLSLayer.child_layer.handle_event (per TLS leg)",),
         install=_LEAN + "OneRecordPerRequest"),
    _row("tickets", "D301", Stage.ADDON, "tests/runtime/test_tickets.py::test_openssls_no_ticket_option_still_sends_tls13_tickets",
         replaces=("OpenSSL:SSL_set_num_tickets (per client TLS leg)",),
         install=_LEAN + "NoSessionTickets"),
    _row("idlechain", "D595", Stage.ADDON, "tests/runtime/test_idlechain.py",
         replaces=(_PROXY + "layers.tls:TLSLayer (the upstream chain's Python copy, once both legs are up)",),
         install=_E + "idlechain:DropUpstreamChainCopy"),
    _row("freeze", "D143", Stage.ADDON, "tests/runtime/test_engine.py",
         replaces=("gc:freeze (what is loaded at start)",),
         install=_LEAN + "FreezeAtStart"),
    _row("limits", "D29", Stage.OWNED, "tests/addons/test_limits.py",
         replaces=(_HTTP1 + "_handle_event", _PROXY + "layers.websocket:WebsocketLayer.relay_messages"),
         install="addons.layers.limits:install",
         installs=("addons.layers.limits:_bounded_http1", "addons.layers.limits:_bounded_websocket")),
    _row("backpressure", "D26", Stage.OWNED, "tests/e2e/test_streaming_e2e.py",
         replaces=(_PROXY + "layers.http._http2:Http2Server._handle_event", _PROXY + "server:ConnectionHandler.drain_writers"),
         install="addons.layers.backpressure:install",
         installs=("addons.layers.backpressure:_watching_h2_server", "addons.layers.backpressure:_draining")),
    _row("pushgate", "D180", Stage.OWNED, "tests/addons/test_pushgate.py",
         replaces=(_STREAM + "_handle_event",),
         install="addons.layers.pushgate:install",
         installs=("addons.layers.pushgate:_gated",)),
    _row("upstream", "D101", Stage.OWNED, "tests/addons/test_upstream.py",
         replaces=(_STREAM + "handle_protocol_error",),
         installs=("addons.upstream:_readable",)),
    _row("pages", "D354", Stage.OWNED, "tests/addons/test_pages.py",
         replaces=("mitmproxy.proxy.layers.http._http1:make_error_response", _STREAM + "check_invalid"),
         installs=("addons.pages:_error_response", "addons.pages:_check_invalid")),
    _row("linger", "D350", Stage.OWNED, "tests/addons/test_linger.py",
         replaces=(_STREAM + "_handle_event",), install="addons.layers.linger:install",
         installs=("addons.layers.linger:_lingering",)),
    _row("timeouts", "D353", Stage.OWNED, "tests/addons/test_timeouts.py",
         replaces=(_PROXY + "server:asyncio",), installs=("addons.timeouts:_TimedAsyncio",)),
)
# fmt: on

# Modules of runtime/engine/ that change nothing below mitmproxy themselves.
# relayh2 and relayh2up install nothing of their own: the `relay` row's HTTP/2 variants (D575, D653).
SUPPORT = ("__init__", "lean", "patches", "hookargs", "relaychunks", "relayh2", "relayh2up")

_installed: list[str] = []
_attach: tuple[tuple[Any, str], ...] | None = None
_OURS = ("runtime", "addons", "proxy", "common")


def _module(path: str) -> Any:
    """The module of "module:attr.path" (relative to the package when it is one of ours)."""
    name = path.partition(":")[0]
    return importlib.import_module(f"{PACKAGE}.{name}" if name.split(".")[0] in _OURS else name)


def resolve(path: str) -> Any:
    """ "module:attr.path" -> the object (anything after a space is a note, not a name)."""
    found = _module(path)
    for part in path.partition(":")[2].split(" ")[0].split("."):
        found = getattr(found, part)
    return found


def rows(stage: Stage, engine: str = "lean") -> Iterable[Patch]:
    return (row for row in PATCHES if row.stage is stage and (engine != "mitmdump" or row.mitmdump))


def switches() -> tuple[str, ...]:
    """The names of the rows' switches (each also a `run` flag's destination: `--body-relay`
    is `body_relay`): what the command line hands the engine as its set of switches on."""
    return tuple(row.switch for row in PATCHES if row.switch)


def install(
    stage: Stage, engine: str = "lean", arguments: Mapping[str, object] | None = None
) -> None:
    """Install the rows of `stage` (IMPORT, PROCESS, ENGINE) in the table's order."""
    given = arguments or {}
    for row in rows(stage, engine):
        if row.switch and not given.get(row.switch):
            continue  # a row behind a switch that is off: not installed, not shown
        resolve(row.install)(**{name: given[name] for name in row.arguments})
        if row.name not in _installed:
            _installed.append(row.name)


def attach(handler: Any) -> None:
    """The CONNECTION rows on one client connection's handler, in the table's order (each
    function looked up in its module at the call, so that a test can switch one off)."""
    global _attach
    if _attach is None:
        _attach = tuple(
            (_module(row.install), row.install.partition(":")[2]) for row in rows(Stage.CONNECTION)
        )
    for module, function in _attach:
        getattr(module, function)(handler)


def in_place(row: Patch) -> bool:
    """Whether each attribute a class-level row replaces is its replacement now: the
    replacement itself (an instance of it, for a class), or wrapped by a later row that
    replaces the same attribute and is in place (pushgate inside linger)."""
    return bool(row.installs) and all(
        _holds(target, replacement) or _wrapped_later(row, target)
        for target, replacement in zip(row.replaces, row.installs, strict=True)
    )


def _holds(target: str, replacement: str) -> bool:
    current, wanted = resolve(target), resolve(replacement)
    return current is wanted or (isinstance(wanted, type) and isinstance(current, wanted))


def _wrapped_later(row: Patch, target: str) -> bool:
    later = PATCHES[PATCHES.index(row) + 1 :]
    return any(target in each.replaces and in_place(each) for each in later)


def active(engine: str) -> list[str]:
    """What `/status` shows: the rows this run installed or that are in place, by name."""
    per_run = {Stage.CONNECTION, Stage.ADDON} if engine != "mitmdump" else set()
    return [
        row.name
        for row in PATCHES
        if row.name in _installed
        or row.stage in per_run
        or (row.stage is Stage.OWNED and in_place(row))
    ]
