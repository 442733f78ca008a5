"""`egress-proxy check --resolve`: every configured credential fetched once, reported by
name (docs/configuration.md#credentials).

Each credential is fetched through the cache (so with the same timeout, the same value
checks and the same upstream trust as the running proxy), all at once. The report names
the credential and, for a failure, the source's message (paths, statuses, exit codes):
never a value.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from sandbox_egress.proxy.credentials.base import CredentialUnavailable
from sandbox_egress.proxy.credentials.cache import Credentials
from sandbox_egress.proxy.credentials.https import Https
from sandbox_egress.proxy.credentials.section import Definitions, sources


@dataclass(frozen=True, slots=True)
class Probed:
    name: str
    problem: str | None  # None: fetched and usable

    def __str__(self) -> str:
        return f"credential {self.name}: " + ("ok" if self.problem is None else self.problem)


def probe(definitions: Definitions, https: Https) -> list[Probed]:
    """Fetch every credential once; one result per credential, in configuration order."""
    credentials = Credentials(*sources(definitions, https))

    async def one(name: str) -> Probed:
        try:
            await credentials.get(name)
        except CredentialUnavailable as exc:
            return Probed(name, f"failed: {str(exc).split(': ', 1)[-1]}")
        return Probed(name, None)

    async def every() -> list[Probed]:
        return list(await asyncio.gather(*(one(name) for name in credentials.names())))

    return asyncio.run(every())
