"""The spellings of a secret the proxy knows (docs/configuration.md#spellings-of-a-secret,
docs/decisions.md D360): one table, read by echo redaction (`proxy.values.redact`) and by the
`secret_elsewhere` search (`proxy.values.placeholders`, the credential cache) and the audit's
masking (`proxy.audit`).

A spelling is a *form* of the secret's bytes written with an *escape*:

* forms: the bytes themselves (`raw`); their `base64` (standard and URL-safe)
  as the run of characters whose bits all come from the secret, at each of the three
  alignments inside a longer base64 text, so padded, unpadded, embedded and `Basic`
  (`base64(user:secret)`) encodings all hold one of them;
* escapes: none (`plain`); `percent` as URL encoders write it (every byte
  outside a safe set as `%XX`, upper or lower hex, a space as `%20` or `+`; the safe sets
  of RFC 3986's unreserved, `encodeURIComponent`, `quote`, `encodeURI`, Java's
  `URLEncoder`, and none); `json` as JSON encoders write a string (the characters JSON
  escapes as their short escape or as `\\u00XX` in either hex case; `/` as it is, `\\/`
  or `\\u002f`; HTML-safe `<>&'` as `\\u003c`...; non-ASCII as UTF-8 or `\\uXXXX`);
  `html` as HTML templates write a value into a page (`&amp;`, `&lt;`, `&gt;`, and a
  quote as it is or as any of the entities common encoders choose, D522).

`SPELLINGS` lists each (form, escape) pair; `spellings(secret)` is all of them, as
literal bytes: matched by literal search, never by a per-byte expression, so a body's
matcher is a handful of `bytes.find` calls (D360). What is not here (a mix of escapes
inside one value, percent of any subset of bytes, double encoding) is matched in headers
by decoding first (`proxy.values.redact`) and in a request-target by percent-decoding it
(`proxy.values.swap`).

Invariants: pure (no mitmproxy import), deterministic, nothing here logs or raises with
a secret in its message; a literal is never empty and never shorter than the
`MIN_BASE64_CORE` characters a base64 form needs.
"""

from __future__ import annotations

import base64
import functools
import re
from collections.abc import Callable, Iterable
from itertools import product
from typing import Any

import re2

# A base64 run shorter than this is not a spelling on its own: the core of a short
# secret's encoding at an odd alignment could match unrelated base64 (1 in 64**8).
MIN_BASE64_CORE = 8
_URLSAFE = bytes.maketrans(b"+/", b"-_")


def _raw(secret: bytes) -> Iterable[bytes]:
    return (secret,)


def base64_cores(secret: bytes) -> set[bytes]:
    """The base64 characters fully determined by `secret`, at each of the 3 alignments
    (standard alphabet): a secret inside a longer encoded text starts 0, 1 or 2 bytes
    into a 3-byte group; the characters that also carry bits of its neighbours (and any
    padding) are left out, so one core matches padded, unpadded and embedded alike."""
    cores: set[bytes] = set()
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + secret + b"\0\0")
        first = -(-8 * offset // 6)  # the first character whose 6 bits are all the secret's
        last = (8 * (offset + len(secret)) - 6) // 6
        core = encoded[first : last + 1]
        if len(core) >= MIN_BASE64_CORE:
            cores.add(core)
    return cores


def _base64(secret: bytes) -> Iterable[bytes]:
    cores = base64_cores(secret)
    return cores | {c.translate(_URLSAFE) for c in cores}


_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
# The bytes each common URL encoder leaves as they are (besides a space, below).
_PERCENT_SAFE: tuple[frozenset[int], ...] = (
    frozenset(),  # every byte encoded
    _UNRESERVED,  # RFC 3986, Python quote(safe=""), Go QueryEscape/PathEscape, Rust
    _UNRESERVED | frozenset(b"!'()*"),  # JavaScript encodeURIComponent
    _UNRESERVED | frozenset(b"/"),  # Python quote()
    _UNRESERVED | frozenset(b"!'()*;,/?:@&=+$#"),  # JavaScript encodeURI
    (_UNRESERVED - frozenset(b"~")) | frozenset(b"*"),  # Java URLEncoder
)


def _percent(secret: bytes) -> Iterable[bytes]:
    found: set[bytes] = set()
    for safe, plus, hexes in product(_PERCENT_SAFE, (False, True), ("%%%02X", "%%%02x")):
        out = bytearray()
        for byte in secret:
            if byte == 0x20 and plus:
                out += b"+"
            elif byte in safe:
                out.append(byte)
            else:
                out += (hexes % byte).encode()
        found.add(bytes(out))
    return found


_JSON_SHORT = {0x22: b'\\"', 0x5C: b"\\\\", 0x08: b"\\b", 0x0C: b"\\f", 0x0A: b"\\n"}
_JSON_SHORT |= {0x0D: b"\\r", 0x09: b"\\t"}
_HTML = frozenset(b"<>&'")


def _json_one(text: str, utf8: bool, escapes: tuple[bool, str, bytes, bool, bool]) -> bytes:
    """`text` as one JSON encoder writes it inside a string: `escapes` are (short escapes,
    the `\\u` format, how `/` is written, HTML-safe, non-ASCII escaped). A secret that is
    not UTF-8 (`utf8` False, `text` its bytes as code points) keeps its high bytes."""
    short, hexes, slash, html, ascii = escapes
    out = bytearray()
    for char in text:
        code = ord(char)
        if code == 0x2F:
            out += slash
        elif code in _JSON_SHORT or code < 0x20 or (html and code in _HTML):
            out += _JSON_SHORT[code] if short and code in _JSON_SHORT else (hexes % code).encode()
        elif code < 0x80 or not (ascii and utf8):
            out += char.encode("utf-8" if utf8 else "latin-1")
        elif code > 0xFFFF:  # a UTF-16 surrogate pair
            code -= 0x10000
            out += (hexes % (0xD800 + (code >> 10)) + hexes % (0xDC00 + (code & 0x3FF))).encode()
        else:
            out += (hexes % code).encode()
    return bytes(out)


# The bytes some JSON encoder writes otherwise; a text without any is written as it is.
_JSON_TOUCHED = frozenset(range(0x20)) | frozenset(b'"\\/') | _HTML


def _json(secret: bytes) -> Iterable[bytes]:
    if secret.isascii() and _JSON_TOUCHED.isdisjoint(secret):
        return (secret,)  # the usual token, and every base64 core without `/`
    if secret.isascii() and _JSON_TOUCHED.isdisjoint(secret.replace(b"/", b"")):
        return (secret, *(secret.replace(b"/", s) for s in (b"\\/", b"\\u002f", b"\\u002F")))
    try:
        text, utf8 = secret.decode("utf-8"), True
    except UnicodeDecodeError:
        text, utf8 = secret.decode("latin-1"), False
    found: set[bytes] = set()
    for hexes in ("\\u%04x", "\\u%04X"):
        slashes = (b"/", b"\\/", (hexes % 0x2F).encode())
        for short, slash, html, ascii in product(
            (True, False), slashes, (False, True), (False, True)
        ):
            found.add(_json_one(text, utf8, (short, hexes, slash, html, ascii)))
    return found


# How HTML encoders write `"` and `'` in a page (`&`, `<`, `>` are always the named ones):
# left as they are (Python's html.escape(quote=False), Apache's escapeHtml4 for `'`),
# `&quot;` (Python, Django, PHP, Spring), `&#34;` (markupsafe/Jinja2, Go html/template),
# `&#x27;` (Python, Django), `&#39;` (markupsafe, Go, Ruby's ERB, lodash, escape-html),
# `&#039;` (PHP's htmlspecialchars), `&apos;` (PHP's ENT_HTML5, XML) (D522).
_HTML_NAMED = {0x26: b"&amp;", 0x3C: b"&lt;", 0x3E: b"&gt;"}
_HTML_QUOT = (b'"', b"&quot;", b"&#34;")
_HTML_APOS = (b"'", b"&#x27;", b"&#39;", b"&#039;", b"&apos;")


def _html(secret: bytes) -> Iterable[bytes]:
    """`secret` as HTML encoders write it into a page, every way they write a quote."""
    if not _HTML.intersection(secret) and 0x22 not in secret:
        return (secret,)
    found: set[bytes] = set()
    for quot, apos in product(_HTML_QUOT, _HTML_APOS):
        out = bytearray()
        for byte in secret:
            if byte in _HTML_NAMED:
                out += _HTML_NAMED[byte]
            elif byte == 0x22:
                out += quot
            elif byte == 0x27:
                out += apos
            else:
                out.append(byte)
        found.add(bytes(out))
    return found


def _percent_base64(core: bytes) -> Iterable[bytes]:
    """A base64 core in a URL: its `+` and `/` encoded (either hex case), or as it is."""
    return {core, *(core.replace(b"+", p).replace(b"/", s) for p, s in _B64_PERCENT)}


_B64_PERCENT = ((b"%2B", b"%2F"), (b"%2b", b"%2f"), (b"%2B", b"/"), (b"%2b", b"/"))

Spell = Callable[[bytes], Iterable[bytes]]
# Every spelling the proxy knows: (form, what the secret becomes; escape, how an encoder
# then writes it). Read by `spellings` only; a new spelling is a row here.
SPELLINGS: tuple[tuple[str, Spell, str, Spell], ...] = (
    ("raw", _raw, "plain", _raw),
    ("raw", _raw, "percent", _percent),
    ("raw", _raw, "json", _json),
    ("raw", _raw, "html", _html),
    ("base64", _base64, "plain", _raw),
    ("base64", _base64, "percent", _percent_base64),
    ("base64", _base64, "json", _json),
)


@functools.lru_cache(maxsize=8192)
def spellings(secret: bytes) -> frozenset[bytes]:
    """Every literal spelling of `secret`: each form under each escape (the secret
    itself included, whatever its length)."""
    found: set[bytes] = set()
    for _, form, _, escape in SPELLINGS:
        for written in form(secret):
            found.update(escape(written))
    return frozenset(s for s in found if s)


# A secret holding another of at least this many bytes is found by the other's spellings
# (each spelling is per byte, and the shorter one's base64 has 8 characters of its own at
# every alignment from 7 bytes on): it is not searched for itself (D361).
MIN_COVERING = 7


def searched(secrets: Iterable[bytes]) -> tuple[bytes, ...]:
    """`secrets` without those that hold another of `MIN_COVERING` bytes or more: a
    transform `Bearer ${TOKEN}` is found, in every spelling, by its token's."""
    unique = set(secrets)
    parts = [s for s in unique if len(s) >= MIN_COVERING]
    return tuple(s for s in unique if not any(p != s and p in s for p in parts))


def literals(secrets: Iterable[bytes], every: bool = False) -> tuple[bytes, ...]:
    """The spellings of every secret `searched` keeps (of every secret, `every`), longest
    first (a tie: the smaller bytes first), so an alternation of them matches the
    longest at a position."""
    found = {s for secret in (secrets if every else searched(secrets)) for s in spellings(secret)}
    return tuple(sorted(found, key=lambda s: (-len(s), s)))


# RE2's memory budget for one expression of every spelling: the DFA of some thousands of
# literals needs more than the default 8 MiB, below which RE2 falls back to its NFA (about
# 100 times slower) and logs every search. Taken as states are built, not up front (D360).
RE2_OPTIONS = re2.Options()
RE2_OPTIONS.max_mem = 256 << 20
# RE2 prints the start of a pattern it cannot compile to stderr, and these patterns are
# made of secrets: its error log is off (D427).
RE2_OPTIONS.log_errors = False


def compiled(pattern: bytes) -> Any:
    """`pattern` (an `alternation`, or several joined) compiled by RE2: linear in the text
    searched whatever the number of values, where `re` tries each literal at each byte."""
    return re2.compile(pattern, RE2_OPTIONS)


def alternation(secrets: Iterable[bytes]) -> bytes:
    """A regular expression (`re` and RE2 syntax) of every spelling of every secret; empty
    when there are none."""
    return b"|".join(re.escape(s) for s in literals(secrets))
