"""A scripted DNS server for rebinding and multi-answer tests (UDP, A and AAAA only).

    python -m testbed.dns_server --listen 127.0.0.1:53 --zone zone.json --log queries.jsonl

`zone.json` maps a name to a list of answer sets; the n-th query of a name and type
gets the n-th set (the last one repeats), with TTL 0 so no cache keeps it:

    {"rebind.test": [["198.18.1.2"], ["127.0.0.1"]], "multi.test": [["127.0.0.1", "198.18.1.2"]]}

Unknown names get NXDOMAIN. Every query is logged as one JSON line, before its answer is sent.
`--hold NAME=PATH` (repeatable) holds every answer for NAME until PATH exists (at most
HOLD_LIMIT_S), so that a test can act while a lookup is in flight.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import socket
import struct
import time
from pathlib import Path

A, AAAA = 1, 28
HOLD_LIMIT_S = 10.0


def parse_question(packet: bytes) -> tuple[int, str, int, int]:
    """(id, name, qtype, end offset of the question)."""
    ident = struct.unpack("!H", packet[:2])[0]
    labels, offset = [], 12
    while packet[offset]:
        length = packet[offset]
        labels.append(packet[offset + 1 : offset + 1 + length].decode("ascii").lower())
        offset += 1 + length
    qtype = struct.unpack("!H", packet[offset + 1 : offset + 3])[0]
    return ident, ".".join(labels), qtype, offset + 5


def build_answer(packet: bytes, ident: int, end: int, rcode: int, addresses: list[str]) -> bytes:
    header = struct.pack("!HHHHHH", ident, 0x8180 | rcode, 1, len(addresses), 0, 0)
    answers = b""
    for text in addresses:
        ip = ipaddress.ip_address(text)
        rtype = A if ip.version == 4 else AAAA
        answers += struct.pack("!HHHIH", 0xC00C, rtype, 1, 0, len(ip.packed)) + ip.packed
    return header + packet[12:end] + answers


def wait_for(release: Path) -> None:
    deadline = time.monotonic() + HOLD_LIMIT_S
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.01)


def serve(
    listen: tuple[str, int],
    zone: dict[str, list[list[str]]],
    log: Path,
    holds: dict[str, Path] | None = None,
) -> None:
    counts: dict[tuple[str, int], int] = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock, log.open("a") as out:
        sock.bind(listen)
        print("ready", flush=True)
        while True:
            packet, peer = sock.recvfrom(2048)
            try:
                ident, name, qtype, end = parse_question(packet)
            except (IndexError, UnicodeDecodeError, struct.error):
                continue
            sets = zone.get(name)
            if sets is None:
                reply, answered = build_answer(packet, ident, end, 3, []), None
            else:
                n = counts.get((name, qtype), 0)
                counts[(name, qtype)] = n + 1
                chosen = sets[min(n, len(sets) - 1)]
                version = 4 if qtype == A else 6
                answered = [a for a in chosen if ipaddress.ip_address(a).version == version]
                reply = build_answer(packet, ident, end, 0, answered if qtype in (A, AAAA) else [])
            # Logged before the reply leaves: whoever has the answer finds the record.
            out.write(json.dumps({"name": name, "type": qtype, "answer": answered}) + "\n")
            out.flush()
            if holds and name in holds:
                wait_for(holds[name])
            sock.sendto(reply, peer)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--listen", default="127.0.0.1:53")
    parser.add_argument("--zone", type=Path, required=True)
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--hold", action="append", default=[], metavar="NAME=PATH")
    args = parser.parse_args()
    host, _, port = args.listen.rpartition(":")
    holds = {name: Path(path) for name, _, path in (h.partition("=") for h in args.hold)}
    serve((host, int(port)), json.loads(args.zone.read_text()), args.log, holds)


if __name__ == "__main__":
    main()
