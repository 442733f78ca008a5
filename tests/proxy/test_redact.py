"""The pure redaction matchers: header spellings of an echo, the streaming body matcher,
and the refusal of echoing methods. Tables of named cases, then properties."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sandbox_egress.proxy.config.loader import Entry, PatternKind, Transform
from sandbox_egress.proxy.decision import Decision, Reason
from sandbox_egress.proxy.policy import refuse_echoing_method
from sandbox_egress.proxy.values.redact import NO_REDACTION, BodyMatcher, Redactor, mask
from sandbox_egress.proxy.values.secret import Secret

SECRET = "Zx9/k+Q=tok en"  # the bytes an encoder changes: / + = and a space
R = Redactor.build((SECRET.encode(),))


def b64(data: str, prefix: bytes = b"") -> str:
    return base64.b64encode(prefix + data.encode()).decode()


HEADER_ECHOES = {
    "exact": SECRET,
    "embedded": f"Bearer {SECRET};x",
    "upper case": SECRET.upper(),
    "lower case": SECRET.lower(),
    "percent, upper hex": quote(SECRET, safe=""),
    "percent, lower hex": quote(SECRET, safe="").lower(),
    "percent, slash kept": quote(SECRET),
    "form encoding": quote_plus(SECRET),
    "percent, every byte": "".join(f"%{b:02X}" for b in SECRET.encode()),
    "percent, twice": quote(quote(SECRET, safe=""), safe=""),
    "percent, then upper-cased": quote(SECRET, safe="").upper(),
    "json, escaped slash": json.dumps(SECRET).replace("/", "\\/"),
    "json, unicode escapes": "".join(f"\\u{b:04x}" for b in SECRET.encode()),
    "base64": b64(SECRET),
    "base64 unpadded": b64(SECRET).rstrip("="),
    "base64 urlsafe": base64.urlsafe_b64encode(SECRET.encode()).decode(),
    "location query": f"https://x.test/cb?t={quote(SECRET, safe='')}&n=1",
}


def _spell(byte: int, how: int) -> str:
    """One byte of an echo, spelled one of the ways an encoder may choose."""
    char = chr(byte)
    return [
        char,
        char.swapcase(),
        f"%{byte:02X}",
        f"%{byte:02x}",
        f"%25{byte:02X}",
        f"\\u{byte:04x}",
        "+" if char == " " else char,
    ][how]


# An encoder's family of spellings: a URL encoder (case kept or changed, %XX in either
# hex case, %25XX when applied twice, + for space) or a JSON encoder (\\u00XX).
FAMILIES = {"url": [0, 1, 2, 3, 6], "url, twice": [0, 4], "json": [0, 5]}


@settings(max_examples=300, deadline=None)
@given(
    secret=st.text(st.characters(min_codepoint=32, max_codepoint=126), min_size=6, max_size=40),
    family=st.sampled_from(sorted(FAMILIES)),
    choices=st.lists(st.integers(min_value=0, max_value=4), min_size=40, max_size=40),
    before=st.text(st.sampled_from("ab%;=/ "), max_size=8),
)
@example(secret="x%41yz\\\\0", family="url", choices=[2] * 40, before="")
def test_any_mix_of_one_encoder_spellings_of_the_secret_is_redacted(
    secret: str, family: str, choices: list[int], before: str
) -> None:
    spellings = FAMILIES[family]
    hows = [spellings[c % len(spellings)] for c in choices]
    if family == "url, twice":  # a URL encoder applied to an already encoded echo
        hows = [4 if h == 4 else 2 for h in hows]
    # What every encoder of the family must escape, it does: `%` in a URL; `\\` and `"` in JSON.
    must = {"url": b"%", "url, twice": b"%", "json": b'\\"'}[family]
    hows = [
        (4 if family == "url, twice" else 2 if family == "url" else 5) if b in must else h
        for b, h in zip(secret.encode(), hows, strict=False)
    ]
    echo = "".join(_spell(b, h) for b, h in zip(secret.encode(), hows, strict=False))
    out = Redactor.build((secret.encode(),)).header(f"{before}<{echo}>".encode())
    assert out.endswith(b"[redacted]>"), (echo, out)
    assert echo.encode() not in out


BASE64_EMBEDDED = {  # a secret 0, 1, 2 bytes into a 3-byte group of a longer encoding
    f"base64 at offset {n}": base64.b64encode(b"ab"[:n] + SECRET.encode() + b"xyz").decode()
    for n in range(3)
}


@pytest.mark.parametrize("echo", HEADER_ECHOES.values(), ids=HEADER_ECHOES.keys())
def test_every_plausible_spelling_of_an_echo_is_redacted(echo: str) -> None:
    out = R.header(f"<{echo}>".encode())
    assert out.count(b"[redacted]") == 1, out
    assert out.startswith(b"<"), out
    assert out.endswith(b">"), out
    for spelling in HEADER_ECHOES.values():
        assert spelling.encode() not in out


@pytest.mark.parametrize("encoded", BASE64_EMBEDDED.values(), ids=BASE64_EMBEDDED.keys())
def test_base64_inside_a_longer_text_keeps_only_the_boundary_characters(encoded: str) -> None:
    head, found, tail = R.header(encoded.encode()).partition(b"[redacted]")
    assert found, encoded
    # What stays: the neighbours' characters (at most 3 for "ab", 4 and padding for "xyz")
    # and, at each end, the one character that shares bits with them.
    assert encoded.encode().startswith(head)
    assert len(head) <= 3
    assert encoded.encode().endswith(tail)
    assert len(tail) <= 7


@pytest.mark.parametrize(
    "value",
    ["application/json", "Zx9/k+Q=tok", "Zx9%2Fk%2BQ%3Dtok%20eX", "Zx9_k+Q=tok en"],
    ids=["unrelated", "a prefix only", "a different last byte", "a different byte"],
)
def test_what_is_not_the_secret_passes_unchanged(value: str) -> None:
    assert R.header(value.encode()) == value.encode()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (f"a%zz{quote(SECRET, safe='')}%2", b"a%zz[redacted]%2"),
        ("x=Zx9%2Fk%2BQ%3Dtok+en", b"x=[redacted]"),
        ('{"t":"Zx9\\u002fk+Q\\u003dtok en"}', b'{"t":"[redacted]"}'),
        (f"{SECRET} and {quote(SECRET, safe='')}", b"[redacted] and [redacted]"),
    ],
    ids=["broken escapes around it", "percent and form", "json", "plain and encoded together"],
)
def test_escapes_are_decoded_without_disturbing_the_rest(value: str, expected: bytes) -> None:
    assert R.header(value.encode()) == expected


FIELDS_CASES = {
    "nothing to redact: the same tuple": (
        ((b"content-type", b"text/plain"), (b"x-id", b"Zx9/k+Q=tok")),
        ((b"content-type", b"text/plain"), (b"x-id", b"Zx9/k+Q=tok")),
    ),
    "one echo among others": (
        ((b"content-type", b"text/plain"), (b"x-echo", f"t {SECRET}".encode())),
        ((b"content-type", b"text/plain"), (b"x-echo", b"t [redacted]")),
    ),
    "an escaped echo (decoded before the search)": (
        ((b"location", f"/cb?t={quote(SECRET, safe='')}".encode()),),
        ((b"location", b"/cb?t=[redacted]"),),
    ),
    "a secret cut across two values is no echo": (
        ((b"a", SECRET[:6].encode()), (b"b", SECRET[6:].encode())),
        ((b"a", SECRET[:6].encode()), (b"b", SECRET[6:].encode())),
    ),
    "no fields": ((), ()),
}


@pytest.mark.parametrize(("fields", "expected"), FIELDS_CASES.values(), ids=FIELDS_CASES.keys())
def test_fields_redacts_each_value_and_keeps_a_clean_block_as_it_is(
    fields: tuple[tuple[bytes, bytes], ...], expected: tuple[tuple[bytes, bytes], ...]
) -> None:
    redacted = R.fields(fields)
    assert redacted == expected
    assert redacted == tuple((n, R.header(v)) for n, v in fields)
    if expected == fields:
        assert redacted is fields  # nothing copied or re-assigned (issue 36)
    assert NO_REDACTION.fields(fields) is fields


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(
        st.text(st.sampled_from(sorted(set(SECRET + "%\\u2F;ab"))), max_size=30), max_size=4
    )
)
def test_fields_is_header_applied_to_every_value(values: list[str]) -> None:
    fields = tuple((f"h{i}".encode(), v.encode()) for i, v in enumerate(values))
    assert R.fields(fields) == tuple((n, R.header(v)) for n, v in fields)


def test_no_secret_means_no_redaction() -> None:
    assert Redactor.build(()) is NO_REDACTION
    assert not NO_REDACTION
    assert NO_REDACTION.header(b"anything") == b"anything"


def test_longer_secret_wins_over_its_own_prefix() -> None:
    r = Redactor.build((b"abcdef", b"abcdefghij"))
    assert r.secrets == (b"abcdefghij", b"abcdef")
    assert r.header(b"x abcdefghij y abcdef") == b"x [redacted] y [redacted]"


def test_the_redactor_does_not_show_its_secrets() -> None:
    assert SECRET not in repr(R)
    assert SECRET not in str(R)


@pytest.mark.parametrize(("length", "expected"), [(6, b"******"), (10, b"[redacted]")])
def test_mask_has_the_secret_length(length: int, expected: bytes) -> None:
    assert mask(length) == expected
    assert len(mask(23)) == 23
    assert mask(23).startswith(b"[redacted")


BODY_CASES = {
    "one chunk": ([b"a SECRET-1 b"], b"a ******** b"),
    "split in two": ([b"a SECR", b"ET-1 b"], b"a ******** b"),
    "one byte per chunk": ([bytes([c]) for c in b"xSECRET-1y"], b"x********y"),
    "two occurrences across three chunks": (
        [b"SECRET-1SEC", b"RET", b"-1!"],
        b"****************!",
    ),
    "a prefix at the end is flushed": ([b"ok SECRET-"], b"ok SECRET-"),
    "nothing": ([], b""),
}


@pytest.mark.parametrize(("chunks", "expected"), BODY_CASES.values(), ids=BODY_CASES.keys())
def test_body_matcher_replaces_across_chunk_boundaries(
    chunks: list[bytes], expected: bytes
) -> None:
    matcher = Redactor.build((b"SECRET-1",)).body()
    out = [piece for c in [*chunks, b""] for piece in matcher(c)]
    assert b"".join(out) == expected
    assert b"" not in out  # an empty piece would end an HTTP/1 chunked body


def test_body_matcher_holds_back_at_most_the_longest_secret_minus_one() -> None:
    matcher = BodyMatcher((b"0123456789",))
    for _ in range(50):
        assert len(matcher.feed(b"x" * 91 + b"012345678")) >= 91
    assert len(matcher.feed(b"")) == 9


HELD_CASES = {
    # (chunk, what goes out now, what is held for the next chunk)
    "an SSE event: nothing of it can begin the secret": (
        b'data: {"delta": "token "}\n\n',
        b'data: {"delta": "token "}\n\n',
        b"",
    ),
    "a tail that begins the secret": (b"abc 01234", b"abc ", b"01234"),
    "the first byte only": (b"abc 0", b"abc ", b"0"),
    "the secret's first byte, not followed by its second": (b"abc 0x", b"abc 0x", b""),
    "a longer tail than the secret could start": (
        b"x" * 20 + b"012345678",
        b"x" * 20,
        b"012345678",
    ),
}


@pytest.mark.parametrize(("chunk", "now", "held"), HELD_CASES.values(), ids=HELD_CASES.keys())
def test_body_matcher_holds_only_a_tail_that_begins_a_secret(
    chunk: bytes, now: bytes, held: bytes
) -> None:
    """A streamed event goes out whole at once unless its end could begin a secret
    (issue 36: each SSE event used to wait for the next)."""
    matcher = BodyMatcher((b"0123456789",))
    assert matcher.feed(chunk) == now
    assert matcher.feed(b"") == held


@settings(max_examples=300, deadline=None)
@given(
    secrets=st.lists(
        st.text("ab\n", min_size=1, max_size=8).map(str.encode), min_size=1, max_size=3
    ),
    parts=st.lists(st.sampled_from([b"a", b"ab", b"b", b"\n", b"abc", b"ba"]), max_size=40),
    cuts=st.lists(st.integers(min_value=0, max_value=120), max_size=12),
)
def test_any_chunking_with_secrets_sharing_prefixes_gives_the_whole_body_answer(
    secrets: list[bytes], parts: list[bytes], cuts: list[int]
) -> None:
    body = b"".join(parts)
    ordered = tuple(sorted(set(secrets), key=lambda s: (-len(s), s)))
    whole = BodyMatcher(ordered)
    expected = whole.feed(body) + whole.feed(b"")
    bounds = sorted({min(c, len(body)) for c in cuts} | {0, len(body)})
    split = BodyMatcher(ordered)
    out = b"".join(split.feed(body[a:b]) for a, b in zip(bounds, bounds[1:], strict=False))
    assert out + split.feed(b"") == expected


@settings(max_examples=300, deadline=None)
@given(
    secret=st.binary(min_size=6, max_size=40),
    filler=st.binary(max_size=300),
    offsets=st.lists(st.integers(min_value=0, max_value=300), max_size=4),
    cuts=st.lists(st.integers(min_value=0, max_value=500), max_size=12),
)
@example(secret=b"aaaaaa", filler=b"aaaaa", offsets=[0, 2], cuts=[1, 7])
def test_any_chunking_of_a_body_gives_the_whole_body_replacement(
    secret: bytes, filler: bytes, offsets: list[int], cuts: list[int]
) -> None:
    body = filler
    for at in sorted(offsets, reverse=True):
        at = min(at, len(body))
        body = body[:at] + secret + body[at:]
    bounds = sorted({min(c, len(body)) for c in cuts} | {0, len(body)})
    chunks = [body[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    matcher = Redactor.build((secret,)).body()
    out = b"".join(piece for c in [*chunks, b""] for piece in matcher(c))
    assert out == body.replace(secret, mask(len(secret)))
    # Any mask can be read back as a secret made of the mask's own bytes and the bytes
    # around it (b"\0" * 9 + b"[" after b"\0" * 9): that shows nothing the body did not.
    if not set(secret) & set(mask(len(secret))):
        assert secret not in out
    assert len(out) == len(body)


@settings(max_examples=200, deadline=None)
@given(
    secrets=st.lists(st.binary(min_size=6, max_size=20), min_size=2, max_size=3, unique=True),
    body=st.binary(max_size=200),
    cut=st.integers(min_value=0, max_value=400),
)
def test_several_secrets_stream_as_they_replace_in_one_piece(
    secrets: list[bytes], body: bytes, cut: int
) -> None:
    body = secrets[0] + body + b"".join(secrets)
    whole = Redactor.build(tuple(secrets)).body()
    expected = whole.feed(body) + whole.feed(b"")
    split = Redactor.build(tuple(secrets)).body()
    cut = min(cut, len(body))
    assert split.feed(body[:cut]) + split.feed(body[cut:]) + split.feed(b"") == expected


def _transform_entry() -> Entry:
    return Entry(
        0,
        "api.test",
        PatternKind.EXACT,
        name="api.test",
        transform=(Transform("X-Key", Secret("tok-123456", ())),),
    )


@pytest.mark.parametrize(
    ("method", "transform", "reason"),
    [
        ("TRACE", True, Reason.METHOD_NOT_ALLOWED),
        ("trace", True, Reason.METHOD_NOT_ALLOWED),
        ("TRACK", True, Reason.METHOD_NOT_ALLOWED),
        ("GET", True, Reason.ALLOWLISTED),
        ("TRACE", False, Reason.ALLOWLISTED),
    ],
)
def test_echoing_methods_are_refused_only_to_transform_hosts(
    method: str, transform: bool, reason: Reason
) -> None:
    entry = _transform_entry() if transform else Entry(0, "api.test", PatternKind.EXACT)
    decided = refuse_echoing_method(Decision.allow(entry), method)
    assert decided.reason is reason
    assert decided.entry is entry


def test_an_echoing_method_does_not_turn_a_refusal_into_another() -> None:
    refused = Decision.deny(Reason.NOT_ALLOWLISTED)
    assert refuse_echoing_method(refused, "TRACE") is refused


def test_a_body_matcher_per_response_shares_its_sets_tables() -> None:
    """The spellings' order, escape tables and first-byte index are made once per set of
    spellings, not per response (issue 49: 44 µs per response before, 6 % of a
    kept-alive request's CPU); each matcher keeps only its own carry."""
    redactor = Redactor.build((b"Bearer sk-live-0123456789abcdef",))
    one, two = redactor.body(), redactor.body()
    assert one._every is two._every and one._starting is two._starting
    assert one.feed(b"x Bearer sk-live-0123") == b"x "  # a carry of its own ...
    assert two.feed(b"y") == b"y"  # ... which the other does not see
    value = b"Bearer sk-live-0123456789abcdef"
    assert one.feed(b"456789abcdef z") + one.feed(b"") == mask(len(value)) + b" z"
