"""Certificates of a benchmark run: the upstream's test CA, and the proxies' shared CA.

* The upstream (nginx, the sink) presents a P-256 certificate signed by a throwaway
  test CA (made by `testbed.testca.write_pki`); every proxy verifies it against
  the same bundle (public roots + that CA), which is what `egress-proxy --upstream-ca`
  builds.
* The three intercepting proxies sign their generated certificates with one CA
  (`egress-proxy ca`, RSA 2048), so they do the same signing work per handshake.

Nothing is written outside the directory the caller passes.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import certifi
from cryptography.hazmat.primitives import serialization

from testbed.testca import write_pki


@dataclass(frozen=True)
class UpstreamPki:
    ca_cert: Path
    server_cert: Path
    server_key: Path
    bundle: Path  # public roots + the test CA: what every proxy verifies upstreams against


@dataclass(frozen=True)
class ProxyCa:
    confdir: Path  # mitmproxy's layout: mitmproxy-ca.pem (key + cert), mitmproxy-ca-cert.pem
    cert: Path
    key: Path  # the private key alone (squid wants it separately)


def make_upstream_pki(directory: Path, dns_names: list[str]) -> UpstreamPki:
    test = write_pki(
        directory,
        ca_common_name="egress bench upstream CA",
        dns_names=dns_names,
        files=("upstream-ca.pem", "upstream.pem", "upstream-key.pem"),
    )
    pki = UpstreamPki(
        ca_cert=test.ca_cert,
        server_cert=test.server_cert,
        server_key=test.server_key,
        bundle=directory / "upstream-trust.pem",
    )
    roots = Path(certifi.where()).read_bytes().rstrip(b"\n")
    pki.bundle.write_bytes(roots + b"\n" + pki.ca_cert.read_bytes())
    return pki


def make_proxy_ca(egress_proxy: Path, confdir: Path) -> ProxyCa:
    """Create the interception CA with `egress-proxy ca`, and split out its key."""
    subprocess.run(
        [str(egress_proxy), "ca", "--certs", str(confdir)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    combined = (confdir / "mitmproxy-ca.pem").read_bytes()
    key = serialization.load_pem_private_key(combined, password=None)
    key_path = confdir / "ca-key.pem"
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)
    return ProxyCa(confdir=confdir, cert=confdir / "mitmproxy-ca-cert.pem", key=key_path)


def copy_confdir(ca: ProxyCa, target: Path) -> Path:
    """A second mitmproxy confdir holding the same CA (each proxy writes its own files)."""
    target.mkdir(mode=0o700)
    for name in ("mitmproxy-ca.pem", "mitmproxy-ca-cert.pem"):
        shutil.copy2(ca.confdir / name, target / name)
    return target
