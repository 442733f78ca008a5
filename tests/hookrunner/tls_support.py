"""A throw-away certificate authority and a server certificate for 127.0.0.1."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

from testbed.testca import write_pki


@dataclass(frozen=True)
class Pki:
    ca_file: Path
    cert_file: Path
    key_file: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert_file, self.key_file)
        return context


def make_pki(directory: Path, label: str) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    pki = write_pki(
        directory,
        ca_common_name=f"hookrunner test CA {label}",
        dns_names=["localhost"],
        ip_addresses=["127.0.0.1"],
        common_name="127.0.0.1",
        files=("ca.pem", "server.pem", "server.key"),
    )
    return Pki(pki.ca_cert, pki.server_cert, pki.server_key)
