"""`HOST:PORT` parsing (common/endpoint.py): one grammar, the caller's policy."""

from __future__ import annotations

import pytest

from sandbox_egress.common.endpoint import format_endpoint, parse_endpoint


@pytest.mark.parametrize(
    ("text", "options", "expected"),
    [
        ("127.0.0.1:9465", {}, ("127.0.0.1", 9465)),
        ("localhost:1", {}, ("localhost", 1)),
        ("[::1]:8080", {}, ("::1", 8080)),
        ("[::1]:0", {"port_zero": True}, ("::1", 0)),
        (":8080", {"empty_host": "0.0.0.0"}, ("0.0.0.0", 8080)),
        ("[]:8080", {"empty_host": "0.0.0.0"}, ("0.0.0.0", 8080)),
        ("host:65535", {}, ("host", 65535)),
    ],
)
def test_parses(text: str, options: dict[str, object], expected: tuple[str, int]) -> None:
    assert parse_endpoint(text, **options) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "options"),
    [
        ("9464", {}),
        (":9464", {}),  # no host, and the caller gave no default
        ("host:", {}),
        ("host:http", {}),
        ("h:70000", {}),
        ("h:65536", {"port_zero": True}),
        ("h:0", {}),  # port 0 only where the caller accepts it
        ("h:-1", {"port_zero": True}),
        ("h:\u0661\u0662", {}),  # Arabic-Indic digits are digits to str.isdigit
    ],
)
def test_refuses_with_the_text(text: str, options: dict[str, object]) -> None:
    with pytest.raises(ValueError) as caught:
        parse_endpoint(text, **options)  # type: ignore[arg-type]
    assert str(caught.value) == f"expected HOST:PORT, got {text!r}"


@pytest.mark.parametrize(
    ("host", "port", "text"),
    [("127.0.0.1", 80, "127.0.0.1:80"), ("::1", 443, "[::1]:443"), ("proxy", 1, "proxy:1")],
)
def test_format_is_the_inverse(host: str, port: int, text: str) -> None:
    assert format_endpoint(host, port) == text
    assert parse_endpoint(text) == (host, port)
