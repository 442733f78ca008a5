"""CPU per new TLS connection, engine only (issue 36): `python -m bench.conncpu
[--connections 300] [--profile N]`, no root, loopback only.

The lean engine of bench/connmem.py (its `serve`, in a process of its own under `-O`); this
process is the client and the TLS upstream. After `connmem.WARMUP` connections (the
certificate generated, the contexts cached), `connections` connections one after another,
each a CONNECT, a TLS handshake on both legs, one GET and a close; the figure is the
engine's user+system CPU time (/proc/PID/stat) over them, per connection. The kernel's
loopback delivery of what the engine sends is charged to the engine, as it is in
scenario 1c. With `--profile N` the engine runs under cProfile and the N functions with the
most time of their own are listed (the profiler roughly doubles the figure).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pstats
import ssl
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.connmem import RESPONSE, WARMUP, _open, stop
from bench.procs import cpu_seconds
from testbed.fixed_upstream import FixedResponse, server_context

SETTLE_S = 1.0


async def measure(connections: int, profile: bool, work: Path) -> dict[str, Any]:
    up = await asyncio.get_running_loop().create_server(
        FixedResponse.serving(RESPONSE), "127.0.0.1", 0, ssl=server_context(work), backlog=1024
    )
    up_port = up.sockets[0].getsockname()[1]
    profiled = ["-m", "cProfile", "-o", str(work / "profile")] if profile else []
    argv = [sys.executable, "-O", *profiled, "-m", "bench.connmem", "serve"]
    engine = await asyncio.create_subprocess_exec(
        *argv, "--confdir", str(work / "conf"),
        stdout=subprocess.PIPE, cwd=Path(__file__).resolve().parents[1],
    )  # fmt: skip
    assert engine.stdout is not None
    try:
        port = json.loads(await asyncio.wait_for(engine.stdout.readline(), 60))["port"]
        client_tls = ssl.create_default_context()
        client_tls.check_hostname, client_tls.verify_mode = False, ssl.CERT_NONE
        for _ in range(WARMUP):
            (await _open(port, up_port, client_tls)).close()
        await asyncio.sleep(SETTLE_S)
        before = cpu_seconds(engine.pid)
        for _ in range(connections):
            writer = await _open(port, up_port, client_tls)
            writer.close()
            await writer.wait_closed()
        await asyncio.sleep(SETTLE_S)
        spent = cpu_seconds(engine.pid) - before
        return {
            "connections": connections,
            "ms_cpu_per_connection": round(spent * 1000 / connections, 2),
        }
    finally:
        await stop(engine)
        up.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.conncpu", description=__doc__)
    parser.add_argument("--connections", type=int, default=300)
    parser.add_argument("--profile", type=int, default=0, help="cProfile's top N functions")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="conncpu-") as work:
        found = asyncio.run(measure(args.connections, args.profile > 0, Path(work)))
        print(json.dumps(found))
        if args.profile:
            stats = pstats.Stats(str(Path(work) / "profile"))
            stats.sort_stats("tottime").print_stats(args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
