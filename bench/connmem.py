"""Memory per idle intercepted connection, engine only (issue 26; D144's method, repeatable).

`python -m bench.connmem [--connections 300] [--trace 25] [--without ADDON]`, no root,
loopback only. `--without` runs the engine without one of its lean addons (by class name),
for the same run's figure with and without one change.

The lean engine (runtime/engine/lean.py, no policy, no egress addons) runs in a process of its own
under `-O` (`serve`, below). This process is the client and the upstream: a TLS server on
127.0.0.1 answering every GET with a small body, and `connections` CONNECT tunnels through
the engine, each a TLS handshake with the engine's certificate and one kept-alive GET, so
both legs (client TLS, upstream TLS) exist. After `WARMUP` connections (certificate
generated, contexts cached, allocator warm) the engine's VmRSS is read, then after the
others and a settle; the figure is the RSS delta over those others. With `--trace N` the
engine runs under `tracemalloc` and reports the N largest lines allocated for the idle
connections (the snapshot after the warm-up against the one after all), per connection.

The bench's scenario 6 (bench/idle.py) measures the full product in network namespaces;
this one isolates the engine, so a change below mitmproxy's hooks is seen on its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from testbed.fixed_upstream import FixedResponse, server_context, start_lean_engine

WARMUP = 10
SETTLE_S = 1.5
BODY = b"idle" * 64
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise KeyError("VmRSS")


# ---- the engine process ---------------------------------------------------------------------


def _heap() -> dict[str, int]:
    """glibc's malloc in use (OpenSSL, cryptography's Rust, Python's objects over 512 bytes)
    and Python's small-object allocator in use, in bytes."""
    import sys

    from testbed.heap import malloc_in_use

    return {"malloc": malloc_in_use(), "pymalloc": sys.getallocatedblocks()}


def _without(names: list[str]) -> None:
    """The lean engine made without the addons of these class names (the same run's
    before/after of one addon, issue 49)."""
    from sandbox_egress.runtime.engine import lean

    made = lean.lean_addons

    def lean_addons() -> list[Any]:
        kept = [each for each in made() if type(each).__name__ not in names]
        if len(kept) != len(made()) - len(names):
            raise SystemExit(f"--without {names}: not all are lean addons")
        return kept

    lean.lean_addons = lean_addons


async def _serve(confdir: str, trace: int, snapshots: str) -> None:
    master, runner, port = await start_lean_engine(confdir)
    taken = 0

    def snapshot(*_: object) -> None:
        nonlocal taken
        if trace:
            import gc
            import tracemalloc

            gc.collect()
            tracemalloc.take_snapshot().dump(f"{snapshots}.{taken}")
            kinds: dict[str, int] = {}
            for each in gc.get_objects():
                name = type(each).__qualname__
                kinds[name] = kinds.get(name, 0) + 1
            Path(f"{snapshots}.{taken}.types").write_text(json.dumps(kinds))
        taken += 1
        print(json.dumps(_heap()), flush=True)

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, snapshot)
    loop.add_signal_handler(signal.SIGTERM, master.shutdown)
    print(json.dumps({"port": port}), flush=True)
    await runner


# ---- the client and upstream ----------------------------------------------------------------


async def _open(proxy_port: int, up_port: int, client_tls: ssl.SSLContext) -> Any:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy_port)
    writer.write(b"CONNECT localhost:%d HTTP/1.1\r\nHost: localhost\r\n\r\n" % up_port)
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"CONNECT answered {head[:40]!r}")
    await writer.start_tls(client_tls, server_hostname="localhost")
    writer.write(b"GET / HTTP/1.1\r\nHost: localhost:%d\r\n\r\n" % up_port)
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200") or await reader.readexactly(len(BODY)) != BODY:
        raise RuntimeError(f"GET answered {head[:40]!r}")
    return writer


async def stop(engine: asyncio.subprocess.Process) -> None:
    """SIGTERM, then SIGKILL after 20 s; reaped either way."""
    engine.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(engine.wait(), 20)
    except TimeoutError:
        engine.kill()
        await engine.wait()


async def measure(
    connections: int, trace: int, work: Path, without: tuple[str, ...] = ()
) -> dict[str, Any]:
    up = await asyncio.get_running_loop().create_server(
        FixedResponse.serving(RESPONSE), "127.0.0.1", 0, ssl=server_context(work), backlog=1024
    )
    up_port = up.sockets[0].getsockname()[1]
    argv = [sys.executable, "-O", "-m", "bench.connmem", "serve", "--confdir", str(work / "conf")]
    env = dict(os.environ)
    if trace:
        argv += ["--trace", str(trace), "--snapshots", str(work / "snap")]
        env["PYTHONTRACEMALLOC"] = "1"
    for name in without:
        argv += ["--without", name]
    engine = await asyncio.create_subprocess_exec(
        *argv, stdout=subprocess.PIPE, env=env, cwd=Path(__file__).resolve().parents[1]
    )
    assert engine.stdout is not None
    try:
        port = json.loads(await asyncio.wait_for(engine.stdout.readline(), 60))["port"]
        client_tls = ssl.create_default_context()
        client_tls.check_hostname, client_tls.verify_mode = False, ssl.CERT_NONE

        async def snapshot() -> dict[str, int]:
            engine.send_signal(signal.SIGUSR1)
            assert engine.stdout is not None
            return dict(json.loads(await asyncio.wait_for(engine.stdout.readline(), 120)))

        writers = [await _open(port, up_port, client_tls) for _ in range(WARMUP)]
        await asyncio.sleep(SETTLE_S)
        heap_before = await snapshot()
        before = _rss_kib(engine.pid)
        started = time.monotonic()
        for _ in range(connections):
            writers.append(await _open(port, up_port, client_tls))
        opened_s = time.monotonic() - started
        await asyncio.sleep(SETTLE_S)
        after = _rss_kib(engine.pid)
        heap_after = await snapshot()
        found: dict[str, Any] = {
            "connections": connections,
            "rss_before_kib": before,
            "rss_after_kib": after,
            "kib_per_connection": round((after - before) / connections, 1),
            "open_seconds": round(opened_s, 1),
            # glibc malloc (OpenSSL, Rust, large Python objects), in bytes per connection
            "malloc_per_connection": round(
                (heap_after["malloc"] - heap_before["malloc"]) / connections
            ),
            # Python's allocated blocks (objects, any size) per connection
            "python_blocks_per_connection": round(
                (heap_after["pymalloc"] - heap_before["pymalloc"]) / connections, 1
            ),
        }
        if trace:
            found["traced"] = _traced(work / "snap", connections, trace)
        for writer in writers:
            writer.close()
        return found
    finally:
        await stop(engine)
        up.close()


def _traced(prefix: Path, connections: int, top: int) -> dict[str, Any]:
    import tracemalloc

    ignore = [tracemalloc.Filter(False, tracemalloc.__file__)]
    first = tracemalloc.Snapshot.load(f"{prefix}.0").filter_traces(ignore)
    last = tracemalloc.Snapshot.load(f"{prefix}.1").filter_traces(ignore)
    grown = last.compare_to(first, "lineno")
    total = sum(stat.size_diff for stat in grown)
    kinds = [json.loads(Path(f"{prefix}.{n}.types").read_text()) for n in (0, 1)]
    more = {name: count - kinds[0].get(name, 0) for name, count in kinds[1].items()}
    return {
        "objects_per_connection": [
            [name, round(count / connections, 2)]
            for name, count in sorted(more.items(), key=lambda kv: -kv[1])[:top]
            if count >= connections // 2
        ],
        "bytes_per_connection": round(total / connections),
        "top": [
            [round(stat.size_diff / connections), str(stat.traceback[0])] for stat in grown[:top]
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.connmem", description=__doc__)
    parser.add_argument("command", nargs="?", default="measure", choices=["measure", "serve"])
    parser.add_argument("--connections", type=int, default=300)
    parser.add_argument("--trace", type=int, default=0, help="tracemalloc's top N lines")
    parser.add_argument("--confdir", default="")
    parser.add_argument("--snapshots", default="")
    parser.add_argument(
        "--without", action="append", default=[], metavar="ADDON",
        help="run the engine without this lean addon (class name; repeatable)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.command == "serve":
        if args.without:
            _without(args.without)
        asyncio.run(_serve(args.confdir, args.trace, args.snapshots))
        return 0
    with tempfile.TemporaryDirectory(prefix="connmem-") as work:
        found = asyncio.run(measure(args.connections, args.trace, Path(work), tuple(args.without)))
    traced = found.pop("traced", None)
    print(json.dumps(found))
    if traced:
        print(f"tracemalloc: {traced['bytes_per_connection']} bytes per connection; largest lines:")
        print("objects (tracked by the collector) per connection:")
        print(
            "  "
            + ", ".join(f"{name} {count:g}" for name, count in traced["objects_per_connection"])
        )
        for size, where in traced["top"]:
            print(f"{size:8d}  {where.replace(str(Path(sys.prefix)), '<venv>')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
