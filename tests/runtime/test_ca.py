"""The interception CA (runtime/ca.py): ECDSA by default, RSA on request, never replaced."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from mitmproxy.certs import CertStore

from sandbox_egress.runtime import cli
from sandbox_egress.runtime.ca import CA_CERT, CA_KEY_AND_CERT, KeyType, ensure_ca

SECRET_FILES = ("mitmproxy-ca.pem", "mitmproxy-ca.p12")
PUBLIC_FILES = ("mitmproxy-ca-cert.pem", "mitmproxy-ca-cert.cer", "mitmproxy-ca-cert.p12")


def public_key(certs: Path) -> object:
    return x509.load_pem_x509_certificate((certs / CA_CERT).read_bytes()).public_key()


def test_a_new_ca_is_ecdsa_p256_with_mitmproxys_files(tmp_path: Path) -> None:
    ca = ensure_ca(tmp_path / "certs")
    assert (ca.key_type, ca.created, ca.cert) == (KeyType.ECDSA, True, tmp_path / "certs" / CA_CERT)
    key = public_key(tmp_path / "certs")
    assert isinstance(key, ec.EllipticCurvePublicKey)
    assert key.curve.name == "secp256r1"
    for name in SECRET_FILES:
        assert stat.S_IMODE((tmp_path / "certs" / name).stat().st_mode) == 0o600, name
    for name in PUBLIC_FILES + ("mitmproxy-dhparam.pem",):
        assert (tmp_path / "certs" / name).is_file(), name
    assert stat.S_IMODE((tmp_path / "certs").stat().st_mode) == 0o700


@pytest.mark.parametrize(("key_type", "kind"), [(KeyType.ECDSA, ec.EllipticCurvePublicKey),
                                                (KeyType.RSA, rsa.RSAPublicKey)])  # fmt: skip
def test_mitmproxy_loads_the_ca_and_issues_leaves_with_its_key(
    tmp_path: Path, key_type: KeyType, kind: type
) -> None:
    ensure_ca(tmp_path, key_type)
    store = CertStore.from_store(tmp_path, "mitmproxy", 2048)
    entry = store.get_cert("api.example.test", [x509.DNSName("api.example.test")])
    leaf = entry.cert.to_cryptography()
    ca = x509.load_pem_x509_certificate((tmp_path / CA_CERT).read_bytes())
    assert isinstance(leaf.public_key(), kind)
    assert leaf.issuer == ca.subject
    assert leaf.public_key() == ca.public_key()  # mitmproxy's leaves reuse the CA's key


def test_rsa_on_request(tmp_path: Path) -> None:
    ca = ensure_ca(tmp_path, KeyType.RSA)
    assert (ca.key_type, ca.created) == (KeyType.RSA, True)
    key = public_key(tmp_path)
    assert isinstance(key, rsa.RSAPublicKey)
    assert key.key_size == 2048


def test_an_existing_ca_is_never_replaced(tmp_path: Path) -> None:
    ensure_ca(tmp_path, KeyType.RSA)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    again = ensure_ca(tmp_path, KeyType.ECDSA)
    assert (again.key_type, again.created) == (KeyType.RSA, False)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_cli_says_when_it_kept_a_ca_of_another_kind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    certs = tmp_path / "certs"
    assert cli.main(["ca", "--certs", str(certs), "--key-type", "rsa"]) == 0
    first = capsys.readouterr()
    assert (first.out.strip(), first.err) == (str((certs / CA_CERT).resolve()), "")
    key_and_cert = (certs / CA_KEY_AND_CERT).read_bytes()
    assert cli.main(["ca", "--certs", str(certs)]) == 0
    second = capsys.readouterr()
    assert second.out.strip() == str((certs / CA_CERT).resolve())
    assert second.err == (
        f"egress-proxy: kept the existing rsa CA in {certs}; remove that directory to create "
        "a ecdsa one (every sandbox must then trust the new certificate)\n"
    )
    assert (certs / CA_KEY_AND_CERT).read_bytes() == key_and_cert
