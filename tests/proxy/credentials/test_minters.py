"""The minters against a real HTTPS token endpoint and GitHub-App-style API on loopback
(testbed/forge_server.py, with a test CA given as the upstream CA): what they send, what
they keep, and that a failure never shows a value."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_egress.proxy.credentials.base import CacheSettings, CredentialError
from sandbox_egress.proxy.credentials.github_app import GithubApp
from sandbox_egress.proxy.credentials.https import Https
from sandbox_egress.proxy.credentials.oauth2 import OAuth2
from sandbox_egress.proxy.values.secret import Secret
from tests.proxy.credentials.forge import Forge, forge

SETTINGS = CacheSettings(timeout=10)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Forge]:
    with forge(tmp_path_factory.mktemp("forge"), "--expires-in", "600") as running:
        yield running


def oauth2(server: Forge, **changes: object) -> OAuth2:
    fields: dict[str, object] = {
        "grant": "client_credentials",
        "token_url": f"{server.url}/token",
        "client_id": Secret("client-1"),
        "client_secret": Secret("client-secret-1"),
        "settings": SETTINGS,
        **changes,
    }
    spec = OAuth2(**fields)  # type: ignore[arg-type]
    return spec.source(Https(str(server.pki.ca_cert)))


def test_client_credentials_mints_a_token_with_its_expiry(server: Forge) -> None:
    before = server.stats()["mints"]
    fetched = oauth2(server, scopes=("api",)).fetch()
    assert fetched.value.reveal().startswith(f"at-{before + 1}-")
    assert fetched.expires_at is not None


def test_a_wrong_client_secret_fails_with_the_status_only(server: Forge) -> None:
    with pytest.raises(CredentialError) as caught:
        oauth2(server, client_secret=Secret("wrong-secret-xyz")).fetch()
    assert str(caught.value) == "127.0.0.1/token answered 401"


def test_the_upstream_ca_is_required_to_trust_the_endpoint(server: Forge) -> None:
    spec = oauth2(server).source(Https())  # public roots only: the test CA is unknown
    with pytest.raises(CredentialError, match="SSLCertVerificationError"):
        spec.fetch()


def test_a_rotated_refresh_token_is_kept_in_the_state_file(server: Forge, tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    spec = oauth2(
        server, grant="refresh_token", refresh_token=Secret("refresh-0"), state_file=str(state)
    )
    first = spec.fetch()
    saved = json.loads(state.read_text())
    assert saved["refresh_token"].startswith("refresh-")
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o600
    second = spec.fetch()  # uses the rotated token from the file, not refresh-0
    assert second.value.reveal() != first.value.reveal()
    assert json.loads(state.read_text())["refresh_token"] != saved["refresh_token"]
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # no temporary left


def test_github_app_mints_a_scoped_installation_token(server: Forge) -> None:
    spec = GithubApp(
        12345,
        678,
        Secret(server.app_key_pem),
        SETTINGS,
        api_url=server.url,
        repositories=("web",),
        permissions=(("contents", "write"),),
    ).source(Https(str(server.pki.ca_cert)))
    fetched = spec.fetch()
    assert fetched.value.reveal().startswith("ghs_")
    assert fetched.expires_at is not None
    assert server.stats()["app_bodies"][-1] == {
        "repositories": ["web"],
        "permissions": {"contents": "write"},
    }


def test_github_app_with_another_apps_key_is_refused(server: Forge, tmp_path: Path) -> None:
    from tests.proxy.credentials.forge import app_key

    other, _ = app_key(tmp_path)
    spec = GithubApp(12345, 678, Secret(other), SETTINGS, api_url=server.url)
    with pytest.raises(CredentialError, match="answered 401"):
        spec.source(Https(str(server.pki.ca_cert))).fetch()


def test_check_resolve_points_an_unverified_endpoint_at_upstream_ca(
    server: Forge, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 48: `check --resolve` against an endpoint of an internal CA says what to do."""
    from sandbox_egress.runtime import cli

    config = tmp_path / "env.yaml"
    config.write_text(
        "credentials:\n"
        f"  graph: {{oauth2: {{grant: client_credentials, token_url: '{server.url}/token',\n"
        "                   client_id: client-1, client_secret: client-secret-1}}\n"
        "network:\n  allowlist:\n    - domain: api.example.com\n"
        "      credential: {name: graph, as: bearer}\n"
    )
    assert cli.main(["check", "--resolve", str(config)]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "credential graph: failed: 127.0.0.1/token: the server's certificate does not verify "
        "(SSLCertVerificationError: unable to get local issuer certificate); for a server of "
        "an internal CA, give its CA certificate: --upstream-ca FILE"
    ]
    upstream_ca = ["--upstream-ca", str(server.pki.ca_cert)]
    assert cli.main(["check", "--resolve", *upstream_ca, str(config)]) == 0
    assert capsys.readouterr().out.endswith("ok, 1 allowlist entries\ncredential graph: ok\n")
