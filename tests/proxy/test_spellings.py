"""Every spelling of a secret, found wherever the proxy looks (issue 43, D360-D363):
echo redaction of a streamed body (`proxy.redact.BodyMatcher`), `secret_elsewhere`
(`proxy.values.swap`, through `decide_request`), the placeholder access key id of a `sigv4`
binding (`placeholder_elsewhere`), and the audit's path (`proxy.audit.masked`).

The spellings under test are made here by the encoders a server or a client uses
(`urllib.parse`, `json`, `base64`, a Go-style and a PHP-style JSON encoder), never by
`proxy.values.spellings`: the table is checked against the encoders, not against itself.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
from collections.abc import Callable
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sandbox_egress.proxy.config.loader import parse
from sandbox_egress.proxy.decision import Reason
from sandbox_egress.proxy.hosts import IPAddress, canonical_host
from sandbox_egress.proxy.policy import Policy
from sandbox_egress.proxy.stages import ConnectionFacts, RequestAsk, decide_request
from sandbox_egress.proxy.targets import RequestNames
from sandbox_egress.proxy.values.redact import Redactor
from sandbox_egress.proxy.values.spellings import alternation

VALUE = "real/echo+key=ok 0123456789~é"
AKID = "AKIAEGRESSPLACEHOLDR"
KEY = "sk-egress-placeholder-spell"


def _json_go(text: str) -> str:
    """Go's encoding/json: HTML-safe, `/` as it is, non-ASCII as UTF-8."""
    out = json.dumps(text, ensure_ascii=False)[1:-1]
    for char in "<>&":
        out = out.replace(char, f"\\u{ord(char):04x}")
    return out


def _json_php(text: str) -> str:
    """PHP's json_encode: `\\/`, non-ASCII as `\\uXXXX`."""
    return json.dumps(text)[1:-1].replace("/", "\\/")


def _json_upper(text: str) -> str:
    """Every character JSON escapes as `\\u00XX`, upper-case hex (Jackson's style)."""
    escaped = '"\\/' + "".join(map(chr, range(0x20)))
    return "".join(f"\\u{ord(c):04X}" if c in escaped else c for c in text)


def _b64_in(prefix: bytes, secret: bytes, urlsafe: bool, pad: bool) -> str:
    encode = base64.urlsafe_b64encode if urlsafe else base64.b64encode
    text = encode(prefix + secret + b"tail").decode()
    return text if pad else text.rstrip("=")


# (name, how a text holding the secret spells it)
ENCODERS: dict[str, Callable[[str], str]] = {
    "raw": lambda v: v,
    "percent, Python quote(safe='')": lambda v: quote(v, safe=""),
    "percent, lower-case hex": lambda v: re.sub(
        "%[0-9A-F]{2}", lambda m: m.group().lower(), quote(v, safe="")
    ),
    "percent, quote()": quote,
    "percent, quote_plus": quote_plus,
    "percent, every byte": lambda v: "".join(f"%{b:02X}" for b in v.encode()),
    "base64 standard, padded": lambda v: base64.b64encode(v.encode()).decode(),
    "base64 standard, unpadded": lambda v: base64.b64encode(v.encode()).decode().rstrip("="),
    "base64 URL-safe": lambda v: base64.urlsafe_b64encode(v.encode()).decode(),
    "base64 inside a longer text, offset 1": lambda v: _b64_in(b"x", v.encode(), False, True),
    "base64 inside a longer text, offset 2": lambda v: _b64_in(b"xy", v.encode(), True, False),
    "HTTP Basic": lambda v: "Basic " + base64.b64encode(f"someone:{v}".encode()).decode(),
    "JSON, Python": lambda v: json.dumps(v)[1:-1],
    "JSON, Python ensure_ascii=False": lambda v: json.dumps(v, ensure_ascii=False)[1:-1],
    "JSON, PHP (\\/)": _json_php,
    "JSON, Go (HTML-safe)": _json_go,
    "JSON, \\u00XX upper-case": _json_upper,
    "JSON, \\u002f": lambda v: json.dumps(v)[1:-1].replace("/", "\\u002f"),
}


def _redactor() -> Redactor:
    return Redactor.build((VALUE.encode(),))


def _masked_body(body: bytes, cuts: list[int]) -> bytes:
    matcher = _redactor().body()
    bounds = sorted({min(c, len(body)) for c in cuts} | {0, len(body)})
    chunks = [body[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    return b"".join(piece for c in [*chunks, b""] for piece in matcher(c))


def _still_there(secret: bytes, spelled: bytes, text: bytes) -> bool:
    """Whether `text` still shows the secret: the spelling, or, decoded from any run of
    base64 characters at any offset, the secret but its first and last byte (which share
    a character with their neighbours)."""
    if spelled in text:
        return True
    for run in re.findall(rb"[A-Za-z0-9+/_-]{4,}", text):
        for start in range(4):
            usable = run[start:][: (len(run) - start) // 4 * 4]
            decoded = base64.b64decode(usable.translate(bytes.maketrans(b"-_", b"+/")))
            if secret[1:-1] in decoded:
                return True
    return False


@pytest.mark.parametrize("encode", ENCODERS.values(), ids=ENCODERS.keys())
def test_an_echo_in_a_streamed_body_is_masked_in_every_spelling(
    encode: Callable[[str], str],
) -> None:
    spelled = encode(VALUE).encode()
    body = b'data: {"echo": "' + spelled + b'"}\n\n'
    out = _masked_body(body, [len(body) // 2, len(body) // 2 + 3])
    assert len(out) == len(body)
    assert not _still_there(VALUE.encode(), spelled, out), out
    assert out.startswith(b'data: {"echo": "') and out.endswith(b'"}\n\n')


def test_an_echo_split_across_server_sent_events_is_masked() -> None:
    """An upstream that flushes each event: the value's bytes end one write and begin the
    next; the first event goes out at once up to where the value could begin."""
    spelled = _json_php(VALUE).encode()
    first, second = b"data: a\n\ndata: " + spelled[:9], spelled[9:] + b"\n\ndata: b\n\n"
    matcher = _redactor().body()
    now = matcher.feed(first)
    assert now == b"data: a\n\ndata: "
    out = now + matcher.feed(second) + matcher.feed(b"")
    assert spelled not in out and len(out) == len(first + second)
    assert out.endswith(b"\n\ndata: b\n\n")


# -- secret_elsewhere and the placeholder access key id --------------------------------

_CONFIG = {
    "credentials": {
        "aws-prod": {
            "aws": {"access_key_id": "AKIAREALKEY000000000", "secret_access_key": "${AWS_SECRET}"}
        }
    },
    "network": {
        "allowlist": [
            {"domain": "api.test", "secrets": [{"placeholder": KEY, "value": "${VALUE}"}]},
            {
                "domain": "*.amazonaws.test",
                "credential": {
                    "name": "aws-prod",
                    "as": "sigv4",
                    "placeholder_access_key_id": AKID,
                    "services": ["s3"],
                    "regions": ["us-east-1"],
                },
            },
            {"domain": "other.test"},
            {"domain": "tr.test", "transform": {"X-Key": "${TOKEN}"}},
            {"domain": "*.wild.test"},
        ]
    },
}
TOKEN = "tok0dns0label0value0123"
POLICY = Policy(
    parse(_CONFIG, "env.yaml", {"VALUE": VALUE, "AWS_SECRET": "x" * 40, "TOKEN": TOKEN})
)


async def _resolve(name: str, port: int) -> list[IPAddress]:
    return [canonical_host("93.184.216.34").ip]  # type: ignore[list-item]


def _decide(
    host: str, path: str = "/", *fields: tuple[bytes, bytes], host_field: bool = True
) -> Reason:
    """`host_field` False: an HTTP/2 request, whose `:authority` is no header field."""
    names = RequestNames(False, host, 443, host, None, True, None, path=path)
    sent = ((b"Host", host.encode()),) if host_field else ()
    ask = RequestAsk(b"GET", (*sent, *fields), names, True)
    answer = asyncio.run(decide_request(POLICY, _resolve, ConnectionFacts(), ask))
    return answer.decision.reason


@pytest.mark.parametrize("encode", ENCODERS.values(), ids=ENCODERS.keys())
def test_a_value_in_a_header_in_any_spelling_is_secret_elsewhere(
    encode: Callable[[str], str],
) -> None:
    assert _decide("other.test", "/", (b"X-Leak", encode(VALUE).encode())) is (
        Reason.SECRET_ELSEWHERE
    )


def test_a_value_in_a_header_name_is_secret_elsewhere() -> None:
    """D521: a field's name reaches an HTTP/1 upstream as it was sent."""
    assert _decide("other.test", "/", (b"X-" + TOKEN.encode(), b"1")) is Reason.SECRET_ELSEWHERE
    assert _decide("other.test", "/", (b"X-Tok0dns", b"1")) is Reason.ALLOWLISTED


@pytest.mark.parametrize("encode", ENCODERS.values(), ids=ENCODERS.keys())
def test_a_value_in_the_target_in_any_spelling_is_secret_elsewhere(
    encode: Callable[[str], str],
) -> None:
    spelled = quote(encode(VALUE), safe="/%+=~")  # as a client writes it into a target
    assert _decide("other.test", f"/x?q={spelled}") is Reason.SECRET_ELSEWHERE


def test_a_value_in_the_host_name_of_an_http2_request_is_secret_elsewhere() -> None:
    assert _decide(f"{TOKEN}.wild.test", host_field=False) is Reason.SECRET_ELSEWHERE
    assert _decide("api.wild.test", host_field=False) is Reason.ALLOWLISTED


def _aws_auth(akid: str) -> bytes:
    return (
        f"AWS4-HMAC-SHA256 Credential={akid}/20261204/us-east-1/s3/aws4_request, "
        "SignedHeaders=host;x-amz-date, Signature=" + "0" * 64
    ).encode()


AKID_CASES = {
    "in an Authorization to another host": (
        "other.test", "/", (b"Authorization", _aws_auth(AKID)), Reason.PLACEHOLDER_ELSEWHERE),
    "in a presigned URL to another host": (
        "other.test", f"/o?X-Amz-Credential={AKID}%2F20261204%2Fus-east-1%2Fs3%2Faws4_request",
        None, Reason.PLACEHOLDER_ELSEWHERE),
    "to a host no entry allows": (
        "evil.test", "/", (b"X-Key", AKID.encode()), Reason.PLACEHOLDER_ELSEWHERE),
    "to its own entry": (
        "bkt.s3.amazonaws.test", "/k", (b"Authorization", _aws_auth(AKID)), Reason.ALLOWLISTED),
}  # fmt: skip


@pytest.mark.parametrize(
    ("host", "path", "field", "reason"), AKID_CASES.values(), ids=AKID_CASES.keys()
)
def test_the_placeholder_access_key_id_is_a_placeholder(
    host: str, path: str, field: tuple[bytes, bytes] | None, reason: Reason
) -> None:
    assert _decide(host, path, *([field] if field else [])) is reason


# -- the audit: a value the sandbox sent is never written -----------------------------

SEARCH = POLICY.placeholders().values


@pytest.mark.parametrize("encode", ENCODERS.values(), ids=ENCODERS.keys())
def test_the_audit_masks_a_value_in_the_path_in_any_spelling(
    encode: Callable[[str], str],
) -> None:
    from sandbox_egress.proxy.audit.log import SECRET_MASK, masked

    spelled = quote(encode(VALUE), safe="/%+=~")
    written = masked(f"/a/{spelled}/b", (SEARCH,))
    assert SECRET_MASK in written
    assert not _still_there(VALUE.encode(), spelled.encode(), written.encode())
    assert written.startswith("/a/") or written == SECRET_MASK


def test_the_audit_record_masks_host_sni_and_path() -> None:
    from sandbox_egress.proxy.audit.log import AuditRecord, masked_record

    record = AuditRecord(
        "198.18.0.2:1", "GET", "https", f"{TOKEN}.wild.test", 443, "deny",
        "secret_elsewhere", None, (), 403, 0, 0, 0.1, sni=f"{TOKEN}.wild.test",
        path=f"/{quote(TOKEN)}/x",
    )  # fmt: skip
    written = masked_record(record, (SEARCH,))
    assert (written.host, written.sni, written.path) == (
        "[secret].wild.test", "[secret].wild.test", "/[secret]/x",
    )  # fmt: skip
    clean = AuditRecord("c", "GET", "https", "h.test", 443, "allow", "allowlisted", None, (),
                        200, 0, 0, 0.1, path="/x")  # fmt: skip
    assert masked_record(clean, (SEARCH,)) is clean


def test_the_audit_keeps_a_path_without_a_value_as_it_is() -> None:
    from sandbox_egress.proxy.audit.log import masked

    assert masked("/a/real/echo%2Bkey?x=1", (SEARCH, None)) == "/a/real/echo%2Bkey?x=1"


# -- properties: random secrets, spellings and chunk splits ---------------------------

# Secrets of 7 bytes or more (the shortest whose base64 holds 8 characters of its own
# at every alignment); the filler is control bytes, which no secret here holds and no
# spelling writes.
_SECRET_CHARS = st.characters(codec="utf-8", exclude_categories=("Cs", "Cc"))
_FILLER = st.binary(max_size=80).map(lambda b: bytes(1 + c % 8 for c in b))
_SPELLERS = list(ENCODERS.values())


@settings(max_examples=300, deadline=None)
@given(
    secret=st.text(_SECRET_CHARS, min_size=7, max_size=40),
    speller=st.sampled_from(_SPELLERS),
    before=_FILLER,
    after=_FILLER,
    cuts=st.lists(st.integers(min_value=0, max_value=600), max_size=8),
)
@example(secret="a/b/c/d", speller=_json_php, before=b"", after=b"", cuts=[3])
def test_any_secret_in_any_spelling_and_any_chunking_is_masked_and_found(
    secret: str, speller: Callable[[str], str], before: bytes, after: bytes, cuts: list[int]
) -> None:
    spelled = speller(secret).encode()
    body = before + spelled + after
    redactor = Redactor.build((secret.encode(),))
    matcher = redactor.body()
    bounds = sorted({min(c, len(body)) for c in cuts} | {0, len(body)})
    out = b"".join(
        piece
        for c in [*(body[a:b] for a, b in zip(bounds, bounds[1:], strict=False)), b""]
        for piece in matcher(c)
    )
    assert len(out) == len(body)
    assert out[: len(before)] == before and out[len(body) - len(after) :] == after
    assert not _still_there(secret.encode(), spelled, out)
    assert _detected(redactor, spelled)


def _detected(redactor: Redactor, text: bytes) -> bool:
    """What the `secret_elsewhere` search finds (`proxy.placeholders.index`'s expression)."""
    return re.search(alternation(redactor.secrets), text) is not None


@settings(max_examples=300, deadline=None)
@given(
    secret=st.text(_SECRET_CHARS, min_size=6, max_size=40),
    body=st.binary(max_size=300),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8),
)
def test_a_body_without_the_secret_passes_unchanged_however_it_is_cut(
    secret: str, body: bytes, cuts: list[int]
) -> None:
    redactor = Redactor.build((secret.encode(),))
    if _detected(redactor, body):
        return  # the random body spells it: not this property's case
    matcher = redactor.body()
    bounds = sorted({min(c, len(body)) for c in cuts} | {0, len(body)})
    out = b"".join(
        piece
        for c in [*(body[a:b] for a, b in zip(bounds, bounds[1:], strict=False)), b""]
        for piece in matcher(c)
    )
    assert out == body


def test_a_log_line_quoting_a_value_is_masked() -> None:
    """The filter the launcher puts on mitmproxy's and `egress`'s handlers (D363)."""
    import logging

    from sandbox_egress.common.logs import MaskedValues
    from sandbox_egress.proxy.audit.log import masked

    record = logging.LogRecord("egress", logging.WARNING, __file__, 1, "%s: refused", None, None)
    record.args = (f"{TOKEN}.wild.test",)
    assert MaskedValues(lambda text: masked(text, (SEARCH,))).filter(record)
    assert record.getMessage() == "[secret].wild.test: refused"


@settings(max_examples=300, deadline=None)
@given(
    token=st.binary(min_size=7, max_size=12),
    around=st.lists(st.binary(min_size=1, max_size=6), min_size=1, max_size=3),
    parts=st.lists(st.integers(min_value=0, max_value=6), max_size=12),
    filler=st.binary(max_size=6),
    cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=10),
)
def test_a_value_holding_another_is_masked_as_if_every_spelling_were_searched(
    token: bytes, around: list[bytes], parts: list[int], filler: bytes, cuts: list[int]
) -> None:
    """D361: the matcher searches the token's spellings first and every spelling only
    around what it finds; however the body is cut, the answer is that of searching every
    spelling of every value (`Bearer ${TOKEN}` is masked whole, its token alone too)."""
    from sandbox_egress.proxy.values.redact import BodyMatcher
    from sandbox_egress.proxy.values.spellings import literals

    values = (token, around[0] + token, token + around[-1])
    pieces = [*values, *(v.hex().encode() for v in values), filler]
    body = b"".join(pieces[p % len(pieces)] for p in parts)
    reference = BodyMatcher(literals(values, every=True))
    expected = reference.feed(body) + reference.feed(b"")
    matcher = Redactor.build(values).body()
    bounds = sorted({min(c, len(body)) for c in cuts} | {0, len(body)})
    out = b"".join(matcher.feed(body[a:b]) for a, b in zip(bounds, bounds[1:], strict=False))
    assert out + matcher.feed(b"") == expected


def test_a_matcher_of_no_spelling_passes_every_byte() -> None:
    from sandbox_egress.proxy.values.redact import NO_REDACTION

    matcher = NO_REDACTION.body()
    assert matcher.feed(b"any body") + matcher.feed(b"") == b"any body"
