"""A node proxy's sandboxes while it runs: load the directory, watch it, swap the snapshot.

`Tenants` owns the `SandboxDirectory` and the current `Tenancy`. A scan (at start, on
SIGHUP, and every watch interval in a worker thread, one at a time) reads the files that
changed (the watch's, once they stopped changing: `lifecycle.Settling`, D102); back on
the event loop, when a sandbox was added, changed or removed, hands a new snapshot to
`install` in one assignment; an invalid file is logged as a warning (never its secret
values; never an error, which would stop mitmproxy at start, D341), counted and kept for
/status (`refused`), and its sandbox keeps its last good policy (a new one stays unknown:
no egress). `node_changed()` rebuilds every sandbox's policy over the node's new one (a node
reload). The watch task is owned by `serve` (runtime/launcher.py), which cancels it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

from sandbox_egress.proxy.metrics import SandboxMetrics
from sandbox_egress.proxy.policy import Policy
from sandbox_egress.proxy.tenancy.sandboxes import SandboxDirectory, SandboxesSection, Scan
from sandbox_egress.proxy.tenancy.tenants import Tenancy
from sandbox_egress.runtime.lifecycle import Settling

log = logging.getLogger("egress")


class Tenants:
    def __init__(
        self,
        section: SandboxesSection,
        node: Policy,
        install: Callable[[Tenancy], None],
        metrics: SandboxMetrics,
        settling: Settling | None = None,
    ) -> None:
        self.directory = SandboxDirectory(section.directory, section.secrets)
        self.directory.node_placeholders = frozenset(node.config.placeholders.owners)
        # The watch reads a changed file once it has stopped changing (D102).
        self.settling = Settling() if settling is None else settling
        self.tenancy = Tenancy(section, node)
        self._install = install
        self._metrics = metrics
        self._scanning = threading.Lock()
        self._unswapped: frozenset[str] = frozenset()  # changed, not yet in a snapshot

    def scan(self, cause: str = "file change", *, watched: bool = False) -> None:
        """Scan now: at start and on SIGHUP every changed file is read at once; `watched`
        (the watch's scan) reads a changed file only once it has stopped changing."""
        with self._scanning:
            result = self.directory.scan(self.settling if watched else None)
        self._apply(result, cause)

    async def watch(self, interval: float) -> None:
        """Scan every `interval` seconds, off the event loop (stat'ing a thousand files and
        parsing the changed ones must not stall connections); runs until cancelled."""
        while True:
            await asyncio.sleep(interval)
            result = await asyncio.to_thread(self._scan_locked)
            self._apply(result, "file change")

    def _scan_locked(self) -> Scan:
        with self._scanning:  # a SIGHUP scan on the loop waits for a running one
            return self.directory.scan(self.settling)

    def _apply(self, result: Scan, cause: str) -> None:
        for problem in result.problems:
            log.warning("sandbox file refused (%s), keeping its last good policy: %s",
                        cause, problem)  # fmt: skip
        failed = {p.file for p in result.problems}
        self._metrics.loads.labels("failed").inc(len(failed))
        self._metrics.loads.labels("ok").inc(len(result.changed))
        self._metrics.invalid.set(len(self.directory.invalid))
        if not (result.changed or result.removed):
            return
        self._swap(self.tenancy.node, result.changed)
        log.warning("sandboxes (%s): %d loaded, %d changed, %d removed", cause,
                    len(self.directory.sandboxes), len(result.changed),
                    len(result.removed))  # fmt: skip

    def node_changed(self, node: Policy) -> None:
        """A node reload: every sandbox's policy over the node's new one. A placeholder the
        new node file shares with a sandbox file is refused wherever that sandbox sends it
        (D179, D342)."""
        placeholders = frozenset(node.config.placeholders.owners)
        with self._scanning:
            self.directory.node_placeholders = placeholders
            sandboxes = list(self.directory.sandboxes.values())
        for sandbox in sandboxes:
            if placeholders & set(sandbox.network.placeholders.owners):
                message = "sandbox %s: a placeholder of its file is the node file's too; it is "
                log.error(
                    message + "refused wherever it is sent until one file changes", sandbox.id
                )
        self._swap(node, frozenset())

    def _swap(self, node: Policy, changed: frozenset[str]) -> None:
        """Install the snapshot of every sandbox over `node`. Building it can still fail
        (a sandbox's RE2 matcher holds the node file's values too, and RE2 has a size
        limit: a file too large on its own is refused at load, D427): then the running
        snapshot stays, the failure is logged and
        counted, and the sandboxes it would have changed are rebuilt at the next swap."""
        changed = changed | self._unswapped
        try:
            with self._scanning:  # a scan in the worker thread changes `directory.sandboxes`
                fresh = self.tenancy.rebuilt(self.directory.sandboxes, node, changed)
        except Exception as exc:  # no sandbox file may stop the node (D341)
            self._unswapped = changed
            self._metrics.loads.labels("failed").inc()
            log.warning("sandboxes: the new snapshot cannot be built (%s); the running one "
                        "stays", type(exc).__name__)  # fmt: skip
            return
        self._unswapped = frozenset()
        self.tenancy = fresh
        self._metrics.loaded.set(len(self.tenancy.policies))
        self._install(self.tenancy)
