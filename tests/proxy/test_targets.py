"""Which host a request is for: every name it carries must agree (domain fronting)."""

from __future__ import annotations

import pytest

from proxy.decision import Reason
from proxy.hosts import canonical_host
from proxy.targets import RequestNames, locate

API = canonical_host("api.example")


def names(
    host: str = "api.example",
    port: int = 443,
    host_header: str | None = "api.example",
    sni: str | None = None,
    target: tuple[str, int] | None = None,
    transparent: bool = False,
    client_tls: bool = False,
) -> RequestNames:
    return RequestNames(
        transparent=transparent,
        host=host,
        port=port,
        host_header=host_header,
        sni=sni,
        client_tls=client_tls,
        target=(canonical_host(target[0]), target[1]) if target else None,
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
]


@pytest.mark.parametrize(
    ("request_names", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_locate(request_names: RequestNames, expected: tuple[str, int] | Reason) -> None:
    located = locate(request_names)
    if isinstance(expected, Reason):
        assert located is expected
    else:
        assert not isinstance(located, Reason)
        assert (str(located[0]), located[1]) == expected
