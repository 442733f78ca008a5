"""A node's intermediate CA, signed by the fleet's root: what a node proxy holds instead of
the root key (issue 35, D256).

`egress-proxy ca --intermediate-of ROOT --name NODE --certs DIR` runs where the root key is
(the operator's machine) and writes into DIR what `egress-proxy run --certs DIR` loads:
`mitmproxy-ca.pem` holds the intermediate's key, the intermediate's certificate and the
root's certificate, in that order. mitmproxy's `CertStore.from_files` takes the first
certificate as the one that signs its leaves and, since the file holds more than one, uses
it as the chain file, so every handshake sends leaf + intermediate (+ root): a sandbox that
trusts only the root (`mitmproxy-ca-cert.pem`, here the root's certificate, as in the root's
own directory) accepts the leaves.

Invariants:
* The root's private key is only read, never written anywhere: DIR holds no key but the
  intermediate's (tests/runtime/test_nodeca.py reads every file).
* The intermediate can sign leaves only (pathLen 0), lives `days` days (1 to 365, and never
  past the root), and, given `permit`, is name-constrained to those DNS names (a leaf for
  another name fails the client's verification, whatever a compromised node mints).
* An intermediate is replaced on request (sandboxes trust the root, not it): that is its
  rotation. A directory holding a root CA (ROOT itself) is never written. Files are
  written whole (temporary file, rename), key files with mode 0600.
* A root that is itself an intermediate (pathLen 0, or a chain in its file) is refused.
"""

from __future__ import annotations

import datetime
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from sandbox_egress.runtime.ca import (
    BACKDATE,
    CA_CERT,
    CA_KEY_AND_CERT,
    ORGANIZATION,
    CAError,
    KeyType,
    new_key,
)

DEFAULT_DAYS = 30
MAX_DAYS = 365
# A Kubernetes node name is a DNS subdomain (RFC 1123): lower case, digits, '-' and '.'.
_NODE = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")
_LABEL = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
_PERMIT = re.compile(rf"^({_LABEL}\.)*{_LABEL}$")

Key = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


@dataclass(frozen=True)
class NodeCA:
    directory: Path
    node: str
    not_after: datetime.datetime
    fingerprint: str  # SHA-256 of the intermediate's certificate, hex


def issue_intermediate(
    root: Path,
    node: str,
    certs: Path,
    days: int = DEFAULT_DAYS,
    permit: Sequence[str] = (),
) -> NodeCA:
    """Issue (or replace) `node`'s intermediate in `certs`, signed by the CA in `root`.
    Raises CAError naming what is wrong (never a key's bytes)."""
    if not _NODE.match(node):
        raise CAError(f"--name {node!r} is not a node name (lower-case DNS subdomain)")
    if not 1 <= days <= MAX_DAYS:
        raise CAError(f"--days must be 1 to {MAX_DAYS}, not {days}")
    for domain in permit:
        if not _PERMIT.match(domain):
            raise CAError(f"--permit {domain!r} is not a DNS name (e.g. example.com)")
    root_key, root_cert = _read_root(root)
    if _holds_a_root(certs):  # ROOT itself, or another root: never overwritten
        raise CAError(f"{certs} holds a root CA: give the node CA a directory of its own")
    key = new_key(KeyType.RSA if isinstance(root_key, rsa.RSAPrivateKey) else KeyType.ECDSA)
    cert = _intermediate(node, key, root_key, root_cert, days, permit)
    pem_key = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    pem_root = root_cert.public_bytes(serialization.Encoding.PEM)
    try:
        certs.mkdir(parents=True, exist_ok=True)
        certs.chmod(0o700)
        _write_whole(
            certs / CA_KEY_AND_CERT,
            pem_key + cert.public_bytes(serialization.Encoding.PEM) + pem_root,
            0o600,
        )
        _write_whole(certs / CA_CERT, pem_root, 0o644)
        from mitmproxy.certs import DEFAULT_DHPARAM

        _write_whole(certs / "mitmproxy-dhparam.pem", DEFAULT_DHPARAM, 0o644)
    except OSError as exc:
        raise CAError(f"cannot write the node CA in {certs}: {exc.strerror}") from exc
    return NodeCA(certs, node, cert.not_valid_after_utc, cert.fingerprint(hashes.SHA256()).hex())


def read_intermediate(certs: Path) -> x509.Certificate:
    """The intermediate in `certs`, checked to be one (pathLen 0, not self-signed, key
    matching, not expired); CAError otherwise. Used before a directory goes into a Secret."""
    key, chain = _read_key_and_chain(certs, "node CA", "not a key and certificates")
    cert = chain[0]
    constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    if cert.issuer == cert.subject or constraints.path_length != 0 or len(chain) < 2:
        raise CAError(
            f"{certs} holds a root CA, not a node intermediate "
            "(`egress-proxy ca --intermediate-of ROOT --name NODE --certs DIR`)"
        )
    if key.public_key() != cert.public_key():
        raise CAError(f"the key in {certs} is not the intermediate's")
    if cert.not_valid_after_utc <= datetime.datetime.now(datetime.UTC):
        raise CAError(f"the node CA in {certs} expired on {cert.not_valid_after_utc:%Y-%m-%d}")
    return cert


def _read_key_and_chain(
    directory: Path, what: str, malformed: str
) -> tuple[PrivateKeyTypes, list[x509.Certificate]]:
    """The private key and the certificates of `directory`'s mitmproxy-ca.pem; CAError
    naming `what` when it cannot be read."""
    try:
        raw = (directory / CA_KEY_AND_CERT).read_bytes()
        return serialization.load_pem_private_key(raw, None), x509.load_pem_x509_certificates(raw)
    except (OSError, ValueError, TypeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else malformed
        raise CAError(f"cannot read the {what} in {directory}: {reason}") from exc


def _read_root(root: Path) -> tuple[Key, x509.Certificate]:
    key, chain = _read_key_and_chain(root, "root CA", "not a key and a certificate")
    cert = chain[0]
    constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    if len(chain) > 1 or constraints.path_length == 0 or cert.issuer != cert.subject:
        raise CAError(f"{root} holds an intermediate, not the fleet's root CA")
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise CAError(f"the root CA in {root} has a key of an unsupported type")
    if key.public_key() != cert.public_key():
        raise CAError(f"the key in {root} is not its certificate's")
    return key, cert


def _holds_a_root(certs: Path) -> bool:
    try:
        raw = (certs / CA_KEY_AND_CERT).read_bytes()
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise CAError(f"cannot read {certs / CA_KEY_AND_CERT}: {exc.strerror}") from exc
    try:
        cert = x509.load_pem_x509_certificate(raw)
    except ValueError:
        return True  # not ours to overwrite either
    return cert.issuer == cert.subject


def _intermediate(
    node: str,
    key: Key,
    root_key: Key,
    root_cert: x509.Certificate,
    days: int,
    permit: Sequence[str],
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    not_after = min(now + datetime.timedelta(days=days), root_cert.not_valid_after_utc)
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, f"sandbox egress node CA {node}"[:64]),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
        ]
    )
    usage = x509.KeyUsage(
        digital_signature=True, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
        encipher_only=False, decipher_only=False,
    )  # fmt: skip
    root_ski = root_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    builder = (
        x509.CertificateBuilder()
        .serial_number(x509.random_serial_number())
        .subject_name(name)
        .issuer_name(root_cert.subject)
        .not_valid_before(max(now - BACKDATE, root_cert.not_valid_before_utc))
        .not_valid_after(not_after)
        .public_key(key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(usage, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(root_ski),
            critical=False,
        )
    )
    if permit:
        subtrees = [x509.DNSName(d) for d in permit]
        builder = builder.add_extension(x509.NameConstraints(subtrees, None), critical=True)
    return builder.sign(private_key=root_key, algorithm=hashes.SHA256())


def _write_whole(path: Path, data: bytes, mode: int) -> None:
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(descriptor, mode)
        with os.fdopen(descriptor, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
