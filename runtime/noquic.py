"""A run never speaks QUIC: aioquic and mitmproxy's QUIC and HTTP/3 layers are not loaded
(issue 36, D297).

egress-proxy listens in `regular` or `transparent` mode, both TCP; mitmproxy reaches its
QUIC code only for UDP modes (`http3`, `quic`, `udp`, `dns`, WireGuard, reverse/upstream
to an `http3://` or `quic://` server) or when a connection's negotiated ALPN is `h3`. Yet
`mitmproxy.proxy.layers` and `mitmproxy.addons.tlsconfig` import aioquic at import time
(the QUIC layers, the HTTP/3 client and server, `H3_ALPN`, `CipherSuite`): 8.2 MiB of an
idle run's 76 (aioquic's compiled code, pylsqpack, their Python modules).

`install()`, called before mitmproxy is imported, puts a finder first on `sys.meta_path`
that answers the imports of `STAND_INS` (and their submodules) with stand-in modules: every
name read from one is a stand-in class. A stand-in class can be named, compared, used in
`isinstance` (never true: none is ever made) and in a union; making one, calling it,
indexing it or reading one of its attributes raises `QuicUnavailable`, which names the
QUIC name that was reached. mitmproxy's other code is its own, unchanged.

Invariants: done only when neither aioquic nor a module of `STAND_INS` is imported yet (a
process that has them keeps them: the tests' process, `--engine mitmdump`); a dunder name
read from a stand-in is an AttributeError, as on a real module or class, so that
`getattr(x, "__origin__", None)` and the import system's probes see nothing; nothing of a
stand-in does any I/O or holds state beyond its name.
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
    "pylsqpack",
    "mitmproxy.proxy.layers.quic",
    "mitmproxy.proxy.layers.http._http3",
    "mitmproxy.proxy.layers.http._http_h3",
)


class QuicUnavailable(NotImplementedError):
    """mitmproxy reached QUIC or HTTP/3 code in a process that has none."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"{name}: QUIC and HTTP/3 are not loaded in egress-proxy (it listens on TCP "
            "only, D297); this connection needed them"
        )


def _refuse(name: str) -> NoReturn:
    raise QuicUnavailable(name)


class StandIn(type):
    """The type of a stand-in class: named, never made."""

    def __call__(cls, *_args: Any, **_kwargs: Any) -> NoReturn:
        _refuse(cls.__qualname__)

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        _refuse(f"{cls.__qualname__}.{name}")

    def __getitem__(cls, key: object) -> NoReturn:
        _refuse(f"{cls.__qualname__}[{key!r}]")

    def __iter__(cls) -> NoReturn:
        _refuse(cls.__qualname__)


def stand_in_class(module: str, name: str) -> type:
    made = StandIn(name, (), {"__module__": module})
    made.__qualname__ = f"{module}.{name}"
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
    """From now on, QUIC's modules import as stand-ins; False (nothing done) when one of
    them, or mitmproxy's layer package that imports them, is imported already."""
    if any(isinstance(each, StandInFinder) for each in sys.meta_path):
        return True
    if any(covered(name) or name == "mitmproxy.proxy.layers" for name in sys.modules):
        return False
    sys.meta_path.insert(0, StandInFinder())
    return True
