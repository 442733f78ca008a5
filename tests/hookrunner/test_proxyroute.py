"""HTTPS_PROXY / NO_PROXY conventions, as a table."""

from __future__ import annotations

import pytest

from sandbox_egress.hookrunner.proxyroute import (
    DIRECT,
    ProxyConfigError,
    ProxyRoute,
    bypasses,
    route_for,
)

BYPASS = [
    # (no_proxy, host, port, bypassed)
    ("", "api.example.com", 443, False),
    ("*", "api.example.com", 443, True),
    ("example.com", "example.com", 443, True),
    ("example.com", "api.example.com", 443, True),
    (".example.com", "api.example.com", 443, True),
    ("*.example.com", "api.example.com", 443, True),
    (".example.com", "example.com", 443, True),
    ("example.com", "badexample.com", 443, False),
    ("example.com", "example.com.evil.net", 443, False),
    ("EXAMPLE.com", "Api.Example.COM.", 443, True),
    ("other.org, example.com", "a.example.com", 443, True),
    ("other.org example.com", "a.example.com", 443, True),
    ("example.com:8443", "example.com", 443, False),
    ("example.com:443", "example.com", 443, True),
    ("10.0.0.0/8", "10.1.2.3", 443, True),
    ("10.0.0.0/8", "11.1.2.3", 443, False),
    ("10.0.0.0/8", "ten.example", 443, False),
    ("127.0.0.1", "127.0.0.1", 443, True),
    ("::1", "::1", 443, True),
    ("[::1]:443", "::1", 443, True),
    ("[::1]:80", "::1", 443, False),
    ("fd00::/8", "fd12::1", 443, True),
]


@pytest.mark.parametrize(("no_proxy", "host", "port", "bypassed"), BYPASS)
def test_no_proxy_table(no_proxy: str, host: str, port: int, bypassed: bool) -> None:
    assert bypasses(host, port, no_proxy) is bypassed


ROUTES = [
    ({}, DIRECT),
    ({"HTTPS_PROXY": ""}, DIRECT),
    ({"HTTPS_PROXY": "http://proxy:3128"}, ProxyRoute(True, "proxy", 3128)),
    ({"HTTPS_PROXY": "proxy:3128"}, ProxyRoute(True, "proxy", 3128)),
    ({"HTTPS_PROXY": "http://proxy"}, ProxyRoute(True, "proxy", 80)),
    ({"HTTPS_PROXY": "http://u:p%40ss@proxy:1"}, ProxyRoute(True, "proxy", 1, "u", "p%40ss")),
    ({"https_proxy": "http://low:1", "HTTPS_PROXY": "http://up:2"}, ProxyRoute(True, "low", 1)),
    ({"https_proxy": "", "HTTPS_PROXY": "http://up:2"}, DIRECT),
    ({"HTTPS_PROXY": "http://p:1", "NO_PROXY": "target.example"}, DIRECT),
    (
        {"HTTPS_PROXY": "http://p:1", "no_proxy": "other", "NO_PROXY": "target.example"},
        ProxyRoute(True, "p", 1),
    ),
    ({"HTTP_PROXY": "http://p:1"}, DIRECT),
]


@pytest.mark.parametrize(("environ", "route"), ROUTES)
def test_route_table(environ: dict[str, str], route: ProxyRoute) -> None:
    assert route_for("target.example", 443, environ) == route


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("socks5://u:secret@p:1", "HTTPS_PROXY scheme 'socks5' is not supported (use http)"),
        ("https://u:secret@p:1", "HTTPS_PROXY scheme 'https' is not supported (use http)"),
        ("http://u:secret@p:99999", "HTTPS_PROXY is not a valid URL"),
        ("http://:1", "HTTPS_PROXY has no host"),
    ],
)
def test_unusable_proxy_is_reported_without_its_credentials(value: str, message: str) -> None:
    with pytest.raises(ProxyConfigError) as caught:
        route_for("target.example", 443, {"HTTPS_PROXY": value})
    assert str(caught.value) == message
