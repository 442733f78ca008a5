"""An attacker's spellings of a secret (D522-D523): what servers' HTML encoders write when
they echo a value, and what a JSON or form decoder reads out of a body the proxy holds.

Property tests draw the secret (biased to the characters each encoder touches), spell it
with the encoders themselves or as an attacker mixes them, cut the text at random, and
check the echo is masked and found, and the held body refused.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable

from hypothesis import example, given, settings
from hypothesis import strategies as st

from sandbox_egress.proxy.redact import Redactor
from sandbox_egress.proxy.spellings import alternation


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
