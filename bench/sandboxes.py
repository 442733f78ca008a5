"""Scenario 8: a node proxy serving 1,000 sandbox files (docs/configuration.md#sandboxes).

Measured, with the real loader, directory scanner and policies:
* start: the first scan of a directory of N sandbox files (each a token, a class, an
  address and five entries, one with a transform) and the snapshot built from it;
* reload: one file changed, then the next scan (every file stat'ed, one read) and the
  snapshot rebuilt sharing the other policies; and a node reload (every policy rebuilt);
* decide: `decide` + `pick_address` through a sandbox's policy (bounded by the node's)
  with N sandboxes loaded, against the node's `Policy` alone, for an allowed host;
* resident memory: a real `egress-proxy run` (loopback ports, no traffic) started with
  N sandbox files against one started with none; the difference over N is the memory per
  sandbox policy. The target of issue 23: 1,000 sandboxes under ten sidecars (~80 MiB
  each).

No network beyond loopback, no root. Timings are medians of a few rounds.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sandbox_egress.proxy.config import parse
from sandbox_egress.proxy.hosts import canonical_host
from sandbox_egress.proxy.policy import Policy
from sandbox_egress.proxy.sandboxes import SandboxDirectory, SandboxesSection
from sandbox_egress.proxy.tenancy import Tenancy

COUNTS = (1, 100, 1_000)
ROUNDS = 5
PUBLIC = [ipaddress.ip_address("93.184.215.14")]
NODE_TEXT = """\
network:
  allowlist:
    - domain: "*.example.com"
    - domain: "*.pypi.org"
    - domain: pypi.org
sandboxes:
  directory: {directory}
"""


def sandbox_text(n: int) -> str:
    return (
        f'token: "token-of-sandbox-{n:06d}-0123456789"\n'
        f"class: class-{n % 10}\n"
        f"addresses: [10.{n // 65536}.{n // 256 % 256}.{n % 256}]\n"
        "network:\n  allowlist:\n"
        f"    - domain: api{n}.example.com\n"
        "      transform:\n"
        f'        Authorization: "Bearer secret-value-of-{n:06d}"\n'
        f"    - domain: '*.s{n}.example.com'\n"
        "    - domain: pypi.org\n      ports: [443]\n"
        "    - domain: '*.pypi.org'\n      ports: [443]\n"
        "    - domain: files.example.com\n"
    )


def write_directory(directory: Path, count: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for n in range(count):
        (directory / f"sbx-{n:06d}.yaml").write_text(sandbox_text(n))


def _median_s(op: Callable[[], object], rounds: int = ROUNDS) -> float:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        op()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def _per_call_ns(op: Callable[[], object], loops: int = 20_000) -> float:
    samples = []
    for _ in range(ROUNDS):
        started = time.perf_counter_ns()
        for _ in range(loops):
            op()
        samples.append((time.perf_counter_ns() - started) / loops)
    return statistics.median(samples)


def node_policy() -> Policy:
    return Policy(parse({"network": {"allowlist": [{"domain": "*.example.com"}]}}, "n", {}))


def loaded(directory: Path, node: Policy) -> tuple[SandboxDirectory, Tenancy]:
    scanner = SandboxDirectory(directory)
    found = scanner.scan()
    tenancy = Tenancy(SandboxesSection(directory), node).rebuilt(
        scanner.sandboxes, node, found.changed
    )
    return scanner, tenancy


def measure_in_process(count: int, work: Path) -> dict[str, Any]:
    directory = work / f"in-process-{count}"
    write_directory(directory, count)
    node = node_policy()
    start_s = _median_s(lambda: loaded(directory, node), rounds=3)
    scanner, tenancy = loaded(directory, node)
    last = directory / f"sbx-{count - 1:06d}.yaml"
    edits = iter(range(1_000_000))

    def reload_one() -> None:
        nonlocal tenancy
        last.write_text(sandbox_text(count - 1) + f"# edit {next(edits)}\n")
        found = scanner.scan()
        assert found.changed == {last.stem}, found
        tenancy = tenancy.rebuilt(scanner.sandboxes, node, found.changed)

    reload_s = _median_s(reload_one)
    idle_scan_s = _median_s(scanner.scan)
    other_node = node_policy()
    node_reload_s = _median_s(lambda: tenancy.rebuilt(scanner.sandboxes, other_node, frozenset()))
    sandbox = f"sbx-{count // 2:06d}"
    host = canonical_host(f"api{count // 2}.example.com")

    def through_sandbox() -> None:
        policy = tenancy.policy(sandbox)
        policy.pick_address(policy.decide(host, 443, tls=True), PUBLIC, 443)

    node_host = canonical_host("api.example.com")

    def node_alone() -> None:
        node.pick_address(node.decide(node_host, 443, tls=True), PUBLIC, 443)

    assert tenancy.policy(sandbox).decide(host, 443, tls=True).injects
    return {
        "sandboxes": count,
        "start_s": start_s,
        "reload_one_s": reload_s,
        "scan_unchanged_s": idle_scan_s,
        "node_reload_s": node_reload_s,
        "decide_sandbox_ns": _per_call_ns(through_sandbox),
        "decide_node_ns": _per_call_ns(node_alone),
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise KeyError("VmRSS")


@contextlib.contextmanager
def _proxy(config: Path, work: Path) -> Iterator[subprocess.Popen[bytes]]:
    listen, metrics = _free_port(), _free_port()
    argv = [
        str(Path(sys.executable).parent / "egress-proxy"), "run", "--config", str(config),
        "--listen", f"127.0.0.1:{listen}", "--metrics", f"127.0.0.1:{metrics}",
        "--certs", str(work / "certs"), "--audit-log", os.devnull,
    ]  # fmt: skip
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):  # /healthz: 200 once the proxy accepts
                url = f"http://127.0.0.1:{metrics}/healthz"
                if urllib.request.urlopen(url, timeout=1).status == 200:
                    break
            if child.poll() is not None:
                raise RuntimeError(f"egress-proxy exited {child.returncode}")
            time.sleep(0.1)
        yield child
    finally:
        child.terminate()
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def measure_process(count: int, work: Path) -> dict[str, Any]:
    """Resident memory of a running proxy with `count` sandbox files and with none."""
    result: dict[str, Any] = {"sandboxes": count}
    for label, files in (("none", 0), ("loaded", count)):
        directory = work / f"process-{label}"
        write_directory(directory, files)
        config = work / f"node-{label}.yaml"
        config.write_text(NODE_TEXT.format(directory=directory))
        started = time.perf_counter()
        with _proxy(config, work) as child:
            result[f"ready_{label}_s"] = time.perf_counter() - started
            time.sleep(1.0)  # the first watch scans have run
            result[f"rss_{label}_mib"] = _rss_kib(child.pid) / 1024
    result["per_sandbox_kib"] = (
        (result["rss_loaded_mib"] - result["rss_none_mib"]) * 1024 / max(count, 1)
    )
    return result


def measure(counts: tuple[int, ...] = COUNTS) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="egress-bench-sandboxes-") as name:
        work = Path(name)
        points = [measure_in_process(n, work) for n in counts]
        process = measure_process(counts[-1], work)
    return {"points": points, "process": process}


def lines(section: dict[str, Any], grid: Callable[..., list[str]] | None = None) -> list[str]:
    out = ["Scenario 8: a node proxy serving sandbox files (medians)"]
    out.append(
        "sandboxes  start ms  reload-one ms  scan-unchanged ms  node-reload ms"
        "  decide us (node alone)"
    )
    for p in section["points"]:
        out.append(
            f"{p['sandboxes']:>9,}  {p['start_s'] * 1e3:8.1f}  {p['reload_one_s'] * 1e3:13.2f}"
            f"  {p['scan_unchanged_s'] * 1e3:17.2f}  {p['node_reload_s'] * 1e3:14.1f}"
            f"  {p['decide_sandbox_ns'] / 1e3:6.2f} ({p['decide_node_ns'] / 1e3:.2f})"
        )
    proc = section["process"]
    out.append(
        f"egress-proxy run: RSS {proc['rss_none_mib']:.1f} MiB with no sandbox, "
        f"{proc['rss_loaded_mib']:.1f} MiB with {proc['sandboxes']:,} "
        f"({proc['per_sandbox_kib']:.1f} KiB per sandbox policy); ready in "
        f"{proc['ready_none_s']:.1f} s / {proc['ready_loaded_s']:.1f} s"
    )
    return out


if __name__ == "__main__":
    import json

    found = measure()
    print("\n".join(lines(found)))
    print(json.dumps(found, indent=1))
