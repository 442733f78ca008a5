"""An attacker's spellings of a secret (D522-D523): what servers' HTML encoders write when
they echo a value, and what a JSON or form decoder reads out of a body the proxy holds.

Property tests draw the secret (biased to the characters each encoder touches), spell it
with the encoders themselves or as an attacker mixes them, cut the text at random, and
check the echo is masked and found, and the held body refused.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote_to_bytes

from hypothesis import example, given, settings
from hypothesis import strategies as st

from sandbox_egress.proxy.values.redact import Redactor
from sandbox_egress.proxy.values.spellings import alternation, compiled
from sandbox_egress.proxy.values.swap import held_in


def _entities(quot: str, apos: str) -> Callable[[str], str]:
    def escape(text: str) -> str:
        out = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        return out.replace('"', quot).replace("'", apos)

    return escape


# (name, how a server's HTML template writes a value into a page)
HTML_ESCAPERS: dict[str, Callable[[str], str]] = {
    "Python html.escape, Django": html.escape,
    "Python html.escape(quote=False)": lambda v: html.escape(v, quote=False),
    "Jinja2/markupsafe, Go html/template, Ruby ERB, lodash": _entities("&#34;", "&#39;"),
    "PHP htmlspecialchars": _entities("&quot;", "&#039;"),
    "PHP ENT_HTML5, XML": _entities("&quot;", "&apos;"),
    "Spring HtmlUtils, escape-html": _entities("&quot;", "&#39;"),
}

_SPECIAL = st.sampled_from(list("&<>\"'"))
_PLAIN = st.characters(codec="utf-8", exclude_categories=("Cs", "Cc"))
_SECRETS = st.lists(st.one_of(_SPECIAL, _PLAIN), min_size=7, max_size=40).map("".join)
_FILLER = st.binary(max_size=60).map(lambda b: bytes(0x61 + c % 20 for c in b))


def _masked(redactor: Redactor, body: bytes, cuts: list[int]) -> bytes:
    matcher = redactor.body()
    bounds = sorted({min(c, len(body)) for c in cuts} | {0, len(body)})
    chunks = [body[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    return b"".join(piece for c in [*chunks, b""] for piece in matcher(c))


@settings(max_examples=300, deadline=None)
@given(
    secret=_SECRETS,
    escaper=st.sampled_from(list(HTML_ESCAPERS.values())),
    before=_FILLER,
    after=_FILLER,
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8),
)
@example(secret="p&ss<w>rd\"'0123", escaper=html.escape, before=b"", after=b"", cuts=[5])
def test_an_html_escaped_echo_is_masked_and_found(
    secret: str,
    escaper: Callable[[str], str],
    before: bytes,
    after: bytes,
    cuts: list[int],
) -> None:
    """D522: an HTML page echoing an injected value writes `&amp;`, `&#39;`..."""
    spelled = escaper(secret).encode()
    body = before + spelled + after
    redactor = Redactor.build((secret.encode(),))
    out = _masked(redactor, body, cuts)
    assert len(out) == len(body)
    assert spelled not in out
    assert out[: len(before)] == before and out[len(body) - len(after) :] == after
    assert re.search(alternation(redactor.secrets), spelled) is not None  # secret_elsewhere
    if "%" not in secret and "\\" not in secret:  # a header is decoded first (D30)
        assert redactor.header(b"x " + spelled + b" y").count(b"[redacted]") >= 1


# -- a body the proxy holds, as its server decodes it (D523) ------------------------------


def _searcher(secret: str) -> Any:
    return compiled(alternation([secret.encode()]))


def _json_mixed(text: str, picks: list[int]) -> str:
    """`text` as a JSON string an attacker writes: the characters `picks` names escaped
    (`\\uXXXX` in either case, a short escape where JSON has one), the others as they are."""
    shorts = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\n": "\\n", "\t": "\\t"}
    out = []
    for i, char in enumerate(text):
        pick = picks[i % len(picks)] if picks else 0
        if char in '"\\' or ord(char) < 0x20:
            out.append(shorts.get(char, f"\\u{ord(char):04x}"))
        elif pick == 0:
            out.append(char)
        elif pick == 1 and char in shorts:
            out.append(shorts[char])
        else:
            units = char.encode("utf-16-be")
            hexes = "\\u%04X" if pick == 2 else "\\u%04x"
            out.append(
                "".join(hexes % int.from_bytes(units[j : j + 2]) for j in (0, 2)[: len(units) // 2])
            )
    return "".join(out)


@settings(max_examples=300, deadline=None)
@given(
    secret=st.text(_PLAIN, min_size=7, max_size=40),
    picks=st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=9),
)
@example(secret="s3cr3t-e2e-0123", picks=[0, 3])
def test_a_value_in_a_held_json_body_is_found_however_its_characters_are_escaped(
    secret: str, picks: list[int]
) -> None:
    body = '{"arguments": {"q": "' + _json_mixed(secret, picks) + '"}}'
    assert json.loads(body)["arguments"]["q"] == secret  # what the server reads
    assert held_in([_searcher(secret)], body.encode())


@settings(max_examples=200, deadline=None)
@given(secret=st.text(_PLAIN, min_size=7, max_size=40), mask=st.lists(st.booleans(), min_size=1))
def test_a_value_in_a_held_form_body_is_found_with_any_bytes_percent_encoded(
    secret: str, mask: list[bool]
) -> None:
    raw = secret.encode()
    written = b"".join(
        b"%%%02X" % b if mask[i % len(mask)] else bytes([b]) for i, b in enumerate(raw)
    )
    assert unquote_to_bytes(written) == raw
    assert held_in([_searcher(secret)], b"Action=Send&MessageBody=" + written + b"&V=1")


def test_a_held_body_with_an_escaped_backslash_is_read_as_json_reads_it() -> None:
    """`\\\\u0041` is a backslash, then text: decoded as one JSON decoder would."""
    searcher = _searcher("A\\u0041-secret")
    assert held_in([searcher], b'{"q": "A\\\\u0041-secret"}')
    assert not held_in([_searcher("AA-secret0")], b'{"q": "\\\\u0041A-secret0"}')


def test_a_field_named_after_a_secret_is_dropped_from_headers_and_trailers() -> None:
    """D527: a name cannot hold `[redacted]`; the field goes, the others stay as they are."""
    redactor = Redactor.build((b"tok-0123456789",))
    fields = ((b"X-Echo-tok-0123456789", b"1"), (b"X-TOK-0123456789-b", b"2"), (b"X-Ok", b"3"))
    assert redactor.fields(fields) == ((b"X-Ok", b"3"),)
    assert redactor.fields(((b"X-Ok", b"3"),)) == ((b"X-Ok", b"3"),)
