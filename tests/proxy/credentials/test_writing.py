"""What a request carries once its credentials are fetched (proxy/credentials/writing.py):
bindings, rendered transforms and deferred placeholders, and what the response redacts."""

from __future__ import annotations

import base64
from urllib.parse import quote

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox_egress.proxy.config import loader as config
from sandbox_egress.proxy.credentials.base import Fetched
from sandbox_egress.proxy.credentials.writing import needed, write
from sandbox_egress.proxy.decision import Decision
from sandbox_egress.proxy.values import placeholders
from sandbox_egress.proxy.values.secret import Secret
from sandbox_egress.proxy.values.swap import swap

TOKEN = "ghs_minted-token-1"
VALUES = {"gh": Fetched(Secret(TOKEN)), "other": Fetched(Secret("other-value-2"))}


def entry(body: str) -> config.Entry:
    text = (
        "credentials: {gh: {env: GH}, other: {env: OTHER},\n"
        "              aws: {aws: {access_key_id: AKIAREAL, secret_access_key: not-a-secret}}}\n"
        "network:\n  allowlist:\n    - domain: api.example\n" + body
    )
    return config.parse(yaml.safe_load(text), "e.yaml", {}).allowlist[0]


def fields(**headers: str) -> tuple[tuple[bytes, bytes], ...]:
    return tuple((k.replace("_", "-").encode(), v.encode()) for k, v in headers.items())


def test_bearer_replaces_the_sandboxs_authorization() -> None:
    allowed = Decision.allow(entry("      credential: {name: gh, as: bearer}\n"))
    plan = write(allowed, fields(Authorization="Bearer sandbox-own", Accept="*/*"), "/x", VALUES)
    assert plan.fields == ((b"Accept", b"*/*"), (b"Authorization", f"Bearer {TOKEN}".encode()))
    assert plan.injected == ("Authorization",)
    assert plan.redactions.header(f"echo {TOKEN}".encode()) == b"echo [redacted]"


def test_basic_is_base64_of_username_and_value_and_its_echo_is_redacted() -> None:
    allowed = Decision.allow(
        entry("      credential: {name: gh, as: basic, username: x-access-token}\n")
    )
    plan = write(allowed, (), "/x", VALUES)
    encoded = base64.b64encode(f"x-access-token:{TOKEN}".encode())
    assert plan.fields == ((b"Authorization", b"Basic " + encoded),)
    assert TOKEN.encode() not in plan.redactions.header(b"Basic " + encoded)


def test_header_binding_writes_the_named_header() -> None:
    allowed = Decision.allow(
        entry("      credential: {name: other, as: header, header: X-Api-Key}\n")
    )
    plan = write(allowed, fields(x_api_key="mine"), "/", VALUES)
    assert plan.fields == ((b"X-Api-Key", b"other-value-2"),)


def test_a_transform_template_is_rendered() -> None:
    allowed = Decision.allow(entry('      transform: {X-Auth: "token ${credential:other}"}\n'))
    assert needed(allowed.entry) == ("other",)  # type: ignore[arg-type]
    plan = write(allowed, (), "/", VALUES)
    assert plan.fields == ((b"X-Auth", b"token other-value-2"),)


def test_a_deferred_placeholder_is_left_by_the_swap_and_written_in_every_place() -> None:
    placeholder = "egress-placeholder-gh"
    e = entry(
        f'      secrets: [{{placeholder: {placeholder}, value: "${{credential:gh}}", in: [headers, query], require: true}}]\n'
    )
    allowed = Decision.allow(e)
    basic = b"Basic " + base64.b64encode(f"u:{placeholder}".encode())
    sent = ((b"Authorization", basic), (b"X-Other", placeholder.encode()))
    index = placeholders.index([e], lambda where, message: None, "e.yaml")
    first = swap(index, allowed, sent, f"/p?token={placeholder}", ("e.yaml", e.index))
    assert first.reason is None and first.fields is None  # found, not written: deferred
    plan = write(allowed, sent, f"/p?token={placeholder}", VALUES)
    assert dict(plan.fields)[b"Authorization"] == b"Basic " + base64.b64encode(
        f"u:{TOKEN}".encode()
    )
    assert dict(plan.fields)[b"X-Other"] == TOKEN.encode()
    assert plan.path == f"/p?token={TOKEN}"
    assert set(plan.injected) == {"Authorization", "X-Other", "query"}


def test_sigv4_is_not_written_here() -> None:
    e = entry(
        "      credential: {name: aws, as: sigv4, placeholder_access_key_id: AKIAEGRESSPLACEHOLDR,\n"
        "                   services: [s3], regions: [us-east-1]}\n"
    )
    assert needed(e) == ()
    assert (
        e.credential is not None
        and e.credential.sigv4["placeholder_access_key_id"] == "AKIAEGRESSPLACEHOLDR"
    )


TOKENS = st.text(
    alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=6, max_size=60
)


@settings(max_examples=150, deadline=None)
@given(token=TOKENS, as_=st.sampled_from(["bearer", "basic", "header"]))
def test_any_value_is_written_exactly_and_every_spelling_of_its_echo_is_redacted(
    token: str, as_: str
) -> None:
    binding = {"bearer": "{name: gh, as: bearer}", "basic": "{name: gh, as: basic, username: u}",
               "header": "{name: gh, as: header, header: X-Key}"}[as_]  # fmt: skip
    allowed = Decision.allow(entry(f"      credential: {binding}\n"))
    plan = write(allowed, fields(Authorization="Bearer own"), "/", {"gh": Fetched(Secret(token))})
    name, value = plan.fields[-1]
    basic = base64.b64encode(f"u:{token}".encode())
    expected = {"bearer": f"Bearer {token}".encode(), "basic": b"Basic " + basic,
                "header": token.encode()}[as_]  # fmt: skip
    assert value == expected
    kept = [b"Authorization"] if as_ == "header" else []  # a header binding leaves it
    assert [n for n, _ in plan.fields] == [*kept, name]
    for echo in (token.encode(), value, quote(token, safe="").encode()):
        assert token.encode() not in plan.redactions.header(b"echo " + echo)
    if as_ == "basic":
        assert basic not in plan.redactions.header(b"Basic " + basic)
