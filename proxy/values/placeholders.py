"""Placeholder secrets (`secrets:` on an entry): their typed values and their checks
(docs/configuration.md#placeholders, docs/decisions.md D112).

The loader (`proxy.config`) hands each entry's `secrets` list to `parse_secrets`, with its
own reference resolver, and the finished allowlist to `index`, which checks that no
placeholder is used twice and builds the one matcher every request is searched with.

Invariants:
* A placeholder is not secret (the sandbox holds it); its value is a `Secret` and no
  problem message is ever built from it.
* The placeholder access key id of an `as: sigv4` binding is a placeholder too
  (docs/configuration.md#sigv4-re-signing-as-sigv4, D362): entries binding the same one
  all hold it (`shared`), and it is foreign to any other.
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

from sandbox_egress.proxy.values.redact import Redactor
from sandbox_egress.proxy.values.secret import Secret
from sandbox_egress.proxy.values.spellings import compiled

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

    def sub(self, repl: bytes, data: bytes) -> bytes: ...


@dataclass(frozen=True, slots=True)
class PlaceholderIndex:
    """Every placeholder of a configuration (or of a node file and one sandbox's file,
    `merged`, D425), and which entries hold each: one, unless both files repeat it (then
    it is refused wherever it is sent, D179)."""

    owners: dict[bytes, frozenset[Holder]] = field(default_factory=dict)
    # Every placeholder, longest first; None when the configuration has none.
    pattern: Matcher | None = None
    # Placeholders every owner holds alike (a sigv4 binding's access key id, D362): foreign
    # only to an entry that is not one of them. Any other held by two is everyone's (D179).
    shared: frozenset[bytes] = frozenset()

    # Every resolved value (transform and secret values, their referenced parts): found in
    # a request, it is `secret_elsewhere` (D208). None when the configuration has none.
    values: Searcher | None = field(default=None, repr=False)

    def owners_in(self, data: bytes) -> set[Holder]:
        """The entries whose placeholders occur in `data`."""
        if self.pattern is None:
            return set()
        found = (m.group() for m in self.pattern.finditer(data))
        return {h for key in found for h in self.owners[key]}

    def foreign_in(self, data: bytes, own: Holder | None) -> bool:
        """Whether `data` holds a placeholder that is not `own`'s alone to hold (in the
        policy one sandbox sees, D425): one of another entry, or one two files repeat
        (D179), or a shared one `own` is not among the holders of (D362)."""
        if self.pattern is None:
            return False
        for match in self.pattern.finditer(data):
            key = match.group()
            holders = self.owners[key]
            if own not in holders if key in self.shared else bool(holders - {own}):
                return True
        return False


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

    @property
    def sigv4(self) -> Signing | None: ...


class Signing(Protocol):
    """What `index` reads of an `as: sigv4` binding (`proxy.sigv4binding.SigV4Binding`)."""

    @property
    def placeholder_access_key_id(self) -> str: ...


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
    shared: set[bytes] = set()
    for entry in entries:  # D362: entries binding one access key id all hold it
        if entry.sigv4 is None:
            continue
        key = entry.sigv4.placeholder_access_key_id.encode()
        here = f"network.allowlist[{entry.index}].credential.placeholder_access_key_id"
        if key in owners and key not in shared:
            report(here, f"placeholder already used at {where[key]}")
            continue
        owners[key] = owners.get(key, frozenset()) | {(source, entry.index)}
        where.setdefault(key, here)
        shared.add(key)
    ordered = sorted(owners, key=lambda p: (-len(p), p))
    for longer in ordered:
        for shorter in ordered:
            if shorter != longer and shorter in longer:
                report(where[longer], f"placeholder contains the one at {where[shorter]}")
    # Every spelling (D360) of every value: each entry's own (its values that hold none of
    # its others, `Redactor.literals`), in one RE2 expression.
    found = sorted({s for e in entries for s in e.redactions.literals}, key=lambda s: (-len(s), s))
    values = compiled(b"|".join(map(re.escape, found))) if found else None
    if not owners and values is None:
        return NO_PLACEHOLDERS
    pattern = re.compile(b"|".join(re.escape(p) for p in ordered)) if owners else None
    return PlaceholderIndex(owners, pattern, frozenset(shared), values)


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
    shared = frozenset(k for one in indexes for k in one.shared)
    sources = [one.values.pattern for one in indexes if one.values is not None]
    values = compiled(b"|".join(sources)) if sources else None
    if not owners and values is None:
        return NO_PLACEHOLDERS
    ordered = sorted(owners, key=lambda p: (-len(p), p))
    pattern = re2.compile(b"|".join(re.escape(p) for p in ordered)) if owners else None
    return PlaceholderIndex(owners, pattern, shared, values)


def searchable(index: PlaceholderIndex) -> bool:
    """Whether `index`'s placeholders and values fit RE2's matchers (`merged`): a sandbox
    file past its size limit is refused alone, not with every snapshot (D427)."""
    try:
        merged((index,))
    except re2.error:
        return False
    return True
