"""The running node proxy's sandboxes: start, watch, a node reload, `check` (1.12)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from sandbox_egress.proxy.config import parse
from sandbox_egress.proxy.metrics import ProxyMetrics
from sandbox_egress.proxy.policy import Policy
from sandbox_egress.proxy.sandboxes import SandboxesSection
from sandbox_egress.proxy.tenancy import Tenancy
from sandbox_egress.runtime.cli import main
from sandbox_egress.runtime.lifecycle import Settling
from sandbox_egress.runtime.tenants import Tenants

NODE = Policy(parse({"network": {"allowlist": [{"domain": "*"}]}}, "node.yaml", {}))
OTHER_NODE = Policy(parse({"network": {"allowlist": [{"domain": "*.example.com"}]}}, "n", {}))
ALPHA = "network:\n  allowlist:\n    - domain: a.example.com\n"


def test_tenants_install_a_snapshot_per_change(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "alpha.yaml").write_text(ALPHA)
    installed: list[Tenancy] = []
    metrics = ProxyMetrics()
    tenants = Tenants(SandboxesSection(tmp_path), NODE, installed.append, metrics.sandboxes)
    tenants.scan("start")
    assert list(installed[-1].policies) == ["alpha"]
    tenants.scan()
    assert len(installed) == 1  # nothing changed, nothing installed
    (tmp_path / "beta.yaml").write_text("network: {allowlist: [{domain: '**'}]}\n")
    with caplog.at_level(logging.WARNING, logger="egress"):
        tenants.scan()
    assert len(installed) == 1
    assert "beta.yaml:1:24: network.allowlist[0].domain" in caplog.text  # placed, D341
    assert metrics.registry.get_sample_value("egress_sandbox_files_invalid") == 1
    tenants.node_changed(OTHER_NODE)
    assert installed[-1].policies["alpha"].node is OTHER_NODE
    assert metrics.registry.get_sample_value("egress_sandboxes") == 1


def test_check_reads_every_sandbox_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node = tmp_path / "node.yaml"
    node.write_text("network: {allowlist: [{domain: '*'}]}\nsandboxes: {directory: sandboxes}\n")
    (tmp_path / "sandboxes").mkdir()
    (tmp_path / "sandboxes" / "alpha.yaml").write_text(ALPHA)
    assert main(["check", str(node)]) == 0
    assert capsys.readouterr().out.strip().endswith("1 allowlist entries, 1 sandbox files")
    (tmp_path / "sandboxes" / "beta.yaml").write_text("token: short\nnetwork: {}\n")
    assert main(["check", str(node)]) == 1
    assert "beta.yaml: token: must be at least 16 characters" in capsys.readouterr().err


def test_the_watch_scans_off_the_loop_and_installs_on_it(tmp_path: Path) -> None:
    import asyncio
    import threading

    installed: list[tuple[Tenancy, str]] = []
    metrics = ProxyMetrics()

    def install(tenancy: Tenancy) -> None:
        installed.append((tenancy, threading.current_thread().name))

    settling = Settling(0.0)  # two scans that see the same file: settled
    tenants = Tenants(SandboxesSection(tmp_path), NODE, install, metrics.sandboxes, settling)
    tenants.scan("start")
    (tmp_path / "alpha.yaml").write_text(ALPHA)

    async def watch_once() -> None:
        task = asyncio.create_task(tenants.watch(0.01))
        for _ in range(500):  # bounded: 5 s at most
            await asyncio.sleep(0.01)
            if installed:
                break
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(watch_once())
    assert [(list(t.policies), name) for t, name in installed] == [(["alpha"], "MainThread")]


GUARDED = "network:\n  allowlist:\n    - domain: a.example.com\n      deny: [{methods: [DELETE]}]\n"
HALF = "network:\n  allowlist:\n    - domain: a.example.com\n"  # valid, and no deny
WHOLE = HALF + "      deny: [{methods: [DELETE, PUT]}]\n"


def test_a_sandbox_file_rewritten_in_place_is_applied_only_whole(tmp_path: Path) -> None:
    """Issue 30: the directory applied a file half-written, its `deny:` gone while the
    writer paused. The watch's scan now reads a file once it has stopped changing (D102)."""
    path = tmp_path / "alpha.yaml"
    path.write_text(GUARDED)
    now = [0.0]
    installed: list[Tenancy] = []
    metrics = ProxyMetrics()
    settling = Settling(2.0, clock=lambda: now[0])
    tenants = Tenants(SandboxesSection(tmp_path), NODE, installed.append, metrics.sandboxes,
                      settling)  # fmt: skip
    tenants.scan("start")  # at start (and on SIGHUP): at once

    def deny_methods() -> list[frozenset[str] | None]:
        entry = installed[-1].policies["alpha"].config.allowlist[0]
        return [rule.methods for rule in entry.rules.deny]

    assert deny_methods() == [frozenset({"DELETE"})]
    writes = {1: HALF, 9: WHOLE}  # a 1.6 s pause between the halves, written in place
    seen: list[list[frozenset[str] | None]] = []
    for tick in range(1, 41):  # every 0.2 s for 8 s
        now[0] = tick * 0.2
        text = writes.get(tick)
        if text is not None:
            with open(path, "r+") as file:
                file.write(text)
                file.truncate()
            os.utime(path, ns=(int(now[0] * 1e9), int(now[0] * 1e9)))
        tenants.scan(watched=True)
        seen.append(deny_methods())
    assert [frozenset({"DELETE"})] in seen  # the old policy held while the file changed
    assert [] not in seen  # the half-written file (no deny) was never applied
    assert seen[-1] == [frozenset({"DELETE", "PUT"})]  # then the whole file applied
    assert len(installed) == 2  # at start, then once: the whole file
    applied_at = seen.index(seen[-1]) + 1  # the tick whose scan applied it
    assert applied_at >= 9 + 10  # not before it had stayed the same for 2 s


def test_a_snapshot_that_cannot_be_built_keeps_the_running_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Everyone's placeholders and values are one RE2 matcher, which has a size limit
    (sandbox files with large enough values make `re2.compile` fail: minutes of parsing
    to reach here, so the failure is injected). The running snapshot stays, nothing
    raises out of the scan (at start that stopped the node), and the sandboxes it would
    have changed are rebuilt at the next swap."""
    from sandbox_egress.proxy import tenancy as tenancy_module

    (tmp_path / "alpha.yaml").write_text(ALPHA)
    installed: list[Tenancy] = []
    metrics = ProxyMetrics()
    tenants = Tenants(SandboxesSection(tmp_path), NODE, installed.append, metrics.sandboxes)
    tenants.scan("start")
    real_merged = tenancy_module.merged

    def too_large(indexes: object) -> object:
        raise RuntimeError("pattern too large - compile failed")

    monkeypatch.setattr(tenancy_module, "merged", too_large)
    (tmp_path / "alpha.yaml").write_text(ALPHA.replace("a.example.com", "b.example.com"))
    with caplog.at_level(logging.WARNING, logger="egress"):
        tenants.scan()  # raises nothing
    assert "the new snapshot cannot be built (RuntimeError)" in caplog.text
    assert len(installed) == 1  # the running snapshot stays
    failed = metrics.registry.get_sample_value(
        "egress_sandbox_file_loads_total", {"result": "failed"}
    )
    assert failed == 1
    monkeypatch.setattr(tenancy_module, "merged", real_merged)
    (tmp_path / "beta.yaml").write_text(ALPHA)
    tenants.scan()
    entry = installed[-1].policies["alpha"].config.allowlist[0]
    assert entry.pattern == "b.example.com"  # alpha's change, carried to this swap
