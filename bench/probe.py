"""Before anything is measured: does each contender do what the benchmark assumes?

For every proxy, over plain HTTP and inside an intercepted tunnel, one request to
the host under test carrying a client-chosen `Authorization`; the upstream's
`X-Bench-Auth` answer says what reached it. Squid and egress-proxy must have
replaced the header (`injected`); bare mitmdump passes the client's (`other`).
The client leg must be TLS 1.3 and present a certificate of the proxies' CA for
the host; the upstream leg is TLS 1.3 because nginx accepts nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench import netns, wire
from bench.allowlist import TARGET
from bench.upstream import HTTP_PORT, HTTPS_PORT

CLIENT_AUTHORIZATION = {"Authorization": "Bearer sandbox-chosen"}


@dataclass(frozen=True)
class ProbeResult:
    contender: str
    http_auth: str
    https_auth: str
    client_tls: str

    def as_dict(self) -> dict[str, str]:
        return {"http_auth": self.http_auth, "https_auth": self.https_auth, "tls": self.client_tls}


def probe(ns: str, name: str, port: int | None, proxy_ca: str, upstream_ca: str) -> ProbeResult:
    """One plain and one TLS request through the proxy on `port` (None: direct)."""
    if port is None:
        sock = wire.connect(ns, netns.UPSTREAM_IP, HTTP_PORT)
        target = "/"
    else:
        sock = wire.connect(ns, "127.0.0.1", port)
        target = f"http://{TARGET}/"
    with sock:
        plain = wire.request(sock, "GET", target, TARGET, CLIENT_AUTHORIZATION)
    if port is None:
        raw = wire.connect(ns, netns.UPSTREAM_IP, HTTPS_PORT)
        cafile = upstream_ca
    else:
        raw = wire.tunnel(ns, port, f"{TARGET}:{HTTPS_PORT}")
        cafile = proxy_ca
    with wire.wrap(raw, cafile, TARGET) as tls:
        version = tls.version() or "?"
        secure = wire.request(tls, "GET", "/", TARGET, CLIENT_AUTHORIZATION)
    for response in (plain, secure):
        if response.head.status != 200:
            raise RuntimeError(f"{name}: probe answered {response.head.status}")
    return ProbeResult(
        name,
        plain.head.headers.get("x-bench-auth", "?"),
        secure.head.headers.get("x-bench-auth", "?"),
        version,
    )


EXPECTED_AUTH = {"direct": "other", "mitmdump": "other", "squid": "injected"}


def check(result: ProbeResult) -> None:
    expected = EXPECTED_AUTH.get(result.contender, "injected")
    if result.client_tls != "TLSv1.3":
        raise RuntimeError(f"{result.contender}: client leg negotiated {result.client_tls}")
    if (result.http_auth, result.https_auth) != (expected, expected):
        raise RuntimeError(
            f"{result.contender}: upstream saw Authorization "
            f"{result.http_auth!r}/{result.https_auth!r}, expected {expected!r}"
        )
