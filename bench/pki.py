"""Certificates of a benchmark run: the upstream's test CA, and the proxies' shared CA.

* The upstream (nginx, the sink) presents a P-256 certificate signed by a throwaway
  test CA; every proxy verifies it against the same bundle (public roots + that CA),
  which is what `egress-proxy --upstream-ca` builds.
* The three intercepting proxies sign their generated certificates with one CA
  (`egress-proxy ca`, RSA 2048), so they do the same signing work per handshake.

Nothing is written outside the directory the caller passes.
"""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import certifi
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


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


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_upstream_pki(directory: Path, dns_names: list[str]) -> UpstreamPki:
    now = dt.datetime.now(dt.UTC)
    valid = (now - dt.timedelta(hours=1), now + dt.timedelta(days=2))
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("egress bench upstream CA")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid[0])
        .not_valid_after(valid[1])
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(_name(dns_names[0]))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid[0])
        .not_valid_after(valid[1])
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]), critical=False
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    pki = UpstreamPki(
        ca_cert=directory / "upstream-ca.pem",
        server_cert=directory / "upstream.pem",
        server_key=directory / "upstream-key.pem",
        bundle=directory / "upstream-trust.pem",
    )
    ca_pem = ca_cert.public_bytes(serialization.Encoding.PEM)
    pki.ca_cert.write_bytes(ca_pem)
    pki.server_cert.write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    pki.server_key.write_bytes(
        server_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    pki.server_key.chmod(0o600)
    roots = Path(certifi.where()).read_bytes().rstrip(b"\n")
    pki.bundle.write_bytes(roots + b"\n" + ca_pem)
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
