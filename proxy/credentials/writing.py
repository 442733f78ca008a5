"""What a request carries of the credentials its entry names, once the cache gave them:
the pure half of the credentials stage (docs/configuration.md#credentials).

The request stage (`proxy.stages.decide_request`) names the credentials an allowed request
needs (`needed`); the adapter (`addons/clauses/credentials.py`) awaits each from the cache, then
calls `write` with the request's outgoing header fields and target:

* a transform whose value names a credential (`${credential:NAME}`) is rendered and set,
  replacing any field of that name;
* the entry's `credential:` binding writes `Authorization: Bearer VALUE`,
  `Authorization: Basic base64(username:VALUE)` or `HEADER: VALUE`, replacing any field
  of that name (`sigv4` is signed by its own stage, not written here);
* a placeholder whose value names a credential was left in place by the placeholder
  stage (`proxy.values.swap` counts it found, writes nothing): it is swapped now, in the same
  places and spellings (`Basic` re-encoded, percent-encoded in a query).

Invariants: the plan names where values went (header names, `query`), never a value; its
`redactions` cover every resolved value the request carries (the entry's static ones and
each credential's), so an upstream echoing any of them is redacted (proxy.redact).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from sandbox_egress.proxy.credentials.base import Fetched
from sandbox_egress.proxy.credentials.section import As, Binding
from sandbox_egress.proxy.values.placeholders import Placeholder, PlaceholderIndex
from sandbox_egress.proxy.values.redact import Redactor
from sandbox_egress.proxy.values.secret import Secret, Template
from sandbox_egress.proxy.values.swap import swap

if TYPE_CHECKING:
    from sandbox_egress.proxy.config.entry import Entry
    from sandbox_egress.proxy.decision import Decision

Fields = tuple[tuple[bytes, bytes], ...]

MIN_REDACTED_LENGTH = 6  # as proxy.config: shorter parts would mangle every header


def needed(entry: Entry) -> tuple[str, ...]:
    """The credentials a request allowed by `entry` needs written (never sigv4's: signed)."""
    names: list[str] = []
    for value in (*(t.value for t in entry.transform), *(p.value for p in entry.secrets)):
        if isinstance(value, Template):
            names.extend(value.names)
    binding = entry.credential
    if binding is not None and binding.as_ is not As.SIGV4:
        names.append(binding.name)
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True, slots=True)
class Plan:
    fields: Fields
    path: str
    injected: tuple[str, ...]  # where values went: header names, then "query"
    redactions: Redactor


def write(decision: Decision, fields: Fields, path: str, values: Mapping[str, Fetched]) -> Plan:
    """The request's fields and target with every credential of its entry written."""
    entry = decision.entry
    if entry is None:
        raise ValueError("a credential is written only for a request an entry allowed")
    texts = {name: fetched.value.reveal() for name, fetched in values.items()}
    written: list[tuple[str, Secret]] = [
        (t.header, t.value.render(texts)) for t in entry.transform if isinstance(t.value, Template)
    ]
    if entry.credential is not None and entry.credential.as_ is not As.SIGV4:
        written.append(_binding(entry.credential, texts[entry.credential.name]))
    sent = list(fields)
    for header, secret in written:
        lower = header.lower().encode()
        sent = [(n, v) for n, v in sent if n.lower() != lower]
        sent.append((header.encode(), secret.reveal().encode()))
    injected = [header for header, _ in written]
    carried = [secret for _, secret in written]
    rendered = tuple(
        replace(p, value=p.value.render(texts))
        for p in entry.secrets
        if isinstance(p.value, Template)
    )
    if rendered:
        carried += [p.value for p in rendered]
        sent, path, swapped, spelled = _swap(decision, entry, rendered, tuple(sent), path)
        injected += swapped
        carried.append(Secret("", spelled))  # the Basic base64 and percent-encoded spellings
    static = [t.value for t in entry.transform] + [p.value for p in entry.secrets]
    found = {
        s.encode()
        for v in (*static, *carried)
        for s in v.reveal_all()
        if len(s) >= MIN_REDACTED_LENGTH
    }
    return Plan(tuple(sent), path, tuple(dict.fromkeys(injected)), Redactor.build(tuple(found)))


def _binding(binding: Binding, value: str) -> tuple[str, Secret]:
    """The header a binding writes, and its whole value (which holds the credential)."""
    if binding.as_ is As.BEARER:
        return "Authorization", Secret(f"Bearer {value}", (value,))
    if binding.as_ is As.BASIC:
        encoded = base64.b64encode(f"{binding.username}:{value}".encode()).decode()
        return "Authorization", Secret(f"Basic {encoded}", (value, encoded))  # echoed alone
    return str(binding.header), Secret(value)


def _swap(
    decision: Decision,
    entry: Entry,
    rendered: tuple[Placeholder, ...],
    fields: Fields,
    path: str,
) -> tuple[list[tuple[bytes, bytes]], str, list[str], tuple[str, ...]]:
    """The placeholders whose values name credentials, swapped (the placeholder stage's
    own rules, with only these placeholders: the foreign check already ran)."""
    own = ("", entry.index)  # one holder: these placeholders are the deciding entry's own
    owners = {p.placeholder.encode(): frozenset({own}) for p in rendered}
    ordered = sorted(owners, key=lambda p: (-len(p), p))
    index = PlaceholderIndex(owners, re.compile(b"|".join(re.escape(p) for p in ordered)))
    view = replace(decision, entry=replace(entry, secrets=rendered))
    result = swap(index, view, fields, path, own)
    sent = list(result.fields) if result.fields is not None else list(fields)
    spelled = tuple(s.decode("utf-8", "surrogateescape") for s in result.spellings)
    return sent, result.path if result.path is not None else path, list(result.injected), spelled
