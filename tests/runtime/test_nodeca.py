"""A node's intermediate CA (runtime/fleet/nodeca.py): mitmproxy signs leaves with it that a client
trusting only the root accepts, the node's directory holds no root key, and the limits
(pathLen 0, validity, name constraints) hold. tests/e2e/test_nodeca_e2e.py runs the real
proxy with it and real clients."""

from __future__ import annotations

import datetime
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError
from mitmproxy.certs import CertStore

from sandbox_egress.runtime import cli
from sandbox_egress.runtime.ca import CA_CERT, CA_KEY_AND_CERT, CAError, KeyType, ensure_ca
from sandbox_egress.runtime.fleet.nodeca import issue_intermediate, read_intermediate


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("root")
    ensure_ca(directory)
    return directory


def leaf_of(certs: Path, host: str) -> tuple[x509.Certificate, list[x509.Certificate]]:
    """What mitmproxy, loading `certs`, presents for `host`: the leaf and the chain it sends."""
    store = CertStore.from_store(certs, "mitmproxy", 2048)
    entry = store.get_cert(host, [x509.DNSName(host)])
    return entry.cert.to_cryptography(), [c.to_cryptography() for c in entry.chain_certs]


def verify(root: Path, host: str, leaf: x509.Certificate, chain: list[x509.Certificate]) -> None:
    trusted = Store([x509.load_pem_x509_certificate((root / CA_CERT).read_bytes())])
    verifier = PolicyBuilder().store(trusted).build_server_verifier(x509.DNSName(host))
    verifier.verify(leaf, chain)


def test_a_client_trusting_only_the_root_accepts_the_nodes_leaves(
    root: Path, tmp_path: Path
) -> None:
    issued = issue_intermediate(root, "node-a", tmp_path / "node-a")
    leaf, chain = leaf_of(tmp_path / "node-a", "api.example.test")
    intermediate = read_intermediate(tmp_path / "node-a")
    assert leaf.issuer == intermediate.subject
    assert chain[0] == intermediate  # sent with the leaf
    verify(root, "api.example.test", leaf, chain)
    assert issued.fingerprint == intermediate.fingerprint(hashes.SHA256()).hex()
    # what sandboxes trust is the root, in the node's directory as in the root's
    assert (tmp_path / "node-a" / CA_CERT).read_bytes() == (root / CA_CERT).read_bytes()
    without = [c for c in chain if c != intermediate]
    with pytest.raises(VerificationError):
        verify(root, "api.example.test", leaf, without)  # the intermediate is what chains


def test_the_nodes_directory_holds_no_key_but_the_intermediates(root: Path, tmp_path: Path) -> None:
    issue_intermediate(root, "node-a", tmp_path / "node-a")
    root_key = serialization.load_pem_private_key((root / CA_KEY_AND_CERT).read_bytes(), None)
    root_pem = root_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    files = sorted(p.name for p in (tmp_path / "node-a").iterdir())
    assert files == [CA_CERT, CA_KEY_AND_CERT, "mitmproxy-dhparam.pem"]
    keys = []
    for path in (tmp_path / "node-a").iterdir():
        data = path.read_bytes()
        assert root_pem not in data
        keys += [b for b in data.split(b"-----BEGIN ")[1:] if b.startswith(b"EC PRIVATE")]
    assert len(keys) == 1
    node_key = serialization.load_pem_private_key(
        (tmp_path / "node-a" / CA_KEY_AND_CERT).read_bytes(), None
    )
    assert node_key.public_key() == read_intermediate(tmp_path / "node-a").public_key()
    assert node_key.public_key() != root_key.public_key()
    assert stat.S_IMODE((tmp_path / "node-a" / CA_KEY_AND_CERT).stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "node-a").stat().st_mode) == 0o700


def test_the_intermediate_signs_leaves_only_and_expires(root: Path, tmp_path: Path) -> None:
    issued = issue_intermediate(root, "node-b", tmp_path / "b", days=7)
    cert = read_intermediate(tmp_path / "b")
    constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca and constraints.value.path_length == 0
    lifetime = cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC)
    assert datetime.timedelta(days=6, hours=23) < lifetime <= datetime.timedelta(days=7)
    assert issued.not_after == cert.not_valid_after_utc
    assert "node-b" in cert.subject.rfc4514_string()


def test_name_constraints_refuse_a_leaf_for_another_name(root: Path, tmp_path: Path) -> None:
    issue_intermediate(root, "node-c", tmp_path / "c", permit=["example.test"])
    leaf, chain = leaf_of(tmp_path / "c", "api.example.test")
    verify(root, "api.example.test", leaf, chain)
    leaf, chain = leaf_of(tmp_path / "c", "bank.other.test")
    with pytest.raises(VerificationError, match="(?i)name constraint|excluded|permitted"):
        verify(root, "bank.other.test", leaf, chain)


def test_rsa_root_gives_an_rsa_intermediate(tmp_path: Path) -> None:
    ensure_ca(tmp_path / "root", KeyType.RSA)
    issue_intermediate(tmp_path / "root", "node-r", tmp_path / "r")
    leaf, chain = leaf_of(tmp_path / "r", "api.example.test")
    verify(tmp_path / "root", "api.example.test", leaf, chain)


def test_rotation_replaces_the_intermediate_and_the_root_is_never_overwritten(
    root: Path, tmp_path: Path
) -> None:
    first = issue_intermediate(root, "node-a", tmp_path / "a")
    second = issue_intermediate(root, "node-a", tmp_path / "a")
    assert first.fingerprint != second.fingerprint
    before = (root / CA_KEY_AND_CERT).read_bytes()
    with pytest.raises(CAError, match="holds a root CA"):
        issue_intermediate(root, "node-a", root)
    assert (root / CA_KEY_AND_CERT).read_bytes() == before
    with pytest.raises(CAError, match="holds an intermediate, not the fleet's root"):
        issue_intermediate(tmp_path / "a", "node-x", tmp_path / "x")  # no chains of chains
    with pytest.raises(CAError, match="holds a root CA, not a node intermediate"):
        read_intermediate(root)


@pytest.mark.parametrize(
    ("node", "days", "permit", "message"),
    [
        ("Node_A", 30, [], "not a node name"),
        ("node-a", 0, [], "--days must be 1 to 365"),
        ("node-a", 366, [], "--days must be 1 to 365"),
        ("node-a", 30, ["https://example.test/"], "not a DNS name"),
        ("node-a", 30, ["*.example.test"], "not a DNS name"),
    ],
)
def test_bad_requests_are_refused_before_anything_is_written(
    root: Path, tmp_path: Path, node: str, days: int, permit: list[str], message: str
) -> None:
    with pytest.raises(CAError, match=message):
        issue_intermediate(root, node, tmp_path / "n", days, permit)
    assert not (tmp_path / "n").exists()


def test_a_missing_root_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(CAError, match=r"cannot read the root CA in .*: No such file"):
        issue_intermediate(tmp_path / "none", "node-a", tmp_path / "n")


def test_cli_issues_and_prints_the_certificate_sandboxes_trust(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["ca", "--intermediate-of", str(root), "--name", "node-a", "--days", "3"]
    assert cli.main([*argv, "--certs", str(tmp_path / "a"), "--permit", "example.test"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == str((tmp_path / "a" / CA_CERT).resolve())
    assert "node CA for node-a" in err and "sha256 " in err
    assert "PRIVATE" not in out + err
    assert cli.main(["ca", "--intermediate-of", str(root), "--certs", str(tmp_path / "b")]) == 2
    assert "needs --name NODE" in capsys.readouterr().err
    assert cli.main([*argv[:-1], "0", "--certs", str(tmp_path / "b")]) == 2
    assert "--days must be 1 to 365, not 0" in capsys.readouterr().err
    for extra in (["--name", "node-a"], ["--days", "5"], ["--permit", "example.test"]):
        with pytest.raises(SystemExit):
            cli.main(["ca", *extra, "--certs", str(tmp_path / "c")])
    assert "go with --intermediate-of" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()
