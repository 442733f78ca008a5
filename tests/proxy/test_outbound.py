"""What an allowed request takes upstream (proxy/outbound.py): hop-by-hop fields per
RFC 9110 §7.6.1, spellings of an injected name, and the encoding of an injected answer."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandbox_egress.proxy.outbound import encoded_answer, outbound_fields, unasked_switch

H = list[tuple[str, str]]


def run(fields: H, injected: tuple[str, ...] = (), websocket: bool = False) -> H:
    raw = tuple((n.encode(), v.encode()) for n, v in fields)
    return [(n.decode(), v.decode()) for n, v in outbound_fields(raw, injected, websocket)]


HOST = [("Host", "api.test")]

CASES: list[tuple[str, H, tuple[str, ...], bool, H]] = [
    ("plain-request-untouched", [*HOST, ("Accept", "*/*")], (), False, [*HOST, ("Accept", "*/*")]),
    ("proxy-authorization", [*HOST, ("Proxy-Authorization", "Basic eDp5")], (), False, HOST),
    ("proxy-connection", [*HOST, ("Proxy-Connection", "keep-alive")], (), False, HOST),
    ("any-proxy-field", [*HOST, ("proxy-foo", "1")], (), False, HOST),
    ("keep-alive", [*HOST, ("Keep-Alive", "timeout=5")], (), False, HOST),
    (
        "connection-names-authorization",  # D36's finding: the client removes nothing upstream
        [
            *HOST,
            ("Connection", "Authorization, X-Private"),
            ("Authorization", "a"),
            ("X-Private", "p"),
        ],
        (),
        False,
        HOST,
    ),
    (
        "connection-close-kept-for-mitmproxy",
        [*HOST, ("Connection", "close, X-Gone"), ("X-Gone", "1")],
        (),
        False,
        [*HOST, ("Connection", "close")],
    ),
    (
        "connection-cannot-remove-framing",
        [*HOST, ("Connection", "Content-Length, Host"), ("Content-Length", "3")],
        (),
        False,
        [*HOST, ("Content-Length", "3")],
    ),
    ("te-trailers-kept", [*HOST, ("TE", "gzip, Trailers")], (), False, [*HOST, ("TE", "trailers")]),
    ("te-other-removed", [*HOST, ("TE", "gzip")], (), False, HOST),
    (
        "upgrade-h2c-removed",
        [*HOST, ("Connection", "Upgrade"), ("Upgrade", "h2c")],
        (),
        False,
        HOST,
    ),
    (
        "upgrade-websocket-kept",
        [*HOST, ("Connection", "keep-alive, Upgrade"), ("Upgrade", "websocket")],
        (),
        True,
        [*HOST, ("Upgrade", "websocket"), ("Connection", "keep-alive, Upgrade")],
    ),
    (
        "injected-name-variants-removed",
        [
            *HOST,
            ("X_Tenant", "evil"),
            ("x-tenant", "evil"),
            ("X-TENANT", "evil"),
            ("X-Tenantx", "ok"),
        ],
        ("X-Tenant",),
        False,
        [*HOST, ("X-Tenantx", "ok"), ("Accept-Encoding", "identity")],
    ),
    (
        "injected-request-asks-identity",
        [*HOST, ("Accept-Encoding", "gzip, br"), ("accept-encoding", "zstd")],
        ("Authorization",),
        False,
        [*HOST, ("Accept-Encoding", "identity")],
    ),
    (
        "not-injected-keeps-its-encoding",
        [*HOST, ("Accept-Encoding", "gzip")],
        (),
        False,
        [*HOST, ("Accept-Encoding", "gzip")],
    ),
]


@pytest.mark.parametrize(
    ("fields", "injected", "websocket", "expected"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_outbound_fields(
    fields: H, injected: tuple[str, ...], websocket: bool, expected: H
) -> None:
    assert run(fields, injected, websocket) == expected


ANSWERS = [
    ("absent", None, False),
    ("identity", "identity", False),
    ("identity-case", " Identity ", False),
    ("gzip", "gzip", True),
    ("stacked", "identity, br", True),
    ("unknown", "x-custom", True),
]


@pytest.mark.parametrize(
    ("header", "refused"), [c[1:] for c in ANSWERS], ids=[c[0] for c in ANSWERS]
)
def test_encoded_answers(header: str | None, refused: bool) -> None:
    assert encoded_answer(header) is refused


TRANSFER = [
    ("chunked", "chunked", False),
    ("chunked-case", " Chunked ", False),
    ("gzip-chunked", "gzip, chunked", True),  # D520: de-chunked, never inflated
    ("deflate-chunked", "deflate,chunked", True),
    ("gzip-to-close", "gzip", True),
    ("identity", "identity", False),
]


@pytest.mark.parametrize(
    ("header", "refused"), [c[1:] for c in TRANSFER], ids=[c[0] for c in TRANSFER]
)
def test_transfer_coded_answers(header: str, refused: bool) -> None:
    assert encoded_answer(None, header) is refused
    assert encoded_answer("identity", header) is refused
    assert encoded_answer("chunked", header) is True  # no content coding of that name


_TOKENS = st.sampled_from(
    ["gzip", "GZIP", "br", "zstd", "deflate", "*", "compress", "identity;q=0"]
)
_VALUES = st.lists(
    st.tuples(_TOKENS, st.sampled_from(["", ";q=1", ";q=0.5"])), min_size=1, max_size=4
).map(lambda ts: ", ".join(t + q for t, q in ts))
_NAMES = st.sampled_from(
    ["Accept-Encoding", "accept-encoding", "ACCEPT-ENCODING", "Accept_Encoding"]
)


@given(st.lists(st.tuples(_NAMES, _VALUES), max_size=4))
def test_an_injected_request_asks_for_identity_whatever_the_sandbox_asked(fields: H) -> None:
    out = run([*HOST, *fields], ("Authorization",))
    encodings = [(n, v) for n, v in out if n.lower().replace("_", "-") == "accept-encoding"]
    assert encodings == [("Accept-Encoding", "identity")]


SWITCHES = [
    ("websocket", 101, "websocket", "WebSocket", False),
    ("not a switch", 200, None, "echo", False),
    ("unasked", 101, None, "echo", True),  # D526
    ("unasked websocket", 101, None, "websocket", True),
    ("another protocol", 101, "websocket", "h2c", True),
    ("no upgrade named", 101, "websocket", None, True),
]


@pytest.mark.parametrize(
    ("status", "asked", "answered", "dropped"),
    [c[1:] for c in SWITCHES],
    ids=[c[0] for c in SWITCHES],
)
def test_unasked_switches(
    status: int, asked: str | None, answered: str | None, dropped: bool
) -> None:
    assert unasked_switch(status, asked, answered) is dropped
