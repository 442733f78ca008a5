"""Which host a request is for: every name it carries must agree (domain fronting),
including the request-target's authority (issue 10 item 1, docs/decisions.md D20)."""

from __future__ import annotations

import pytest

from sandbox_egress.proxy.decision import Reason
from sandbox_egress.proxy.hosts import canonical_host
from sandbox_egress.proxy.targets import (
    Location,
    RequestNames,
    locate,
    request_target,
    upstream_authority,
)

API = canonical_host("api.example")


def names(
    host: str = "api.example",
    port: int = 443,
    host_header: str | None = "api.example",
    sni: str | None = None,
    target: tuple[str, int] | None = None,
    transparent: bool = False,
    client_tls: bool = False,
    method: str = "GET",
    path: str = "/",
    target_authority: str = "",
) -> RequestNames:
    return RequestNames(
        transparent=transparent,
        host=host,
        port=port,
        host_header=host_header,
        sni=sni,
        client_tls=client_tls,
        target=(canonical_host(target[0]), target[1]) if target else None,
        method=method,
        path=path,
        target_authority=target_authority,
    )


CASES = [
    # regular mode, absolute-form (no tunnel)
    ("absolute-agrees", names(port=80), ("api.example", 80)),
    (
        "absolute-host-case",
        names(host="API.example", host_header="api.EXAMPLE.", port=80),
        ("api.example", 80),
    ),
    ("absolute-other-host", names(host_header="evil.example", port=80), Reason.HOST_MISMATCH),
    ("absolute-other-port", names(host_header="api.example:8080", port=80), Reason.HOST_MISMATCH),
    ("absolute-same-port", names(host_header="api.example:80", port=80), ("api.example", 80)),
    ("absolute-no-host-header", names(host_header=None, port=80), ("api.example", 80)),
    ("bad-host-header", names(host_header="api.example:0"), Reason.BAD_REQUEST),
    ("host-header-userinfo", names(host_header="user@api.example"), Reason.BAD_REQUEST),
    # regular mode, inside a CONNECT tunnel
    ("tunnel-agrees", names(target=("api.example", 443), sni="api.example"), ("api.example", 443)),
    (
        "tunnel-other-host",
        names(host="evil.example", host_header="evil.example", target=("api.example", 443)),
        Reason.HOST_MISMATCH,
    ),
    (
        "tunnel-sni-other",
        names(target=("api.example", 443), sni="evil.example"),
        Reason.HOST_MISMATCH,
    ),
    (
        "tunnel-port-from-target",
        names(port=443, target=("api.example", 8443)),
        ("api.example", 8443),
    ),
    (
        "tunnel-explicit-other-port",
        names(host_header="api.example:9443", target=("api.example", 8443)),
        Reason.HOST_MISMATCH,
    ),
    ("tunnel-bad-sni", names(target=("api.example", 443), sni="a..b"), Reason.BAD_REQUEST),
    # transparent mode
    (
        "transparent-host-header-decides",
        names(transparent=True, host="198.18.1.2", port=80),
        ("api.example", 80),
    ),
    (
        "transparent-no-host-header",
        names(transparent=True, host="198.18.1.2", host_header=None, port=80),
        ("198.18.1.2", 80),
    ),
    (
        "transparent-tls-sni-agrees",
        names(
            transparent=True,
            host="198.18.1.2",
            sni="api.example",
            target=("api.example", 443),
            client_tls=True,
        ),
        ("api.example", 443),
    ),
    (
        "transparent-tls-host-not-sni",
        names(
            transparent=True,
            host="198.18.1.2",
            host_header="evil.example",
            sni="api.example",
            target=("api.example", 443),
            client_tls=True,
        ),
        Reason.HOST_MISMATCH,
    ),
    (
        "transparent-tls-no-host-uses-sni",
        names(
            transparent=True,
            host="198.18.1.2",
            host_header=None,
            sni="api.example",
            target=("api.example", 443),
            client_tls=True,
        ),
        ("api.example", 443),
    ),
    (
        "transparent-tls-without-target",
        names(transparent=True, host="198.18.1.2", client_tls=True),
        Reason.BAD_REQUEST,
    ),
    # an SNI that does not parse never drops the agreement check (D23)
    ("regular-bad-sni-no-target", names(sni="999.1.2.3"), Reason.BAD_REQUEST),
    (
        "tunnel-unreadable-sni",
        RequestNames(
            transparent=False,
            host="api.example",
            port=443,
            host_header="api.example",
            sni=None,
            client_tls=True,
            target=(API, 443),
            sni_malformed=True,
        ),
        Reason.BAD_REQUEST,
    ),
    (
        "transparent-bad-sni",
        names(transparent=True, host="198.18.1.2", sni="a..b", client_tls=True),
        Reason.BAD_REQUEST,
    ),
]

TUNNEL = {"target": ("api.example", 443), "sni": "api.example"}

# The request-target's authority is one more name that must agree (D20).
TARGET_CASES = [
    (
        "h1-tunnel-absolute-other-host",
        names(target_authority="evil.example", path="/x", **TUNNEL),  # type: ignore[arg-type]
        Reason.HOST_MISMATCH,
    ),
    (
        "h1-tunnel-absolute-same-host",
        names(target_authority="API.example", path="/x?q", **TUNNEL),  # type: ignore[arg-type]
        ("api.example", 443, "/x?q"),
    ),
    (
        "h1-tunnel-absolute-same-port",
        names(target_authority="api.example:443", path="/", **TUNNEL),  # type: ignore[arg-type]
        ("api.example", 443, "/"),
    ),
    (
        "h1-tunnel-absolute-other-port",
        names(target_authority="api.example:8443", **TUNNEL),  # type: ignore[arg-type]
        Reason.HOST_MISMATCH,
    ),
    (
        "h1-absolute-userinfo",
        names(target_authority="u@api.example", **TUNNEL),  # type: ignore[arg-type]
        Reason.BAD_REQUEST,
    ),
    (
        "h2-path-absolute-other-host",
        names(path="http://evil.example/x", **TUNNEL),  # type: ignore[arg-type]
        Reason.HOST_MISMATCH,
    ),
    (
        "h2-path-absolute-same-host",
        names(path="https://api.example/x", **TUNNEL),  # type: ignore[arg-type]
        ("api.example", 443, "/x"),
    ),
    (
        "h2-path-not-a-target",
        names(path="evil.example/x", **TUNNEL),  # type: ignore[arg-type]
        Reason.BAD_REQUEST,
    ),
    ("asterisk-get", names(path="*", **TUNNEL), Reason.BAD_REQUEST),  # type: ignore[arg-type]
    (
        "asterisk-options",
        names(method="OPTIONS", path="*", **TUNNEL),  # type: ignore[arg-type]
        ("api.example", 443, "*"),
    ),
    (
        "transparent-absolute-disagrees-with-host",
        names(transparent=True, host="198.18.1.2", port=80, target_authority="evil.example"),
        Reason.HOST_MISMATCH,
    ),
    (
        "transparent-absolute-names-host-without-host-header",
        names(
            transparent=True,
            host="198.18.1.2",
            port=80,
            host_header=None,
            target_authority="api.example",
            path="/y",
        ),
        ("api.example", 80, "/y"),
    ),
    (
        "transparent-tls-absolute-other-host",
        names(
            transparent=True,
            host="198.18.1.2",
            path="https://evil.example/",
            client_tls=True,
            **TUNNEL,  # type: ignore[arg-type]
        ),
        Reason.HOST_MISMATCH,
    ),
    (
        "regular-h2-absolute-other-host",
        names(path="https://evil.example/x", port=443),
        Reason.HOST_MISMATCH,
    ),
]


def _outcome(located: Location | Reason) -> tuple[str, int, str] | Reason:
    if isinstance(located, Reason):
        return located
    return str(located.host), located.port, located.path


@pytest.mark.parametrize(
    ("request_names", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_locate(request_names: RequestNames, expected: tuple[str, int] | Reason) -> None:
    located = _outcome(locate(request_names))
    if isinstance(expected, Reason):
        assert located is expected
    else:
        assert located == (*expected, "/")


@pytest.mark.parametrize(
    ("request_names", "expected"),
    [c[1:] for c in TARGET_CASES],
    ids=[c[0] for c in TARGET_CASES],
)
def test_locate_checks_the_request_target(
    request_names: RequestNames, expected: tuple[str, int, str] | Reason
) -> None:
    assert _outcome(locate(request_names)) == expected


@pytest.mark.parametrize(
    ("method", "path", "authority", "expected"),
    [
        ("GET", "/a/b?c=d", "", ("", "/a/b?c=d")),
        ("GET", "//double/slash", "", ("", "//double/slash")),  # origin-form (RFC 9110 4.1)
        ("GET", "/x", "api.example:8443", ("api.example:8443", "/x")),  # HTTP/1, pre-split
        ("GET", "https://api.example/x?q", "", ("api.example", "/x?q")),
        ("GET", "HTTPS://api.example?q", "", ("api.example", "/?q")),
        ("GET", "http://api.example", "", ("api.example", "/")),
        ("OPTIONS", "http://api.example", "", ("api.example", "*")),  # RFC 9112 3.2.4
        ("OPTIONS", "*", "", ("", "*")),
        ("GET", "*", "", None),
        ("GET", "api.example/x", "", None),
        ("GET", "ftp://api.example/x", "", None),
        ("GET", "https:///x", "", None),
        ("GET", "https://api.example#frag", "", None),
        ("GET", "https://api.example/x#frag", "", None),
        ("GET", "/x y", "", None),
        ("GET", "/x\x00", "", None),
        ("GET", "/x\x7f", "", None),
        ("GET", "/x\r\nHost: evil", "", None),
        ("GET", "/caf\u00e9", "", None),
        ("GET", "", "", None),
    ],
)
def test_request_target_forms(
    method: str, path: str, authority: str, expected: tuple[str, str] | None
) -> None:
    assert request_target(method, path, authority) == expected


def _base() -> dict[str, object]:
    """An HTTP/2 request in a tunnel to api.example whose :authority agrees."""
    request_names = names(**TUNNEL)  # type: ignore[arg-type]
    return {f: getattr(request_names, f) for f in RequestNames.__dataclass_fields__}


# Found by the protocol fuzzer (D35): an empty Host, and on HTTP/2 a `host` field that
# disagrees with :authority (mitmproxy forwards it as the upstream's Host).
HOST_FIELD_CASES = [
    ("empty-host-header", names(host_header="", **TUNNEL), Reason.BAD_REQUEST),  # type: ignore[arg-type]
    (
        "h2-host-field-other-host",
        RequestNames(**{**_base(), "host_fields": ("evil.example",)}),
        Reason.HOST_MISMATCH,
    ),
    (
        "h2-host-field-other-port",
        RequestNames(**{**_base(), "host_fields": ("api.example:8443",)}),
        Reason.HOST_MISMATCH,
    ),
    ("h2-host-field-empty", RequestNames(**{**_base(), "host_fields": ("",)}), Reason.BAD_REQUEST),
    (
        "h2-host-field-twice",
        RequestNames(**{**_base(), "host_fields": ("api.example", "api.example")}),
        Reason.BAD_REQUEST,
    ),
    (
        "h2-host-field-agrees",
        RequestNames(**{**_base(), "host_fields": ("API.example.",)}),
        ("api.example", 443, "/"),
    ),
]


@pytest.mark.parametrize(
    ("request_names", "expected"),
    [c[1:] for c in HOST_FIELD_CASES],
    ids=[c[0] for c in HOST_FIELD_CASES],
)
def test_locate_checks_every_host_field(
    request_names: RequestNames, expected: tuple[str, int, str] | Reason
) -> None:
    assert _outcome(locate(request_names)) == expected


@pytest.mark.parametrize(
    ("host", "port", "scheme", "expected"),
    [
        ("API.Example.", 443, "https", "api.example"),
        ("api.example", 8443, "https", "api.example:8443"),
        ("api.example", 80, "http", "api.example"),
        ("api.example", 443, "http", "api.example:443"),
        ("\uff41pi.example", 443, "https", "api.example"),  # fullwidth "a" (NFKC)
        ("0x7f.1", 80, "http", "127.0.0.1"),
        ("[::1]", 8080, "http", "[::1]:8080"),
    ],
)
def test_upstream_authority_is_the_canonical_decided_host(
    host: str, port: int, scheme: str, expected: str
) -> None:
    assert upstream_authority(canonical_host(host), port, scheme) == expected
