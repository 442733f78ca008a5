"""`GET /status` on the metrics address (issue 34): what a rollout checks of a replica —
the version, the SHA-256 of the configuration file it runs, the sandboxes it has
loaded and the sandbox files it refused (each with its located problems, D341), the
state backend with its health (docs/operations.md#from-one-node-to-a-fleet), and (a
worker's) the engine's changes below mitmproxy's hooks that are active
(runtime/engine/patches.py).

The metrics server's thread reads `document()`: plain fields, replaced whole. The event
loop refreshes the backend's health every `INTERVAL_S` (`watch`) — a probe of a remote
store never runs on the metrics thread — and the hash on every successful reload. A
backend that decides (`proxy.state.fallback`) also says what its last real operation
showed (`observed`): the newer of that and the probe is the health shown (D401). No
secret is ever part of it: the Redis URL is not shown, only the backend's name.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from sandbox_egress.common.problems import Problem
from sandbox_egress.common.serve import version
from sandbox_egress.proxy.state.settings import StateConfig
from sandbox_egress.runtime.engine import patches

INTERVAL_S = 5.0


class Probed(Protocol):
    name: str

    async def health(self) -> str: ...


class ProbedState:
    """The parent of `--workers N`, which decides nothing: the configured backend's name and
    a fresh probe of it (the node's memory is the parent's own: always reachable)."""

    def __init__(self, config: StateConfig) -> None:
        self.name = config.backend
        self._config = config

    async def health(self) -> str:
        if self._config.backend == "memory":
            return "ok"
        from sandbox_egress.proxy.state.redis import RedisState

        state = RedisState(self._config)
        try:
            return await state.health()
        finally:
            await state.close()


def config_hash(path: str | Path) -> str:
    try:
        return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return "unreadable"


class StatusBoard:
    def __init__(
        self,
        config_path: str | Path,
        state: Probed,
        sandboxes: Callable[[], list[str]] | None = None,
        workers: int | None = None,
        refused: Callable[[], Mapping[str, Sequence[Problem]]] | None = None,
        engine: str | None = None,
    ) -> None:
        self._path = config_path
        self._state = state
        self._sandboxes = sandboxes
        self._refused = refused
        self._workers = workers
        self._engine = engine
        self.config = config_hash(config_path)
        self.health = "unknown"
        self.checked = 0.0

    def reloaded(self) -> None:
        self.config = config_hash(self._path)

    async def refresh(self) -> None:
        self.health = await self._state.health()
        self.checked = time.time()

    async def watch(self, interval: float = INTERVAL_S) -> None:
        while True:
            await self.refresh()
            await asyncio.sleep(interval)

    def _health(self) -> tuple[str, float]:
        """The newer of the last probe and the backend's last real operation."""
        observed: tuple[str, float] | None = getattr(self._state, "observed", None)
        if observed is not None and observed[1] > self.checked:
            return observed
        return self.health, self.checked

    def document(self) -> dict[str, Any]:
        health, checked = self._health()
        sandboxes = None if self._sandboxes is None else sorted(self._sandboxes())
        document: dict[str, Any] = {
            "version": version(),
            "config": {"path": str(self._path), "sha256": self.config.removeprefix("sha256:")},
            "sandboxes": None
            if sandboxes is None
            else {"count": len(sandboxes), "ids": sandboxes, "refused": self._refused_files()},
            "state": {
                "backend": self._state.name,
                "health": health,
                "checked": round(checked, 3) or None,
            },
        }
        if self._workers is not None:
            document["workers"] = self._workers
        if self._engine is not None:  # a worker: what it changes below mitmproxy's hooks
            active = patches.active(self._engine)
            document["engine"] = {"name": self._engine, "patches": active}
            if "relay" in active:  # what the body relay carried (issue 49)
                from sandbox_egress.runtime.engine import relay

                document["engine"]["relayed"] = dict(relay.relayed)
            if "fastpath" in active:  # what the kept-alive fast path took (issue 49, D610)
                from sandbox_egress.runtime.engine import fastpath

                document["engine"]["fast"] = dict(fastpath.taken)
        return document

    def _refused_files(self) -> list[dict[str, Any]]:
        """Each refused sandbox file: its name and its problems, located (`where: what`)."""
        found = {} if self._refused is None else self._refused()
        return [
            {
                "file": Path(problems[0].file).name if problems else f"{sandbox}.yaml",
                "sandbox": sandbox,
                "problems": [_located(p) for p in problems],
            }
            for sandbox, problems in sorted(found.items())
        ]


def _located(problem: Problem) -> str:
    """A problem without the file's path: `[line:column: ]location: message`."""
    at = [f"{problem.line}:{problem.column}"] if problem.line is not None else []
    return ": ".join([*at, *([problem.location] if problem.location else []), problem.message])
