"""Per hook class and per host, not per connection (issue 36, D315, runtime/engine/connsetup.py):
new intercepted TLS connections through the real lean engine read no hook's dataclass
fields and turn the host's name into a certificate name once; the replaced mitmproxy
functions' results and source."""

from __future__ import annotations

import ast
import asyncio
import inspect
import ssl
import textwrap
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from mitmproxy import connection, ctx, hooks, options
from mitmproxy.addons import tlsconfig
from mitmproxy.proxy import context, mode_servers, server

from sandbox_egress.runtime.engine import connsetup
from testbed.fixed_upstream import FixedResponse, server_context, start_lean_engine
from tests.runtime.test_hooksinplace import _body

BODY = b"once"
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
CONNECTIONS = 5
HOOKS_PER_CONNECTION = 19  # what mitmproxy 12 starts for a CONNECT, TLS and one GET


def new_connections(tmp_path: Path, connections: int) -> list[bytes]:
    """`connections` new intercepted connections (CONNECT localhost, TLS, one GET) after
    one that warms the engine up; the responses of those."""

    async def main() -> list[bytes]:
        up = await asyncio.get_running_loop().create_server(
            FixedResponse.serving(RESPONSE), "127.0.0.1", 0, ssl=server_context(tmp_path)
        )
        up_port = up.sockets[0].getsockname()[1]
        master, runner, port = await start_lean_engine(tmp_path / "conf")
        client_tls = ssl.create_default_context()
        client_tls.check_hostname, client_tls.verify_mode = False, ssl.CERT_NONE
        responses = []

        async def one() -> bytes:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"CONNECT localhost:%d HTTP/1.1\r\nHost: x\r\n\r\n" % up_port)
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
            await writer.start_tls(client_tls, server_hostname="localhost")
            writer.write(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
            head = await reader.readuntil(b"\r\n\r\n")
            response = head + await reader.readexactly(len(BODY))
            writer.close()
            await writer.wait_closed()
            return response

        await one()
        connsetup.general_name.cache_clear()
        counted.clear()
        for _ in range(connections):
            responses.append(await one())
        await asyncio.sleep(0.2)  # the disconnect hooks of the last one
        master.shutdown()
        await runner
        up.close()
        return responses

    return asyncio.run(main())


counted: list[str] = []


@pytest.fixture
def hook_args_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    original = hooks.Hook.args

    def args(self: hooks.Hook) -> list[Any]:
        counted.append(self.name)
        return original(self)

    monkeypatch.setattr(hooks.Hook, "args", args)


@pytest.mark.usefixtures("hook_args_counted")
def test_no_hook_reads_its_dataclass_fields(tmp_path: Path) -> None:
    responses = new_connections(tmp_path, CONNECTIONS)
    assert responses == [RESPONSE] * CONNECTIONS
    assert counted == []


@pytest.mark.usefixtures("hook_args_counted")
def test_mitmproxys_handler_read_them_for_every_hook(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without the replacement (what the test above would see if it were not installed).
    monkeypatch.setattr(connsetup, "install", lambda: None)
    monkeypatch.setattr(
        mode_servers.ProxyConnectionHandler, "handle_hook", connsetup.ORIGINAL_HANDLE_HOOK
    )
    assert new_connections(tmp_path, CONNECTIONS) == [RESPONSE] * CONNECTIONS
    assert len(counted) == HOOKS_PER_CONNECTION * CONNECTIONS


def test_a_hosts_certificate_name_is_made_once(tmp_path: Path) -> None:
    # get_cert names the client's SNI and the upstream's address (both `localhost` here)
    # on each client handshake: one miss, then hits.
    assert new_connections(tmp_path, CONNECTIONS) == [RESPONSE] * CONNECTIONS
    info = connsetup.general_name.cache_info()
    assert (info.misses, info.hits) == (1, 2 * CONNECTIONS - 1)
    assert tlsconfig._ip_or_dns_name is connsetup.general_name


NAMES = {
    "host name": "example.com",
    "capitals": "API.Example.COM",
    "international": "bücher.example",
    "IPv4": "192.0.2.7",
    "IPv6": "2001:db8::1",
    "not quite an address": "192.0.2.7.1",
}


@pytest.mark.parametrize("name", NAMES.values(), ids=NAMES.keys())
def test_the_names_are_mitmproxys(name: str) -> None:
    first = connsetup.general_name(name)
    assert first == connsetup.ORIGINAL_IP_OR_DNS_NAME(name)
    assert isinstance(first, x509.DNSName | x509.IPAddress)
    assert connsetup.general_name(name) is first  # kept


def test_a_name_that_cannot_be_encoded_fails_every_time() -> None:
    label_too_long = "a" * 64 + ".example"
    for _ in range(2):
        with pytest.raises(UnicodeError):
            connsetup.general_name(label_too_long)
    with pytest.raises(UnicodeError):
        connsetup.ORIGINAL_IP_OR_DNS_NAME(label_too_long)


def test_the_cache_is_bounded() -> None:
    assert connsetup.general_name.cache_info().maxsize == connsetup.NAMES


def _normal(code: str) -> str:
    return "\n".join(ast.unparse(each) for each in ast.parse(textwrap.dedent(code)).body)


MITMPROXYS_HANDLE_HOOK = """
    with self.timeout_watchdog.disarm():
        (data,) = hook.args()
        await self.master.addons.handle_lifecycle(hook)
        if isinstance(data, flow.Flow):
            await data.wait_for_resume()
"""
MITMPROXYS_DISARM = """
    self.can_timeout.clear()
    self.blocker += 1
    try:
        yield
    finally:
        self.blocker -= 1
        if self.blocker == 0:
            self.register_activity()
            self.can_timeout.set()
"""
OURS = """
    watchdog = self.timeout_watchdog
    watchdog.can_timeout.clear()
    watchdog.blocker += 1
    try:
        (data,) = _hook_args(hook)
        await self.master.addons.handle_lifecycle(hook)
        if isinstance(data, flow.Flow):
            await data.wait_for_resume()
    finally:
        watchdog.blocker -= 1
        if watchdog.blocker == 0:
            watchdog.register_activity()
            watchdog.can_timeout.set()
"""


def test_the_handler_is_mitmproxys_with_disarm_written_out() -> None:
    assert _body(connsetup.ORIGINAL_HANDLE_HOOK, drop_marked=False) == _normal(
        MITMPROXYS_HANDLE_HOOK
    )
    assert _body(server.TimeoutWatchdog.disarm, drop_marked=False) == _normal(MITMPROXYS_DISARM)
    assert _body(connsetup.handle_hook, drop_marked=False) == _normal(OURS)


class Watching:
    """Notes the connection handler's watchdog while a hook waits and after the response."""

    def __init__(self) -> None:
        self.during: list[tuple[int, bool]] = []
        self.handlers: list[Any] = []

    async def requestheaders(self, flow: Any) -> None:
        (handler,) = ctx.master.addons.get("proxyserver").connections.values()
        self.handlers.append(handler)
        await asyncio.sleep(0)
        watchdog = handler.timeout_watchdog
        self.during.append((watchdog.blocker, watchdog.can_timeout.is_set()))


def test_the_watchdog_is_disarmed_while_a_hook_runs_and_armed_after(tmp_path: Path) -> None:
    watching = Watching()
    after: list[tuple[int, bool]] = []

    async def main() -> None:
        up = await asyncio.get_running_loop().create_server(
            FixedResponse.serving(RESPONSE), "127.0.0.1", 0
        )
        up_port = up.sockets[0].getsockname()[1]
        master, runner, port = await start_lean_engine(
            tmp_path / "conf", lambda master: master.addons.add(watching)
        )
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(3):
            writer.write(b"GET http://127.0.0.1:%d/ HTTP/1.1\r\nHost: x\r\n\r\n" % up_port)
            await reader.readuntil(b"\r\n\r\n")
            assert await reader.readexactly(len(BODY)) == BODY
            watchdog = watching.handlers[-1].timeout_watchdog
            after.append((watchdog.blocker, watchdog.can_timeout.is_set()))
        writer.close()
        master.shutdown()
        await runner
        up.close()

    asyncio.run(main())
    assert watching.during == [(1, False)] * 3
    assert after == [(0, True)] * 3


@pytest.fixture
def servers_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    original = connection.Server.__init__

    def init(self: connection.Server, *args: Any, **kwargs: Any) -> None:
        counted.append("Server")
        original(self, *args, **kwargs)

    monkeypatch.setattr(connection.Server, "__init__", init)


SERVERS_PER_CONNECTION = 2  # the root context's (no upstream yet), the upstream's


@pytest.mark.usefixtures("servers_counted")
def test_a_new_connection_makes_only_the_servers_it_uses(tmp_path: Path) -> None:
    assert new_connections(tmp_path, CONNECTIONS) == [RESPONSE] * CONNECTIONS
    assert len(counted) == SERVERS_PER_CONNECTION * CONNECTIONS


@pytest.mark.usefixtures("servers_counted")
def test_mitmproxys_fork_made_five_more(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connsetup, "install", lambda: None)
    monkeypatch.setattr(context.Context, "fork", connsetup.ORIGINAL_FORK)
    assert new_connections(tmp_path, CONNECTIONS) == [RESPONSE] * CONNECTIONS
    assert len(counted) == (SERVERS_PER_CONNECTION + 5) * CONNECTIONS


def test_a_fork_is_mitmproxys() -> None:
    client = connection.Client(
        peername=("127.0.0.1", 1), sockname=("127.0.0.1", 2), timestamp_start=1.0
    )
    parent = context.Context(client, options.Options())
    parent.layers.append(object())  # type: ignore[arg-type]
    theirs, ours = connsetup.ORIGINAL_FORK(parent), connsetup.fork(parent)
    assert type(ours) is type(theirs) is context.Context
    assert list(vars(ours)) == list(vars(theirs)) == ["client", "options", "server", "layers"]
    for each in (ours, theirs):
        assert each.client is client and each.options is parent.options
        assert each.server is parent.server
        assert each.layers == parent.layers and each.layers is not parent.layers
    fork_source = inspect.getsource(connsetup.ORIGINAL_FORK)
    assert "ret = Context(self.client, self.options)" in fork_source
    assert "ret.server = self.server" in fork_source
    assert "ret.layers = self.layers.copy()" in fork_source
    init = inspect.getsource(context.Context.__init__)
    assert [line.split("=")[0].strip() for line in init.splitlines() if " = " in line] == [
        "self.client", "self.options", "self.server", "self.layers"
    ]  # fmt: skip
