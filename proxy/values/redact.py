"""Redaction of injected secrets that an upstream echoes back (docs/configuration.md#transform,
docs/decisions.md D30).

Every spelling comes from one table (`proxy.values.spellings`, D360), which the
`secret_elsewhere` search reads too. Two places, two matchers, both built once per
configuration (`Redactor.build`, called by the loader for each entry with a
`transform`), never per request:

* headers and trailers: a field whose name holds a secret is dropped (D527);
  `Redactor.header` replaces every spelling of the table, the
  secrets also in any letter case with a space as `+`, with `[redacted]`; escapes in a
  value (percent once or twice, JSON) are decoded first, each on its own, so a mix of
  escaped and plain bytes (any subset percent-encoded) is caught too (D30). One
  expression of literals per entry, compiled at build;
* identity-encoded bodies: `Redactor.body()` returns a streaming matcher (a
  mitmproxy `flow.response.stream` callable) that replaces every spelling of the table
  (exact bytes) with a mask of the same length (so Content-Length framing stays true),
  carrying between chunks the chunk's tail that begins a spelling (at most the longest
  spelling minus one byte) so a value split across chunks or server-sent events is
  still caught. It holds no more than that carry beyond the chunk in hand. A buffer is
  searched first for the spellings of the values that hold no other (`Bearer ${TOKEN}`
  holds its token), and for every spelling only around what that finds; a spelling
  with `%` or `\\` is searched for only in a buffer that holds one (D361).

Invariants: nothing here logs or raises with a secret in the message; a matcher
never shortens a body; `Redactor.header` is a no-op when no secret was injected.
Pure: no mitmproxy import.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from sandbox_egress.proxy.values.spellings import literals

REDACTED = b"[redacted]"
# The escapes an encoder may put in place of one byte. An echo is decoded each way on its
# own (percent once, percent twice, JSON), never mixed: `\\%41` and `%2541` each have one
# meaning per encoder, and a secret may hold `%` or `\\` itself.
_PERCENT = re.compile(rb"%([0-9A-Fa-f]{2})")
_JSON = re.compile(rb'\\u00([0-9A-Fa-f]{2})|\\([/"\\])')


def mask(length: int) -> bytes:
    """What replaces a secret of `length` bytes in a body: the same length, readable."""
    if length < len(REDACTED):
        return b"*" * length
    return REDACTED[:-1] + b"*" * (length - len(REDACTED)) + REDACTED[-1:]


Decoded = tuple[bytes, list[int], list[int]]
Fields = tuple[tuple[bytes, bytes], ...]
# (every spelling, the spellings one of which each of those holds): `BodyMatcher`'s two.
Spellings = tuple[tuple[bytes, ...], tuple[bytes, ...]]


def _decoded(text: Decoded, escape: re.Pattern[bytes]) -> Decoded:
    """`text` with its `escape`s decoded, and where each byte came from in the header value.

    A `Decoded` is (bytes, starts, ends): byte i was `value[starts[i]:ends[i]]`.
    """
    data, starts, ends = text
    out, new_starts, new_ends = bytearray(), list[int](), list[int]()
    pos = 0
    for match in escape.finditer(data):
        out += data[pos : match.start()]
        new_starts += starts[pos : match.start()]
        new_ends += ends[pos : match.start()]
        hexed, char = match.group(1), match.groups()[-1]
        out.append(int(hexed, 16) if hexed is not None else ord(char))
        new_starts.append(starts[match.start()])
        new_ends.append(ends[match.end() - 1])
        pos = match.end()
    out += data[pos:]
    new_starts += starts[pos:]
    new_ends += ends[pos:]
    return bytes(out), new_starts, new_ends


def _any_case(secret: bytes) -> bytes:
    """A pattern for `secret` in any letter case (the group is `(?i:...)`), `+` for space."""
    return re.escape(secret).replace(rb"\ ", rb"[+ ]")


# A reload compiles only the entries whose secrets changed (~1 ms each, D30). The cache
# keeps a rotated secret in memory until evicted: it was in this process already.
@functools.lru_cache(maxsize=4096)
def _compiled(ordered: tuple[bytes, ...]) -> tuple[re.Pattern[bytes], Spellings]:
    """The header expression and the body's literals of `ordered` secrets."""
    found = literals(ordered)
    # A header is decoded before it is searched (percent, JSON): the escaped spellings are
    # found as their unescaped ones, and the expression holds only those.
    plain = [s for s in found if b"%" not in s and b"\\" not in s]
    any_case = b"(?i:" + b"|".join(_any_case(s) for s in ordered) + b")"
    return re.compile(b"|".join([any_case, *map(re.escape, plain)])), (
        literals(ordered, every=True),
        found,
    )


@dataclass(frozen=True)
class Redactor:
    """The secrets one entry injects, and their matchers. Never log it."""

    secrets: tuple[bytes, ...] = field(default=(), repr=False)  # exact, longest first
    # The secrets in any case, then every spelling of the table (case-sensitive): literals
    # only (a per-byte alternation took 3.5 ms to compile); escapes are decoded first.
    _pattern: re.Pattern[bytes] | None = field(default=None, repr=False)
    # What a body is searched for: every spelling, and those the swap wrote (`spelled`);
    # and first, the fewer that any of those holds (`proxy.spellings.searched`, D361).
    _spellings: Spellings = field(default=((), ()), repr=False)

    @classmethod
    def build(cls, secrets: tuple[bytes, ...]) -> Redactor:
        ordered = tuple(sorted(set(secrets), key=lambda s: (-len(s), s)))
        if not ordered:
            return NO_REDACTION
        pattern, spelled = _compiled(ordered)
        return cls(ordered, pattern, spelled)

    def __bool__(self) -> bool:
        return bool(self.secrets)

    def header(self, value: bytes) -> bytes:
        """A header or trailer value with every spelling of every secret replaced (D30).

        Searched as it is and, when it holds `%` or `\\` escapes, decoded: each stretch
        of the original bytes that spelled a secret becomes one `[redacted]`.
        """
        if self._pattern is None:
            return value
        if b"%" not in value and b"\\" not in value:  # the usual header: nothing to decode
            return self._pattern.sub(REDACTED, value)
        spans = [m.span() for m in self._pattern.finditer(value)]
        raw: Decoded = (value, list(range(len(value))), list(range(1, len(value) + 1)))
        once = _decoded(raw, _PERCENT)
        for data, starts, ends in (once, _decoded(once, _PERCENT), _decoded(raw, _JSON)):
            spans += [(starts[m.start()], ends[m.end() - 1]) for m in self._pattern.finditer(data)]
        if not spans:
            return value
        parts, pos = list[bytes](), 0
        for start, end in sorted(spans):
            if end <= pos:
                continue
            if start >= pos:
                parts += (value[pos:start], REDACTED)
            pos = end
        parts.append(value[pos:])
        return b"".join(parts)

    def fields(self, fields: Fields) -> Fields:
        """Header or trailer fields with `header` applied to each value, and without a
        field whose name holds a secret (a name cannot hold `[redacted]`, D527): `fields`
        itself when none of them holds an escape or a match (one search of all the values
        and names joined: a literal that matches inside one matches in the joined text)."""
        if self._pattern is None:
            return fields
        joined = b"\n".join([*(v for _, v in fields), *(n for n, _ in fields)])
        if b"%" not in joined and b"\\" not in joined and self._pattern.search(joined) is None:
            return fields
        pattern = self._pattern
        return tuple((n, self.header(v)) for n, v in fields if pattern.search(n) is None)

    def spelled(self, spellings: tuple[bytes, ...]) -> Redactor:
        """This redactor, whose body matcher also masks `spellings`: the exact bytes the
        proxy wrote into one request (a `Basic` credential's base64 of `user:value`, a
        percent-encoded value). Headers already match them (base64 cores, decoding)."""
        every, first = self._spellings
        extra = {s for s in spellings if s and s not in every}
        if not extra:
            return self
        return Redactor(self.secrets, self._pattern, ((*every, *extra), (*first, *extra)))

    @property
    def literals(self) -> tuple[bytes, ...]:
        """Every spelling of the values that hold none of the others (what a request is
        searched for: `secret_elsewhere`, D360), without the ones a swap wrote."""
        return literals(self.secrets)

    def body(self) -> BodyMatcher:
        every, first = self._spellings
        return BodyMatcher(every, first)


NO_REDACTION = Redactor()


class BodyMatcher:
    """A streaming replacer of exact spellings; one per response body.

    Call it with each chunk; it returns what can be sent now. Call it with `b""` at the
    end of the body (mitmproxy does) to flush the carry; `feed` is the same, as bytes.
    The output, joined, equals the whole body with each leftmost non-overlapping
    occurrence (longest spelling first on a tie) replaced by `mask(len(spelling))`,
    however the body was cut into chunks.
    """

    def __init__(self, spellings: tuple[bytes, ...], first: tuple[bytes, ...] = ()) -> None:
        """`spellings` to mask; `first`, when given, spellings one of which each of
        `spellings` holds: a buffer holding none of them is searched no further (D361)."""
        tables = _tables(tuple(spellings), tuple(first))
        self._keep, self._every, self._first = tables.keep, tables.every, tables.first
        self._gated, self._starting, self._firsts = tables.gated, tables.starting, tables.firsts
        self._carry = b""

    def __call__(self, chunk: bytes) -> list[bytes]:
        """The pieces to send now: none rather than an empty one, which mitmproxy would
        frame as the last chunk of an HTTP/1 chunked body."""
        out = self.feed(chunk)
        return [out] if out else []

    def feed(self, chunk: bytes) -> bytes:
        if not chunk:  # end of the body: nothing more can complete a spelling
            rest, self._carry = self._carry, b""
            out, _ = self._replace(rest, len(rest))
            return out
        buf = self._carry + chunk if self._carry else chunk
        # A spelling starting before `limit` lies wholly inside `buf`: decided now.
        limit = self._held_from(buf)
        out, resume = self._replace(buf, limit)
        self._carry = buf[resume:]
        return out

    def _held_from(self, buf: bytes) -> int:
        """Where the carry starts: the first of the last `_keep` positions from which the
        rest of `buf` begins a spelling (only there can the next chunk complete one), else
        the end. A streamed event that ends in anything else goes out whole, at once
        (issue 36: an SSE event was held until the next one). No spelling starts before
        that position without ending inside `buf`, so deciding up to it is final."""
        end, starting = len(buf), self._starting
        for begun in self._firsts.finditer(buf, max(end - self._keep, 0)):
            at = begun.start()
            tail = buf[at:]
            if any(len(s) > len(tail) and s.startswith(tail) for s in starting[buf[at]]):
                return at
        return end

    def _replace(self, buf: bytes, limit: int) -> tuple[bytes, int]:
        """Replace the occurrences starting before `limit`; (output, where to resume)."""
        if limit <= 0:
            return b"", 0
        escapes = (b"%" in buf, b"\\" in buf)
        fewer, every, longest = self._first[escapes], self._every[escapes], self._keep + 1
        pos, parts = 0, list[bytes]()
        reach = limit + longest if self._gated else limit
        while True:
            start, spelled = _first(fewer, buf, pos, reach)
            if spelled is None:
                break
            if self._gated:
                # The leftmost of every spelling holds one of the fewer (one that may start
                # past `limit`), so it starts at most `longest` bytes before the leftmost of
                # those, and no later; none there: none starts before `limit`.
                start, spelled = _first(
                    every, buf, max(pos, start - longest), min(start + 1, limit)
                )
                if spelled is None:
                    break
            parts += (buf[pos:start], mask(len(spelled)))
            pos = start + len(spelled)
        resume = max(pos, limit)
        parts.append(buf[pos:resume])
        return b"".join(parts), resume


Escapes = dict[tuple[bool, bool], tuple[bytes, ...]]


@dataclass(frozen=True, slots=True)
class _Tables:
    """What a `BodyMatcher` searches with, the same for every body of one set of
    spellings: made once per set (`_tables`), not per response (issue 49: built per
    response, the spellings' sorting and their four escape tables were 6 % of a
    kept-alive request's CPU on a host with a `transform`)."""

    keep: int  # the longest spelling's length - 1: what a chunk's tail may hold back
    every: Escapes
    first: Escapes
    gated: bool
    starting: dict[int, tuple[bytes, ...]]  # by first byte; read only
    firsts: re.Pattern[bytes]


@functools.lru_cache(maxsize=64)
def _tables(spellings: tuple[bytes, ...], first: tuple[bytes, ...]) -> _Tables:
    ordered = tuple(sorted(set(spellings), key=lambda s: (-len(s), s)))
    every = _by_escapes(ordered)
    gates = _by_escapes(tuple(sorted(set(first), key=lambda s: (-len(s), s)))) if first else every
    starting: dict[int, list[bytes]] = {}
    for spelled in ordered:
        starting.setdefault(spelled[0], []).append(spelled)
    # Where in a tail a spelling can begin: one search in C, not a loop per byte.
    begins = b"".join(re.escape(bytes([byte])) for byte in starting)
    return _Tables(
        keep=max((len(s) for s in ordered), default=1) - 1,
        every=every,
        first=gates,
        gated=bool(first),
        starting={byte: tuple(found) for byte, found in starting.items()},
        firsts=re.compile(b"[" + begins + b"]" if begins else b"(?!)"),
    )


def _by_escapes(ordered: tuple[bytes, ...]) -> Escapes:
    """Which spellings a buffer can hold, by whether it holds `%` and `\\`: one with `%`
    (`\\`) only where the buffer holds one; the usual body holds neither, and is searched
    for the plain ones only."""
    return {
        (pct, esc): tuple(s for s in ordered if (pct or b"%" not in s) and (esc or b"\\" not in s))
        for pct in (False, True)
        for esc in (False, True)
    }


def _first(
    searched: tuple[bytes, ...], buf: bytes, pos: int, limit: int
) -> tuple[int, bytes | None]:
    best, found = limit, None
    for spelled in searched:  # longest first: a tie keeps the longer
        at = buf.find(spelled, pos, best + len(spelled) - 1)
        if at != -1 and at < best:
            best, found = at, spelled
    return best, found
