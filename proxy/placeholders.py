"""Placeholder secrets (`secrets:` on an entry): their typed values and their checks
(docs/configuration.md#placeholders, docs/decisions.md D112).

The loader (`proxy.config`) hands each entry's `secrets` list to `parse_secrets`, with its
own reference resolver, and the finished allowlist to `index`, which checks that no
placeholder is used twice and builds the one matcher every request is searched with.

Invariants:
* A placeholder is not secret (the sandbox holds it); its value is a `Secret` and no
  problem message is ever built from it.
* A placeholder is 8 or more URL-unreserved characters (`A-Z a-z 0-9 - . _ ~`): it is
  spelled the same in a header, a query string and a Basic credential, and too long to
  occur by chance. No placeholder contains another (one match names one owner).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from sandbox_egress.proxy.redact import Redactor
from sandbox_egress.proxy.secret import Secret

Report = Callable[[str, str], None]  # (location, message)
# (value with references, location) -> the resolved Secret, or None (reported)
ResolveValue = Callable[[str, str], Secret | None]

MIN_PLACEHOLDER_LENGTH = 8
_PLACEHOLDER = re.compile(r"^[A-Za-z0-9._~-]+$")


class Place(StrEnum):
    """Where in a request a placeholder is swapped for its value."""

    HEADERS = "headers"  # header values, and inside a `Basic` credential
    QUERY = "query"  # query parameter values


@dataclass(frozen=True, slots=True)
class Placeholder:
    placeholder: str
    value: Secret
    places: frozenset[Place] = frozenset({Place.HEADERS})
    require: bool = False


@dataclass(frozen=True, slots=True)
class PlaceholderIndex:
    """Every placeholder of a configuration, and which entry (index) owns each."""

    owners: dict[bytes, int] = field(default_factory=dict)
    # Every placeholder, longest first; None when the configuration has none.
    pattern: re.Pattern[bytes] | None = None

    # Every resolved value (transform and secret values, their referenced parts): found in
    # a request, it is `secret_elsewhere` (D208). None when the configuration has none.
    values: re.Pattern[bytes] | None = field(default=None, repr=False)

    def owners_in(self, data: bytes) -> set[int]:
        """The entries whose placeholders occur in `data`."""
        if self.pattern is None:
            return set()
        return {self.owners[m.group()] for m in self.pattern.finditer(data)}


NO_PLACEHOLDERS = PlaceholderIndex()


def parse_secrets(
    raw: Any, where: str, resolve: ResolveValue, report: Report
) -> tuple[Placeholder, ...] | None:
    """The domain checks of an entry's `secrets` list the schema accepted; None when refused.

    `resolve` is the loader's: it reports a bad reference, and with `secrets=False` checks
    without looking up (an `Unresolved` value, whose `reveal_all()` is empty).
    """
    if raw is None:
        return ()
    result: list[Placeholder] = []
    ok = True
    for number, item in enumerate(raw):
        here = f"{where}[{number}]"
        placeholder, value = item["placeholder"], item["value"]
        if len(placeholder) < MIN_PLACEHOLDER_LENGTH or not _PLACEHOLDER.fullmatch(placeholder):
            report(
                f"{here}.placeholder",
                f"a placeholder is {MIN_PLACEHOLDER_LENGTH} or more of A-Z a-z 0-9 - . _ ~",
            )
            ok = False
            continue
        secret = resolve(value, f"{here}.value")
        if secret is None:
            ok = False
            continue
        if any(placeholder in part for part in secret.reveal_all()):
            report(f"{here}.value", "the value contains its own placeholder")
            ok = False
            continue
        places = frozenset(Place(p) for p in item.get("in", ["headers"]))
        result.append(Placeholder(placeholder, secret, places, item.get("require") is True))
    return tuple(result) if ok else None


class Owner(Protocol):
    """What `index` reads of an allowlist entry (`proxy.config.Entry`)."""

    @property
    def index(self) -> int: ...

    @property
    def secrets(self) -> tuple[Placeholder, ...]: ...

    @property
    def redactions(self) -> Redactor: ...


def index(entries: Sequence[Owner], report: Report) -> PlaceholderIndex:
    """One matcher for every placeholder; reports one used twice, or inside another."""
    owners: dict[bytes, int] = {}
    where: dict[bytes, str] = {}
    for entry in entries:
        for number, secret in enumerate(entry.secrets):
            key = secret.placeholder.encode()
            here = f"network.allowlist[{entry.index}].secrets[{number}].placeholder"
            if key in owners:
                report(here, f"placeholder already used at {where[key]}")
                continue
            owners[key], where[key] = entry.index, here
    ordered = sorted(owners, key=lambda p: (-len(p), p))
    for longer in ordered:
        for shorter in ordered:
            if shorter != longer and shorter in longer:
                report(where[longer], f"placeholder contains the one at {where[shorter]}")
    secrets = sorted({v for e in entries for v in e.redactions.secrets}, key=lambda v: (-len(v), v))
    values = re.compile(b"|".join(map(re.escape, secrets))) if secrets else None
    if not owners and values is None:
        return NO_PLACEHOLDERS
    pattern = re.compile(b"|".join(re.escape(p) for p in ordered)) if owners else None
    return PlaceholderIndex(owners, pattern, values)
