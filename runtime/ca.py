"""The interception CA: created once in the certificate directory, never replaced.

mitmproxy signs every certificate it shows the sandbox, and every client handshake, with
the CA's key (its leaf certificates reuse that key). An ECDSA P-256 key makes that
signature about ten times cheaper than RSA-2048, so new CA directories get ECDSA by
default; RSA-2048 stays available (`--key-type rsa`) for sandboxes whose TLS stacks
cannot verify ECDSA. The files are those mitmproxy's own `CertStore.create_store` writes
(same names and formats), so mitmproxy loads either kind and the sandbox recipes never
change: only `mitmproxy-ca-cert.pem` goes into sandboxes.

Invariants:
* An existing CA is never replaced or rewritten, whatever key type is asked for:
  replacing it would break every sandbox that trusts it. `ensure_ca` reports the kind it
  found, so the CLI can say that a different request was not applied.
* The private key files are written with mode 0600 (mitmproxy's own umask discipline),
  the directory is 0700.
* A directory that holds the CA is only read: a read-only mount (a Kubernetes Secret) works.
  A CA that cannot be created or read raises `CAError`, one line naming the directory.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_BASENAME = "mitmproxy"  # the file names mitmproxy's tlsconfig looks for in confdir
CA_CERT = f"{CA_BASENAME}-ca-cert.pem"
CA_KEY_AND_CERT = f"{CA_BASENAME}-ca.pem"
ORGANIZATION = "sandbox-egress"
COMMON_NAME = "sandbox egress proxy CA"
RSA_BITS = 2048
VALIDITY = datetime.timedelta(days=3650)
BACKDATE = datetime.timedelta(days=2)  # clocks of sandboxes that lag behind


class KeyType(StrEnum):
    ECDSA = "ecdsa"  # P-256
    RSA = "rsa"  # 2048 bits


@dataclass(frozen=True)
class CA:
    cert: Path  # the public certificate sandboxes trust
    key_type: KeyType
    created: bool  # False: an existing CA was kept as it is


class CAError(Exception):
    """The CA directory cannot be read or the CA cannot be created there; says which and why."""


def ensure_ca(certs: Path, key_type: KeyType = KeyType.ECDSA) -> CA:
    """The CA in `certs`, created with `key_type` when there is none. Raises CAError."""
    existing = certs / CA_KEY_AND_CERT
    try:
        if existing.exists():  # only read: the directory may be a read-only mount
            return CA(certs / CA_CERT, _key_type_of(existing), created=False)
    except (OSError, ValueError) as exc:
        raise CAError(f"cannot read the CA in {certs}: {_reason(exc)}") from exc
    key = new_key(key_type)
    cert = _self_signed(key)
    try:
        certs.mkdir(parents=True, exist_ok=True)
        certs.chmod(0o700)
        _write_store(certs, key, cert)
    except OSError as exc:
        raise CAError(
            f"cannot create the CA in {certs}: {_reason(exc)} (give --certs a writable "
            "directory, or one that already holds the CA: `egress-proxy ca --certs DIR`)"
        ) from exc
    return CA(certs / CA_CERT, key_type, created=True)


def _reason(exc: Exception) -> str:
    return exc.strerror or str(exc) if isinstance(exc, OSError) else str(exc)


def new_key(key_type: KeyType) -> ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey:
    if key_type is KeyType.RSA:
        return rsa.generate_private_key(public_exponent=65537, key_size=RSA_BITS)
    return ec.generate_private_key(ec.SECP256R1())


def _key_type_of(path: Path) -> KeyType:
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    return KeyType.RSA if isinstance(cert.public_key(), rsa.RSAPublicKey) else KeyType.ECDSA


def _self_signed(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> x509.Certificate:
    """A CA certificate with the extensions of mitmproxy's `create_ca`."""
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, COMMON_NAME),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
        ]
    )
    usage = x509.KeyUsage(
        digital_signature=False, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
        encipher_only=False, decipher_only=False,
    )  # fmt: skip
    builder = (
        x509.CertificateBuilder()
        .serial_number(x509.random_serial_number())
        .subject_name(name)
        .issuer_name(name)
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + VALIDITY)
        .public_key(key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(usage, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    return builder.sign(private_key=key, algorithm=hashes.SHA256())


def _write_store(
    certs: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey, cert: x509.Certificate
) -> None:
    from mitmproxy.certs import DEFAULT_DHPARAM

    pem_key = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    pem_cert = cert.public_bytes(serialization.Encoding.PEM)
    name = CA_BASENAME.encode()
    none = serialization.NoEncryption()
    _write_secret(certs / CA_KEY_AND_CERT, pem_key + pem_cert)
    _write_secret(
        certs / f"{CA_BASENAME}-ca.p12",
        pkcs12.serialize_key_and_certificates(name, key, cert, None, none),
    )
    (certs / CA_CERT).write_bytes(pem_cert)
    (certs / f"{CA_BASENAME}-ca-cert.cer").write_bytes(pem_cert)  # the name Android wants
    (certs / f"{CA_BASENAME}-ca-cert.p12").write_bytes(
        pkcs12.serialize_key_and_certificates(name, None, cert, None, none)
    )
    (certs / f"{CA_BASENAME}-dhparam.pem").write_bytes(DEFAULT_DHPARAM)


def _write_secret(path: Path, data: bytes) -> None:
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_bytes(data)
