"""A name server that never answers: it reads every query, logs its name, and stays silent.

    python -m testbed.silent_dns --listen 127.0.0.1:53 --log queries.log

Stands in for an attacker's zone whose server never answers (issue 21): every lookup that
reaches it lasts the resolver's whole timeout. Prints "ready" once bound.
"""

from __future__ import annotations

import argparse
import socket

from testbed.dns_server import parse_question


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--listen", required=True)
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    host, port = args.listen.rsplit(":", 1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((host, int(port)))
    print("ready", flush=True)
    with open(args.log, "a", buffering=1) as log:
        while True:
            packet = sock.recv(4096)
            try:
                log.write(parse_question(packet)[1] + "\n")
            except (IndexError, UnicodeDecodeError):
                log.write("?\n")


if __name__ == "__main__":
    main()
