"""`github_app`: a GitHub App installation token, minted with an RS256 app JWT
(docs/configuration.md#credentials; docs.github.com "Generating an installation access token").

    gh-app: {github_app: {app_id: 12345, installation_id: 678,
                          private_key: "${file:/run/secrets/app.pem}",
                          api_url: "https://api.github.com", repositories: [web],
                          permissions: {contents: write}}}

A fetch signs a JWT (`iss` the app id, `iat` 60 s in the past for clock drift, `exp`
9 minutes ahead: GitHub refuses more than 10) with the app's RSA key and POSTs it to
`{api_url}/app/installations/{installation_id}/access_tokens`, asking for the token to
be scoped to `repositories` and `permissions` when given. The token's expiry is the
answer's `expires_at` (an hour, on github.com).

Invariants: the key is checked at load (an RSA private key in PEM), never shown; an error
names the API path and status only.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from sandbox_egress.proxy.credentials.base import CacheSettings, CredentialError, Fetched
from sandbox_egress.proxy.credentials.block import Block, Report
from sandbox_egress.proxy.credentials.https import Https
from sandbox_egress.proxy.values.secret import Secret

DEFAULT_API_URL = "https://api.github.com"
JWT_BACKDATE_S = 60
JWT_LIFETIME_S = 540


@dataclass(frozen=True, slots=True)
class GithubApp:
    app_id: int
    installation_id: int
    private_key: Secret
    settings: CacheSettings
    api_url: str = DEFAULT_API_URL
    repositories: tuple[str, ...] = ()
    permissions: tuple[tuple[str, str], ...] = ()
    https: Https = field(default_factory=Https)

    def source(self, https: Https) -> GithubApp:
        return replace(self, https=https)

    def fetch(self) -> Fetched:
        url = f"{self.api_url}/app/installations/{self.installation_id}/access_tokens"
        body: dict[str, Any] = {}
        if self.repositories:
            body["repositories"] = list(self.repositories)
        if self.permissions:
            body["permissions"] = dict(self.permissions)
        headers = {
            "Authorization": f"Bearer {app_jwt(self.app_id, self.private_key, time.time())}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
        }
        answer = self.https.exchange("POST", url, self.settings.timeout, body=body, headers=headers)
        token = answer.get("token") if isinstance(answer, dict) else None
        if not isinstance(token, str):
            raise CredentialError(f"{url}: the answer has no token")
        return Fetched(Secret(token), _expiry(answer.get("expires_at")))


def app_jwt(app_id: int, private_key: Secret, now: float) -> str:
    """The app's RS256 JSON Web Token, valid from a minute ago for nine minutes."""
    key = _rsa_key(private_key.reveal())
    if key is None:
        raise CredentialError("private_key is not an RSA private key in PEM")
    claims = {
        "iat": int(now) - JWT_BACKDATE_S,
        "exp": int(now) + JWT_LIFETIME_S,
        "iss": str(app_id),
    }
    signing = f"{_b64({'alg': 'RS256', 'typ': 'JWT'})}.{_b64(claims)}".encode()
    signature = key.sign(signing, padding.PKCS1v15(), hashes.SHA256())
    return f"{signing.decode()}.{base64.urlsafe_b64encode(signature).rstrip(b'=').decode()}"


def _b64(part: dict[str, Any]) -> str:
    data = json.dumps(part, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _rsa_key(pem: str) -> rsa.RSAPrivateKey | None:
    try:
        key = serialization.load_pem_private_key(pem.encode(), password=None)
    except (ValueError, TypeError):
        return None
    return key if isinstance(key, rsa.RSAPrivateKey) else None


def _expiry(text: Any) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def parse(
    raw: Any, where: str, report: Report, environ: Mapping[str, str] | None
) -> GithubApp | None:
    block = Block.of(raw, where, report, environ)
    if block is None:
        return None
    app_id = block.integer("app_id")
    installation_id = block.integer("installation_id")
    private_key = block.secret("private_key", lines=True)
    if private_key is not None and environ is not None and _rsa_key(private_key.reveal()) is None:
        block.refuse("private_key", "must be an RSA private key in PEM (the app's .pem)")
    api_url = block.https_url("api_url") if block.has("api_url") else DEFAULT_API_URL
    repositories = block.strings("repositories")
    permissions = _permissions(block)
    settings = block.settings()
    block.unknown()
    if not block.ok or private_key is None:
        return None
    return GithubApp(
        app_id, installation_id, private_key, settings, api_url, repositories, permissions
    )


def _permissions(block: Block) -> tuple[tuple[str, str], ...]:
    raw = block.value("permissions")
    if raw is None:
        return ()
    if (
        not isinstance(raw, dict)
        or not raw
        or not all(isinstance(k, str) and v in ("read", "write", "admin") for k, v in raw.items())
    ):
        block.refuse("permissions", "must be a mapping of permission to read, write or admin")
        return ()
    return tuple(sorted(raw.items()))
