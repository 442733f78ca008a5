"""Out of descriptors, the proxy pauses accepting once and resumes (runtime/engine/accepting.py).

A real child process with a 40-descriptor limit serves TCP on loopback; this test opens
more connections than it can accept, then closes them and checks that the child answers
again. Without the guard CPython 3.12's accept loop reports the error hundreds of times.
"""

from __future__ import annotations

import inspect
import json
import socket
import subprocess
import sys
from asyncio import selector_events

from sandbox_egress.runtime.engine import accepting

CHILD = r"""
import asyncio, json, resource, sys
from sandbox_egress.runtime.engine import accepting
resource.setrlimit(resource.RLIMIT_NOFILE, (40, 40))
counts = {"errors": 0, "pauses": 0}
if sys.argv[1] == "guard":
    accepting.install(lambda: counts.__setitem__("pauses", counts["pauses"] + 1))

async def main():
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _l, _c: counts.__setitem__("errors", counts["errors"] + 1))

    async def serve(reader, writer):
        data = await reader.read(4)
        if data == b"ping":
            writer.write(b"pong")
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, backlog=100)
    print(server.sockets[0].getsockname()[1], flush=True)
    await loop.run_in_executor(None, sys.stdin.readline)  # the test is done
    print(json.dumps(counts), flush=True)

asyncio.run(main())
"""


def run_child(mode: str) -> tuple[dict[str, int], bytes, str]:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        port = int(child.stdout.readline())
        flood = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(80)]
        # Each of these waits on the child's read: it holds its descriptor until closed.
        for sock in flood:
            sock.close()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as probe:
            probe.settimeout(10)
            probe.sendall(b"ping")
            answer = probe.recv(4)
        child.stdin.write("done\n")
        child.stdin.flush()
        counts = json.loads(child.stdout.readline())
    finally:
        child.kill()
        _, stderr = child.communicate(timeout=10)
    return counts, answer, stderr


def test_out_of_descriptors_pauses_once_and_resumes() -> None:
    counts, answer, stderr = run_child("guard")
    assert answer == b"pong"
    assert counts["errors"] == 0 and counts["pauses"] >= 1, counts
    assert stderr.count("accepting paused") == 1, stderr


def test_the_internals_the_guard_relies_on_are_where_they_were() -> None:
    loop = selector_events.BaseSelectorEventLoop
    accept = inspect.signature(accepting._original)
    assert list(accept.parameters)[:6] == [
        "self", "protocol_factory", "sock", "sslcontext", "server", "backlog"
    ]  # fmt: skip
    serving = inspect.signature(loop._start_serving)
    assert list(serving.parameters) == list(accept.parameters)
    assert list(inspect.signature(loop._accept_connection2).parameters)[:5] == [
        "self", "protocol_factory", "conn", "extra", "sslcontext"
    ]  # fmt: skip
