"""`HOST:PORT` on the command line: one grammar for both halves.

Grammar: `HOST:PORT`, or `[V6ADDRESS]:PORT` for IPv6 (the brackets are dropped); PORT is
decimal, at most 65535. What differs between commands is policy, not grammar, and the
caller states it: whether an empty HOST means every interface (`egress-proxy run
--listen :8080`) and whether port 0 (the kernel picks one, for tests) is accepted.
"""

from __future__ import annotations


def parse_endpoint(
    text: str, *, empty_host: str | None = None, port_zero: bool = False
) -> tuple[str, int]:
    """`(host, port)` from `HOST:PORT`; ValueError naming the text when it is not one.

    `empty_host`: the host an empty HOST stands for (None: an empty HOST is an error).
    `port_zero`: whether port 0 is accepted.
    """
    host, sep, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]") if host.startswith("[") else host
    low = 0 if port_zero else 1
    if not sep or not port.isascii() or not port.isdigit() or not low <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    if not host:
        if empty_host is None:
            raise ValueError(f"expected HOST:PORT, got {text!r}")
        host = empty_host
    return host, int(port)


def format_endpoint(host: str, port: int) -> str:
    """The inverse of `parse_endpoint`: `[v6]:port` for an IPv6 address, else `host:port`."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
