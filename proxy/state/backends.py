"""The table of state backends (`state.backend`) and the one way to open the configured
one: a remote backend always comes wrapped in its `on_error` (`proxy.state.fallback`).

`memory` is this process's memory, or — in a worker of `--workers N`, whose parent
exports the socket in `EGRESS_STATE_SOCKET` — the parent's, shared by every worker
(`proxy.state.node`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from sandbox_egress.proxy.state import StateBackend
from sandbox_egress.proxy.state.fallback import Fallback
from sandbox_egress.proxy.state.memory import MemoryState
from sandbox_egress.proxy.state.node import SOCKET_ENV, NodeState
from sandbox_egress.proxy.state.settings import BACKEND_NAMES, OnError, StateConfig


def _memory(config: StateConfig, environ: Mapping[str, str]) -> StateBackend | None:
    socket = environ.get(SOCKET_ENV)
    return NodeState(socket) if socket else None


def _redis(config: StateConfig, environ: Mapping[str, str]) -> StateBackend:
    from sandbox_egress.proxy.state.redis import RedisState

    return RedisState(config)


# name -> the remote backend to ask (None: this process's memory alone)
BACKENDS: dict[str, Callable[[StateConfig, Mapping[str, str]], StateBackend | None]] = {
    "memory": _memory,
    "redis": _redis,
}
if tuple(BACKENDS) != BACKEND_NAMES:
    raise ImportError("proxy.state.backends: BACKENDS must have a row per BACKEND_NAMES")


def open_state(
    config: StateConfig,
    unavailable: Callable[[str, str], None] = lambda _backend, _outcome: None,
    environ: Mapping[str, str] | None = None,
) -> StateBackend:
    """The configured backend; `unavailable(backend, outcome)` counts unanswered decisions."""
    remote = BACKENDS[config.backend](config, os.environ if environ is None else environ)
    if remote is None:
        return MemoryState()
    name = "node" if isinstance(remote, NodeState) else remote.name
    on_error = OnError.LOCAL if name == "node" else config.on_error
    return Fallback(remote, on_error, lambda outcome: unavailable(name, outcome))
