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
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

import re2

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


# Who holds a placeholder: (the file, the entry's index in its allowlist).
Holder = tuple[str, int]


class Matcher(Protocol):
    """A compiled alternation of placeholders (`re`, or `re2` for everyone's, D179)."""

    def finditer(self, data: bytes) -> Iterator[Any]: ...


class Searcher(Protocol):
    """A compiled alternation of resolved values (`re`, or `re2` for everyone's)."""

    @property
    def pattern(self) -> bytes: ...

    def search(self, data: bytes) -> Any: ...


@dataclass(frozen=True, slots=True)
class PlaceholderIndex:
    """Every placeholder of a configuration (or of a node file and one sandbox's file,
    `merged`, D425), and which entries hold each: one, unless both files repeat it (then
    it is refused wherever it is sent, D179)."""

    owners: dict[bytes, frozenset[Holder]] = field(default_factory=dict)
    # Every placeholder, longest first; None when the configuration has none.
    pattern: Matcher | None = None

    # Every resolved value (transform and secret values, their referenced parts): found in
    # a request, it is `secret_elsewhere` (D208). None when the configuration has none.
    values: Searcher | None = field(default=None, repr=False)

    def owners_in(self, data: bytes) -> set[Holder]:
        """The entries whose placeholders occur in `data`."""
        if self.pattern is None:
            return set()
        found = (m.group() for m in self.pattern.finditer(data))
        return {h for key in found for h in self.owners[key]}


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


def index(entries: Sequence[Owner], report: Report, source: str = "") -> PlaceholderIndex:
    """One matcher for every placeholder of the file `source`; reports one used twice, or
    inside another."""
    owners: dict[bytes, frozenset[Holder]] = {}
    where: dict[bytes, str] = {}
    for entry in entries:
        for number, secret in enumerate(entry.secrets):
            key = secret.placeholder.encode()
            here = f"network.allowlist[{entry.index}].secrets[{number}].placeholder"
            if key in owners:
                report(here, f"placeholder already used at {where[key]}")
                continue
            owners[key], where[key] = frozenset({(source, entry.index)}), here
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


def holders(indexes: Iterable[PlaceholderIndex]) -> dict[bytes, frozenset[Holder]]:
    """Each placeholder of `indexes` with every entry that holds it."""
    owners: dict[bytes, frozenset[Holder]] = {}
    for one in indexes:
        for key, found in one.owners.items():
            owners[key] = owners.get(key, frozenset()) | found
    return owners


def merged(indexes: Iterable[PlaceholderIndex]) -> PlaceholderIndex:
    """The placeholders and values of several files: a node's and one sandbox's (D425;
    D179, D208). A placeholder two files repeat is held by both. Matched by RE2: a
    sandbox file's alternation may be large, and a request's headers are searched in
    linear time whatever they hold."""
    indexes = list(indexes)
    owners = holders(indexes)
    sources = [one.values.pattern for one in indexes if one.values is not None]
    values = re2.compile(b"|".join(sources), _QUIET) if sources else None
    if not owners and values is None:
        return NO_PLACEHOLDERS
    ordered = sorted(owners, key=lambda p: (-len(p), p))
    pattern = re2.compile(b"|".join(re.escape(p) for p in ordered), _QUIET) if owners else None
    return PlaceholderIndex(owners, pattern, values)


def searchable(index: PlaceholderIndex) -> bool:
    """Whether `index`'s placeholders and values fit RE2's matchers (`merged`): a sandbox
    file past its size limit is refused alone, not with every snapshot (D427)."""
    try:
        merged((index,))
    except re2.error:
        return False
    return True


def _quiet() -> Any:
    """RE2's options with its error log off: RE2 prints the start of a pattern it cannot
    compile to stderr, and the values' pattern is made of secrets (D427)."""
    options = re2.Options()
    options.log_errors = False
    return options


_QUIET = _quiet()
