"""Redaction of injected secrets that an upstream echoes back (docs/configuration.md#transform,
docs/decisions.md D30).

Two places, two matchers, both built once per configuration (`Redactor.build`, called
by the loader for each entry with a `transform`), never per request:

* headers and trailers: `Redactor.header` replaces every *spelling* of a secret an
  echo plausibly takes: the exact bytes, any letter case, percent-encoding of any
  subset of its bytes (upper or lower hex, once or twice encoded, `+` for a space),
  JSON `\\uXXXX` / `\\/` escapes, and base64 (standard and urlsafe, padded or not,
  at any alignment inside a longer base64 text) with `[redacted]`. One expression
  of literals per entry (the secrets in any case, their base64), compiled at build;
  escapes in a value are decoded before it is searched;
* identity-encoded bodies: `Redactor.body()` returns a streaming matcher (a
  mitmproxy `flow.response.stream` callable) that replaces the exact secret with a
  mask of the same length (so Content-Length framing stays true), carrying
  between chunks the chunk's tail that begins a secret (at most
  `max(len(secret)) - 1` bytes) so a secret split across chunks is still caught.
  It holds no more than that carry beyond the chunk in hand.

Invariants: nothing here logs or raises with a secret in the message; a matcher
never shortens a body; `Redactor.header` is a no-op when no secret was injected.
Pure: no mitmproxy import.
"""

from __future__ import annotations

import base64
import functools
import re
from dataclasses import dataclass, field

REDACTED = b"[redacted]"
# A base64 text shorter than this is not redacted on its own: the core of a short secret's
# encoding at an odd alignment could match unrelated base64 (1 in 64**8 per position).
MIN_BASE64_CORE = 8
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


def _base64_cores(secret: bytes) -> set[bytes]:
    """The base64 characters fully determined by `secret`, at each of the 3 alignments.

    A secret inside a longer encoded text starts 0, 1 or 2 bytes into a 3-byte group; the
    characters that also carry bits of its neighbours (and any padding) are left out, so
    one core matches padded, unpadded and embedded encodings alike.
    """
    cores: set[bytes] = set()
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + secret + b"\0\0")
        first = -(-8 * offset // 6)  # the first character whose 6 bits are all the secret's
        last = (8 * (offset + len(secret)) - 6) // 6
        core = encoded[first : last + 1]
        if len(core) >= MIN_BASE64_CORE:
            cores.add(core)
            cores.add(core.translate(bytes.maketrans(b"+/", b"-_")))
    return cores


# A reload compiles only the entries whose secrets changed (~1 ms each, D30). The cache
# keeps a rotated secret in memory until evicted: it was in this process already.
@functools.lru_cache(maxsize=4096)
def _compiled(ordered: tuple[bytes, ...]) -> re.Pattern[bytes]:
    cores = sorted({c for s in ordered for c in _base64_cores(s)}, key=len, reverse=True)
    any_case = b"(?i:" + b"|".join(_any_case(s) for s in ordered) + b")"
    return re.compile(b"|".join([any_case, *map(re.escape, cores)]))


@dataclass(frozen=True)
class Redactor:
    """The secrets one entry injects, and their matchers. Never log it."""

    secrets: tuple[bytes, ...] = field(default=(), repr=False)  # exact, longest first
    # The secrets in any case, then their base64 cores (case-sensitive): literals only
    # (about 1 ms to compile, a per-byte alternation took 3.5); escapes are decoded first.
    _pattern: re.Pattern[bytes] | None = field(default=None, repr=False)

    @classmethod
    def build(cls, secrets: tuple[bytes, ...]) -> Redactor:
        ordered = tuple(sorted(set(secrets), key=lambda s: (-len(s), s)))
        if not ordered:
            return NO_REDACTION
        return cls(ordered, _compiled(ordered))

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
        """Header or trailer fields with `header` applied to each value: `fields` itself
        when none of them holds an escape or a match (one search of all the values
        joined: a literal that matches inside one value matches in the joined text)."""
        if self._pattern is None:
            return fields
        joined = b"\n".join([v for _, v in fields])
        if b"%" not in joined and b"\\" not in joined and self._pattern.search(joined) is None:
            return fields
        return tuple((n, self.header(v)) for n, v in fields)

    def spelled(self, spellings: tuple[bytes, ...]) -> Redactor:
        """This redactor, whose body matcher also masks `spellings`: the exact bytes the
        proxy wrote into one request (a `Basic` credential's base64 of `user:value`, a
        percent-encoded value). Headers already match them (base64 cores, decoding)."""
        extra = [s for s in spellings if s and s not in self.secrets]
        if not extra:
            return self
        ordered = tuple(sorted({*self.secrets, *extra}, key=lambda s: (-len(s), s)))
        return Redactor(ordered, self._pattern)

    def body(self) -> BodyMatcher:
        return BodyMatcher(self.secrets)


NO_REDACTION = Redactor()


class BodyMatcher:
    """A streaming replacer of exact secrets; one per response body.

    Call it with each chunk; it returns what can be sent now. Call it with `b""` at the
    end of the body (mitmproxy does) to flush the carry; `feed` is the same, as bytes.
    The output, joined, equals the whole body with each leftmost non-overlapping
    occurrence (longest secret first on a tie) replaced by `mask(len(secret))`, however
    the body was cut into chunks.
    """

    def __init__(self, secrets: tuple[bytes, ...]) -> None:
        self._secrets = secrets  # longest first
        self._keep = max((len(s) for s in secrets), default=1) - 1
        self._firsts = frozenset(s[0] for s in secrets if s)
        self._carry = b""

    def __call__(self, chunk: bytes) -> list[bytes]:
        """The pieces to send now: none rather than an empty one, which mitmproxy would
        frame as the last chunk of an HTTP/1 chunked body."""
        out = self.feed(chunk)
        return [out] if out else []

    def feed(self, chunk: bytes) -> bytes:
        if not chunk:  # end of the body: nothing more can complete a secret
            rest, self._carry = self._carry, b""
            out, _ = self._replace(rest, len(rest))
            return out
        buf = self._carry + chunk if self._carry else chunk
        # A secret starting before `limit` lies wholly inside `buf`: decided now.
        limit = self._held_from(buf)
        out, resume = self._replace(buf, limit)
        self._carry = buf[resume:]
        return out

    def _held_from(self, buf: bytes) -> int:
        """Where the carry starts: the first of the last `_keep` positions from which the
        rest of `buf` begins a secret (only there can the next chunk complete one), else
        the end. A streamed event that ends in anything else goes out whole, at once
        (issue 36: an SSE event was held until the next one). No secret starts before
        that position without ending inside `buf`, so deciding up to it is final."""
        end = len(buf)
        for at in range(max(end - self._keep, 0), end):
            if buf[at] in self._firsts and any(s.startswith(buf[at:]) for s in self._secrets):
                return at
        return end

    def _replace(self, buf: bytes, limit: int) -> tuple[bytes, int]:
        """Replace the occurrences starting before `limit`; (output, where to resume)."""
        if limit <= 0:
            return b"", 0
        pos, parts = 0, list[bytes]()
        while True:
            start, secret = self._first(buf, pos, limit)
            if secret is None:
                break
            parts += (buf[pos:start], mask(len(secret)))
            pos = start + len(secret)
        resume = max(pos, limit)
        parts.append(buf[pos:resume])
        return b"".join(parts), resume

    def _first(self, buf: bytes, pos: int, limit: int) -> tuple[int, bytes | None]:
        best, found = limit, None
        for secret in self._secrets:  # longest first: a tie keeps the longer
            at = buf.find(secret, pos, best + len(secret) - 1)
            if at != -1 and at < best:
                best, found = at, secret
        return best, found
