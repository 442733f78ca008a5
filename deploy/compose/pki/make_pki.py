"""One-shot internal PKI for the compose example's telemetry upstream.

Creates a throw-away CA, signs one server certificate for ``--name`` with it,
writes the CA's public certificate to ``--ca-out`` (the proxy's ``--upstream-ca``)
and the server's certificate and key to ``--tls-dir`` (the telemetry server
only). The CA's private key is never written: nothing can sign another
certificate later, and nothing secret outlives this process but the server key.

Idempotent: when both outputs exist, it does nothing, so ``docker compose up``
can run it every time.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=365)


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "sandbox-egress example"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def make(name: str, ca_out: Path, tls_dir: Path) -> bool:
    server_cert = tls_dir / "server.pem"
    server_key = tls_dir / "server-key.pem"
    if ca_out.exists() and server_cert.exists() and server_key.exists():
        return False
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("sandbox-egress example internal CA")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
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
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    tls_dir.mkdir(parents=True, exist_ok=True)
    key_bytes = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(server_key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(key_bytes)
    server_cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    ca_out.parent.mkdir(parents=True, exist_ok=True)
    ca_out.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    return True


def parser() -> argparse.ArgumentParser:
    result = argparse.ArgumentParser(description="One-shot internal PKI for the telemetry example.")
    result.add_argument("--name", required=True, help="the server's DNS name")
    result.add_argument("--ca-out", required=True, type=Path, help="public CA certificate (PEM)")
    result.add_argument("--tls-dir", required=True, type=Path, help="server.pem, server-key.pem")
    return result


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    created = make(args.name, args.ca_out, args.tls_dir)
    state = "created" if created else "already present"
    print(f"pki: {state}: CA {args.ca_out}, certificate for {args.name} in {args.tls_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
