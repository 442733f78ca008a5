"""A run speaks TCP only: aioquic, mitmproxy's QUIC and HTTP/3 layers and mitmproxy_rs (its
UDP, WireGuard, local-capture and TUN modes) are not loaded (issue 36, D297).

egress-proxy listens in `regular` or `transparent` mode, both TCP; mitmproxy reaches its
QUIC code only for UDP modes (`http3`, `quic`, `udp`, `dns`, WireGuard, reverse/upstream
to an `http3://` or `quic://` server) or when a connection's negotiated ALPN is `h3`, and
mitmproxy_rs only for UDP sockets and the WireGuard, local and TUN modes. Yet
`mitmproxy.proxy.layers` and `mitmproxy.addons.tlsconfig` import aioquic at import time
(the QUIC layers, the HTTP/3 client and server, `H3_ALPN`, `CipherSuite`), and
`mitmproxy.proxy.server`, `mode_specs` and `mode_servers` import mitmproxy_rs (for
annotations and `isinstance` checks): about 11 MiB of an idle run's 76.

`install()`, called before mitmproxy is imported, puts a finder first on `sys.meta_path`
that answers the imports of `STAND_INS` (and their submodules) with stand-in modules: every
name read from one, and every name read from that, is a stand-in class. A stand-in class
can be named, compared, used in `isinstance` (never true: none is ever made) and in a
union; making one, calling it, indexing it or iterating it raises `TcpOnly`, which names
the stand-in that was reached. mitmproxy's own code is unchanged.

Invariants: done only when none of `STAND_INS`, nor a mitmproxy module that imports one, is
imported yet (a process that has them keeps them: the tests' process, `--engine
mitmdump`); a dunder name read from a stand-in is an AttributeError, as on a real module or
class, so that `getattr(x, "__origin__", None)` and the import system's probes see
nothing; nothing of a stand-in does any I/O or holds state beyond its name.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Sequence
from typing import Any, NoReturn

# What a run answers with stand-ins: each name and every module below it.
STAND_INS = (
    "aioquic",
    "mitmproxy_rs",
    "pylsqpack",
    "mitmproxy.proxy.layers.quic",
    "mitmproxy.proxy.layers.http._http3",
    "mitmproxy.proxy.layers.http._http_h3",
)


# mitmproxy modules that import a stand-in: once one is imported, the real ones are in.
IMPORTERS = ("mitmproxy.proxy.layers", "mitmproxy.proxy.server", "mitmproxy.proxy.mode_specs")


class TcpOnly(NotImplementedError):
    """mitmproxy reached QUIC, HTTP/3 or UDP code in a process that has none."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"{name}: egress-proxy speaks TCP only; QUIC, HTTP/3 and mitmproxy's UDP, "
            "WireGuard, local and TUN modes are not loaded (D297)"
        )


def _refuse(name: str) -> NoReturn:
    raise TcpOnly(name)


class StandIn(type):
    """The type of a stand-in class: named, never made."""

    def __call__(cls, *_args: Any, **_kwargs: Any) -> NoReturn:
        _refuse(cls.__qualname__)

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        made = stand_in_class(cls.__qualname__, name)  # `mitmproxy_rs.udp.UdpServer`
        setattr(cls, name, made)
        return made

    def __getitem__(cls, key: object) -> NoReturn:
        _refuse(f"{cls.__qualname__}[{key!r}]")

    def __iter__(cls) -> NoReturn:
        _refuse(cls.__qualname__)


def stand_in_class(within: str, name: str) -> type:
    made = StandIn(name, (), {"__module__": within})
    made.__qualname__ = f"{within}.{name}"
    return made


class StandInModule(types.ModuleType):
    """A module whose every (non-dunder) name is a stand-in class, made on first read."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        made = stand_in_class(self.__name__, name)
        setattr(self, name, made)
        return made


def is_stand_in(module: object) -> bool:
    return isinstance(module, StandInModule)


class _Loader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return StandInModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__path__ = []  # a package: its submodules are asked of the finder too


class StandInFinder(importlib.abc.MetaPathFinder):
    """Answers the imports of `STAND_INS` and their submodules with stand-in modules."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not covered(fullname):
            return None
        return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=True)


def covered(name: str) -> bool:
    return any(name == each or name.startswith(each + ".") for each in STAND_INS)


def install() -> bool:
    """From now on, `STAND_INS` import as stand-ins; False (nothing done) when one of them,
    or one of mitmproxy's `IMPORTERS`, is imported already."""
    if any(isinstance(each, StandInFinder) for each in sys.meta_path):
        return True
    if any(covered(name) or name in IMPORTERS for name in sys.modules):
        return False
    sys.meta_path.insert(0, StandInFinder())
    return True
