"""The running proxy's life: reload on SIGHUP or file change, drain on SIGTERM, a heartbeat.

* `Reloader` loads the configuration file again and swaps the policy in one assignment;
  a file that fails validation keeps the running policy (docs/configuration.md#audit-log). Every
  attempt sets
  `egress_config_last_reload_successful` and, when it worked, the success timestamp.
* `watch_file` polls the file's identity (the resolved path, inode, size and mtime of what
  it points to), so it sees an editor's rename, an in-place write and the way Kubernetes
  swaps a mounted ConfigMap (the `..data` symlink is replaced, the file name stays).
  It watches every file a `${file:...}` reference of the running configuration read
  too (`Reloader.files`), so a rotated secret is re-read without a restart (D115); a
  failed re-read is a refused reload: the last values stay, and it is logged and counted.
  A change is applied once the file has stayed the same for `SETTLE_S`, so a file
  written slowly in place is not applied half-written (docs/operations.md: write by
  rename, which is atomic).
* `drain` answers SIGTERM: `/healthz` turns 503, the listeners close so no new connection
  is accepted, transfers in flight get `grace` seconds to finish, then the proxy stops.
* `heartbeat` stamps the time from the event loop every second; the health endpoint
  (another thread) reports a loop that stopped stamping as unhealthy, so a wedged loop is
  seen by liveness probes, not only a live process.

Every task here is owned by `serve` (runtime/launcher.py), which cancels it on the way out.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass

from sandbox_egress.proxy.config import loader as configuration

log = logging.getLogger("egress")

WATCH_INTERVAL_S = 1.0
# A changed file is applied once it has not changed for this long (issue 21).
SETTLE_S = 2.0
HEARTBEAT_INTERVAL_S = 1.0

Fingerprint = tuple[str, int, int, int, int] | None


def fingerprint(path: str) -> Fingerprint:
    """What changes when the file (or what its symlinks point to) is replaced or written."""
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except OSError:
        return None
    return (real, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


@dataclass
class Reloader:
    """Reloads `path` and hands the fresh configuration to `apply`; counts every attempt."""

    path: str
    apply: Callable[[configuration.NetworkConfig], None]
    on_result: Callable[[bool], None]
    files: tuple[str, ...] = ()  # the secret files the running configuration read

    def fingerprints(self) -> tuple[Fingerprint, ...]:
        """The configuration file's, then each secret file's."""
        return tuple(fingerprint(p) for p in (self.path, *self.files))

    def __call__(self, cause: str = "SIGHUP") -> bool:
        try:
            fresh = configuration.load(self.path)
        except configuration.ConfigError as exc:
            # Logged before it is counted: whoever sees the counter move finds the lines.
            for problem in exc.problems:
                log.error("reload refused (%s), keeping the running configuration: %s",
                          cause, problem)  # fmt: skip
            self.on_result(False)
            return False
        self.apply(fresh)
        self.files = fresh.secret_files
        log.warning("configuration reloaded (%s): %d allowlist entries", cause,
                    len(fresh.allowlist))  # fmt: skip
        self.on_result(True)
        return True


class Settling:
    """Which watched things changed and then stayed the same for `settle` seconds (D102).

    The node file's watch (`watch_file`) and the sandbox directory's
    (`proxy.sandboxes.SandboxDirectory.scan`, per file) apply a change only once it has
    settled: a file written slowly in place is never read half-written."""

    def __init__(self, settle: float = SETTLE_S, clock: Callable[[], float] = time.monotonic):
        self.settle = settle
        self._clock = clock
        self._pending: dict[Hashable, tuple[object, float]] = {}  # key -> (seen, since)

    def settled(self, key: Hashable, seen: object) -> bool:
        """Whether `seen`, a changed fingerprint of `key`, has stayed the same for `settle`
        seconds. Its first sight, or another fingerprint than the one waiting, starts the
        wait (again); a settled one is forgotten, so the next change waits anew."""
        now = self._clock()
        waiting = self._pending.get(key)
        if waiting is None or waiting[0] != seen:
            self._pending[key] = (seen, now)  # changed (again): wait for it to settle
            return False
        if now - waiting[1] < self.settle:
            return False
        del self._pending[key]
        return True

    def forget(self, key: Hashable) -> None:
        """`key` is unchanged again, or gone: nothing of it is waiting."""
        self._pending.pop(key, None)


async def watch_file(
    reload: Reloader,
    interval: float = WATCH_INTERVAL_S,
    settle: float = SETTLE_S,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Reload once the file's, or a secret file's, fingerprint has changed and then stayed
    the same for `settle` seconds (`Settling`); runs until cancelled. A secret file that
    vanished is a change too: the reload reports it."""
    applied = reload.fingerprints()
    settling = Settling(settle, clock)
    while True:
        await sleep(interval)
        now = reload.fingerprints()
        if now[0] is None or now == applied:
            settling.forget(reload.path)
        elif settling.settled(reload.path, now):
            files = reload.files
            reload("file change")
            # What was read; when the reload changed the set of files, what it now reads.
            applied = now if reload.files == files else reload.fingerprints()


async def heartbeat(stamp: Callable[[float], None], interval: float = HEARTBEAT_INTERVAL_S) -> None:
    while True:
        stamp(time.monotonic())
        await asyncio.sleep(interval)


async def drain(
    stop_listening: Callable[[], None],
    open_connections: Callable[[], int],
    shutdown: Callable[[], None],
    grace: float,
) -> None:
    """Stop accepting, wait (at most `grace` seconds) for open connections, then stop."""
    stop_listening()
    deadline = time.monotonic() + grace
    while open_connections() > 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    remaining = open_connections()
    if remaining:
        log.warning("drain: %d connections still open after %.0f s; stopping", remaining, grace)
    shutdown()
