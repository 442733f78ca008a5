"""Request head bytes that are refused before anything is forwarded (docs/decisions.md D21)."""

from __future__ import annotations

import pytest

from sandbox_egress.proxy.fields import head_problem

GOOD = [(b"Host", b"api.example"), (b"Accept", b"*/*")]


@pytest.mark.parametrize(
    ("method", "fields"),
    [
        (b"GET", GOOD),
        (b"M-SEARCH", GOOD),  # any token is a method
        (b"GET", [(b"X-Tab", b"a\tb")]),  # HTAB and SP are allowed inside a value
        (b"GET", [(b"X-Obs-Text", "caf\u00e9".encode("latin-1"))]),  # obs-text
        (b"GET", [(b"X-Empty", b"")]),
        (b"GET", [(b"x-h2-lowercase", b"v")]),
        (b"GET", []),
    ],
)
def test_well_formed_heads_pass(method: bytes, fields: list[tuple[bytes, bytes]]) -> None:
    assert head_problem(method, fields) is None


@pytest.mark.parametrize(
    ("method", "fields", "problem"),
    [
        (b"G(T", GOOD, "method is not a token"),
        (b"GE\x00T", GOOD, "method is not a token"),
        (b"", GOOD, "method is not a token"),
        (b"G\xc9T", GOOD, "method is not a token"),
        (b"GET", [(b"X-A", b"b\rHost: evil")], "header field 0: control character"),
        (b"GET", [*GOOD, (b"X-F", b"one\r\n two")], "header field 2: control character"),
        (b"GET", [(b"X-N", b"a\x00b")], "header field 0: control character"),
        (b"GET", [(b"X-L", b"a\nb")], "header field 0: control character"),
        (b"GET", [(b"X-E", b"\x1b[31m")], "header field 0: control character"),
        (b"GET", [(b"X-D", b"a\x7f")], "header field 0: control character"),
        (b"GET", [(b"X\x00Y", b"v")], "header field 0: name is not a token"),
        (b"GET", [(b"Host ", b"v")], "header field 0: name is not a token"),
        (b"GET", [(b"", b"v")], "header field 0: name is not a token"),
        (b"GET", [(b":path", b"/")], "header field 0: name is not a token"),
    ],
)
def test_malformed_heads_name_the_first_problem(
    method: bytes, fields: list[tuple[bytes, bytes]], problem: str
) -> None:
    found = head_problem(method, fields)
    assert found is not None
    assert found.startswith(problem)
