"""Sockets opened inside another network namespace, from the test process itself.

A socket belongs to the namespace its thread was in when it was created, so the
thread switches in (`os.setns`), creates the socket, and switches back at once.
Used for the sandbox side of transparent-mode tests, whose default route goes
through the proxy's namespace — a route the root namespace must never get.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()


@contextmanager
def in_namespace(name: str) -> Iterator[None]:
    """Run the block with this thread in namespace `name` (only create sockets inside)."""
    with _lock:
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(f"/run/netns/{name}", os.O_RDONLY)
        try:
            os.setns(target, os.CLONE_NEWNET)
            try:
                yield
            finally:
                os.setns(own, os.CLONE_NEWNET)
        finally:
            os.close(target)
            os.close(own)


def connect(namespace: str, address: tuple[str, int], timeout: float = 10.0) -> socket.socket:
    with in_namespace(namespace):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(address)
    except BaseException:
        sock.close()
        raise
    return sock
