"""`aws`: the keys the proxy signs AWS requests with (`credential: {as: sigv4}`;
docs/configuration.md#sigv4-re-signing-as-sigv4).

`{aws: {access_key_id: ..., secret_access_key: ..., session_token: ...}}`, each value a
`${NAME}` / `${file:...}` reference or text (the access key id is not secret, but is
resolved the same way). A fetch gives `Fetched(value=access key id, extra={
secret_access_key, session_token?})`: the signer (`proxy.clauses.sigv4`) reads exactly these.

Invariants: the secret key and the token live only inside `Secret`s; a `${file:}` key
rotated on disk reaches requests through the configuration reload (D115), and the cache
keeps the keys for `ttl` (default 5 min) like any source.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sandbox_egress.proxy.credentials.base import CacheSettings, CredentialError, Fetched
from sandbox_egress.proxy.credentials.block import Block, Report
from sandbox_egress.proxy.credentials.https import Https
from sandbox_egress.proxy.values.secret import Secret

SECRET_ACCESS_KEY = "secret_access_key"  # the keys of `Fetched.extra`
SESSION_TOKEN = "session_token"


@dataclass(frozen=True, slots=True)
class AwsKeysSource:
    access_key_id: Secret
    secret_access_key: Secret
    session_token: Secret | None = None
    settings: CacheSettings = CacheSettings()

    def source(self, https: Https) -> AwsKeysSource:
        return self

    def fetch(self) -> Fetched:
        try:
            extra = {SECRET_ACCESS_KEY: Secret(self.secret_access_key.reveal())}
            if self.session_token is not None:
                extra[SESSION_TOKEN] = Secret(self.session_token.reveal())
            return Fetched(Secret(self.access_key_id.reveal()), extra=extra)
        except Exception as exc:  # an unresolved value (checked, not loaded): no keys
            raise CredentialError("aws keys were not resolved (loaded without secrets)") from exc


def parse(
    raw: Any, where: str, report: Report, environ: Mapping[str, str] | None
) -> AwsKeysSource | None:
    """`aws: {access_key_id, secret_access_key, session_token?, ttl?, ...}`."""
    block = Block.of(raw, where, report, environ)
    if block is None:
        return None
    access_key_id = block.secret("access_key_id")
    secret_access_key = block.secret(SECRET_ACCESS_KEY)
    session_token = block.secret(SESSION_TOKEN, required=False)
    settings = block.settings()
    block.unknown()
    if not block.ok or access_key_id is None or secret_access_key is None:
        return None
    return AwsKeysSource(access_key_id, secret_access_key, session_token, settings)
