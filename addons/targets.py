"""Where a request goes, read off a mitmproxy flow (docs/configuration.md#modes-and-protocols;
docs/decisions.md D20, D21, D23).

The adapter between a flow and the pure checks of `proxy.targets`: `request_names`
turns the request, its connection's target and its TLS names into plain values for
`proxy.stages.decide_request`; `origin_form` rewrites an allowed request so
that an upstream only ever receives an origin-form request-target and the decided
host, canonically spelled, as its Host/:authority (D35).

Invariant: nothing here decides.
"""

from __future__ import annotations

from mitmproxy import connection, http
from mitmproxy.proxy import mode_specs

from sandbox_egress.proxy.stages import ConnectionFacts
from sandbox_egress.proxy.targets import Location, RequestNames, upstream_authority


def is_transparent(client: connection.Client) -> bool:
    return isinstance(client.proxy_mode, mode_specs.TransparentMode)


def request_names(flow: http.HTTPFlow, facts: ConnectionFacts) -> RequestNames:
    """Every name `flow`'s request carries, with its connection's target (`proxy.stages`)."""
    request = flow.request
    http1 = not (request.is_http2 or request.is_http3)
    return RequestNames(
        transparent=is_transparent(flow.client_conn),
        host=request.host,
        port=request.port,
        host_header=request.host_header,
        sni=flow.client_conn.sni,
        client_tls=flow.client_conn.tls,
        target=facts.target,
        sni_malformed=facts.bad_sni,
        method=request.data.method.decode("utf-8", "surrogateescape"),  # as sent (1.8)
        path=request.path,
        # HTTP/1 absolute-form, as mitmproxy keeps it in a tunnel and in transparent
        # mode; for HTTP/2 `authority` is :authority (the Host header, above).
        target_authority=request.authority if http1 else "",
        host_fields=tuple(request.headers.get_all("Host"))
        if not http1 and request.data.authority
        else (),
    )


def origin_form(request: http.Request, located: Location) -> None:
    """Send the request-target upstream in origin-form (docs/configuration.md#modes-and-protocols,
    D20), and the decided
    host, spelled canonically, as its only authority (D35).

    HTTP/1: mitmproxy writes absolute-form while `authority` is set, so it is cleared;
    the one Host header is the decided authority (added when the client sent none).
    HTTP/2: `:path` becomes origin-form; `:authority` (mitmproxy's Host when it speaks
    HTTP/1 upstream) and any `host` field are the decided authority.
    """
    request.path = located.path
    authority = upstream_authority(located.host, located.port, request.scheme)
    if not (request.is_http2 or request.is_http3):
        request.data.authority = b""
        if "Host" in request.headers:
            request.headers["Host"] = authority
        else:
            request.headers.insert(0, "Host", authority)
    else:
        request.authority = authority
        if "Host" in request.headers:
            request.headers["Host"] = authority


def upstream_sni(flow: http.HTTPFlow, located: Location) -> None:
    """The SNI the upstream receives is the decided name, canonically spelled (D35).

    mitmproxy otherwise copies the client's SNI as sent (`API.ALLOWED.TEST`, a trailing
    dot, which RFC 6066 3 forbids, a numeric IPv4 spelling such as `3323068674`) onto a
    server connection it has not opened yet. For an IP host the canonical address is set:
    mitmproxy then sends no SNI and verifies the certificate against that address. A
    connection already open keeps the SNI it was opened with, which named the same host
    (connections are keyed on the decided host and port).
    """
    server = flow.server_conn
    if server.timestamp_start is None and flow.request.scheme == "https":
        server.sni = str(located.host)
