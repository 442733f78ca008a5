"""The `credentials` clause's row (docs/configuration.md#credentials): the credentials
an allowed request needs fetched and written (`proxy.credentials.writing.needed`: its
entry's `${credential:}` templates and a binding that is not SigV4's) are its part for
the adapter (`addons.clauses.credentials`), which awaits them from the cache and
writes them last, after budgets. The binding itself is parsed with the core's values
(`proxy.config.loader`): it needs the file's `credentials:` section."""

from __future__ import annotations

from sandbox_egress.proxy.clauses.base import Head, Ruling
from sandbox_egress.proxy.credentials.writing import needed


def head(ask: Head) -> Ruling:
    entry, decision = ask.decision.entry, ask.decision
    names = needed(entry) if decision.injects and entry is not None else ()
    return Ruling(decision, names or None)
