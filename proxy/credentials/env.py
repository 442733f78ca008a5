"""`env`: a credential read from the proxy's environment (`{env: NAME}`).

Read on each fetch (cached for `ttl`, default 5 min), so the cache's rules are the same as
for every other source; an unset or empty variable is a failed fetch.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sandbox_egress.proxy.credentials.base import CacheSettings, CredentialError, Fetched
from sandbox_egress.proxy.credentials.block import Block, Report
from sandbox_egress.proxy.credentials.https import Https
from sandbox_egress.proxy.values.secret import Secret

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True, slots=True)
class EnvSource:
    variable: str
    settings: CacheSettings = CacheSettings()
    environ: Mapping[str, str] = field(
        default_factory=lambda: os.environ, compare=False, repr=False
    )

    def source(self, https: Https) -> EnvSource:
        return self

    def fetch(self) -> Fetched:
        value = self.environ.get(self.variable)
        if not value:
            raise CredentialError(f"environment variable {self.variable} is not set or empty")
        return Fetched(Secret(value))


def parse(
    raw: Any, where: str, report: Report, environ: Mapping[str, str] | None
) -> EnvSource | None:
    """`env: NAME`, or `env: {name: NAME, ttl: ...}`."""
    block = Block.of({"name": raw} if isinstance(raw, str) else raw, where, report, environ)
    if block is None:
        return None
    name = block.string("name")
    if name and not _NAME.fullmatch(name):
        block.refuse("name", "must be an environment variable name")
    settings = block.settings()
    block.unknown()
    if not block.ok:
        return None
    return EnvSource(name, settings, os.environ if environ is None else environ)
