"""Every kind of credential, one row each: the configuration key and the module that
parses its block into a `Spec` (docs/configuration.md#credentials).

Adding a source or a minter is one module with a `parse` and one row here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from sandbox_egress.proxy.credentials import aws, command, env, file, github_app, oauth2, vault
from sandbox_egress.proxy.credentials.base import CacheSettings, Source
from sandbox_egress.proxy.credentials.block import Report
from sandbox_egress.proxy.credentials.https import Https


class Spec(Protocol):
    """A credential's parsed definition (frozen, compared on a reload: equal means the
    cache keeps its value). `source` makes it ready to fetch with the proxy's upstream
    trust (`proxy.credentials.https.Https`); a source that needs none returns itself."""

    @property
    def settings(self) -> CacheSettings: ...

    def source(self, https: Https) -> Source: ...


# (the kind's block, its location, report, environ or None) -> its Spec, or None (reported)
Parse = Callable[[Any, str, Report, Mapping[str, str] | None], Spec | None]

KINDS: dict[str, Parse] = {
    "env": env.parse,
    "file": file.parse,
    "command": command.parse,
    "vault": vault.parse,
    "oauth2": oauth2.parse,
    "github_app": github_app.parse,
    "aws": aws.parse,  # keys for SigV4 (issue 32, i32b)
}
