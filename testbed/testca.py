"""A throwaway PKI for tests and benchmarks: one test CA and one server certificate it signs.

The upstream echo servers present the server certificate; the proxy verifies it
against the CA given with `--upstream-ca`. `write_pki` is the one generator: the
hookrunner tests (`tests/hookrunner/tls_support.py`) and the benchmark's upstream
(`bench/pki.py`) use it too. Nothing here is ever written outside the directory the
caller passes (a pytest temporary directory, a benchmark run's directory).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True, slots=True)
class Pki:
    ca_cert: Path
    server_cert: Path
    server_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def self_signed(
    common_name: str = "localhost",
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A P-256 certificate for `common_name` signed by its own key, valid from a day ago for
    two days, and that key: for in-memory TLS handshakes that verify nothing."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return cert, key


def make_test_pki(directory: Path, dns_names: list[str], ip_addresses: list[str]) -> Pki:
    """Write `ca.pem`, `server.pem` and `server-key.pem` into `directory`."""
    return write_pki(
        directory,
        ca_common_name="egress e2e test CA",
        dns_names=dns_names,
        ip_addresses=ip_addresses,
    )


def write_pki(
    directory: Path,
    *,
    ca_common_name: str,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str] = (),
    common_name: str | None = None,
    files: tuple[str, str, str] = ("ca.pem", "server.pem", "server-key.pem"),
) -> Pki:
    """A fresh P-256 CA and a server certificate it signs for these names and addresses.

    `files` names the CA certificate, the server certificate and its key (written 0600);
    the server's common name is `common_name`, else the first DNS name.
    """
    now = dt.datetime.now(dt.UTC)
    not_before, not_after = now - dt.timedelta(hours=1), now + dt.timedelta(days=2)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(ca_common_name)
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
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
    san: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    san += [x509.IPAddress(ipaddress.ip_address(a)) for a in ip_addresses]
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name or dns_names[0]))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(san), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )

    ca_file, cert_file, key_file = (directory / name for name in files)
    pki = Pki(ca_cert=ca_file, server_cert=cert_file, server_key=key_file)
    pki.ca_cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    pki.server_cert.write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    pki.server_key.write_bytes(_pem_key(server_key))
    pki.server_key.chmod(0o600)
    return pki
