"""`vault`: a field of a KV version 2 secret in Vault or OpenBao, read over HTTPS with a
token from a file (docs/configuration.md#credentials).

    db: {vault: {url: "https://vault.internal:8200", kv2: {mount: secret, path: agents/db,
                 field: password}, token_file: /run/secrets/vault-token, ttl: 10m}}

A fetch reads the token file (so a rotated token, e.g. one an agent sidecar renews, is
used at once), then `GET {url}/v1/{mount}/data/{path}` with `X-Vault-Token` (and
`X-Vault-Namespace` when `namespace` is given), and takes `data.data[field]`, which must
be a string. The value is kept for `ttl` (default 5 min): a secret rotated in the store
reaches requests within it.

Invariants: an error names the mount, path, field and status, never the token or a value.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sandbox_egress.proxy.credentials.base import CacheSettings, CredentialError, Fetched
from sandbox_egress.proxy.credentials.block import Block, Report
from sandbox_egress.proxy.credentials.file import read_secret_file
from sandbox_egress.proxy.credentials.https import Https
from sandbox_egress.proxy.values.secret import Secret


@dataclass(frozen=True, slots=True)
class Vault:
    url: str
    mount: str
    path: str
    field_name: str
    token_file: str
    settings: CacheSettings
    namespace: str = ""
    https: Https = field(default_factory=Https)

    def source(self, https: Https) -> Vault:
        return replace(self, https=https)

    def fetch(self) -> Fetched:
        token = read_secret_file(self.token_file)
        if not token or any(c in token for c in "\r\n\0"):
            raise CredentialError(f"{self.token_file} holds no usable token")
        quoted = urllib.parse.quote(self.path, safe="/")
        url = f"{self.url}/v1/{urllib.parse.quote(self.mount, safe='')}/data/{quoted}"
        headers = {"X-Vault-Token": token}
        if self.namespace:
            headers["X-Vault-Namespace"] = self.namespace
        answer = self.https.exchange("GET", url, self.settings.timeout, headers=headers)
        data = answer.get("data") if isinstance(answer, dict) else None
        values = data.get("data") if isinstance(data, dict) else None
        value = values.get(self.field_name) if isinstance(values, dict) else None
        if not isinstance(value, str):
            raise CredentialError(
                f"{self.mount}/{self.path} has no string field {self.field_name!r}"
            )
        return Fetched(Secret(value))


def parse(raw: Any, where: str, report: Report, environ: Mapping[str, str] | None) -> Vault | None:
    block = Block.of(raw, where, report, environ)
    if block is None:
        return None
    url = block.https_url("url")
    kv2 = Block.of(block.value("kv2"), f"{where}.kv2", report, environ)
    mount = path = field_name = ""
    if kv2 is not None:
        mount, path, field_name = kv2.string("mount"), kv2.string("path"), kv2.string("field")
        kv2.unknown()
    token_file = block.absolute_path("token_file")
    namespace = block.string("namespace", required=False)
    settings = block.settings()
    block.unknown()
    if not block.ok or kv2 is None or not kv2.ok:
        if kv2 is None:
            block.ok = False
        return None
    return Vault(url, mount, path.strip("/"), field_name, token_file, settings, namespace)
