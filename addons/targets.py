"""Where a request goes, read off a mitmproxy flow (SPEC 1.6; docs/decisions.md D20, D21, D23).

The adapter between a flow and the pure checks of `proxy.targets` and `proxy.fields`:
`locate_flow` turns the request, its connection's target and its TLS names into plain
values and asks `proxy.targets.locate`; `origin_form` rewrites an allowed request so
that an upstream only ever receives an origin-form request-target.

Invariant: nothing here decides. A request whose head holds bytes no upstream may see
is `bad_request` before any name is looked at.
"""

from __future__ import annotations

from mitmproxy import connection, http
from mitmproxy.proxy import mode_specs

from proxy.decision import Reason
from proxy.fields import head_problem
from proxy.hosts import Host
from proxy.targets import Location, RequestNames, locate


def is_transparent(client: connection.Client) -> bool:
    return isinstance(client.proxy_mode, mode_specs.TransparentMode)


def locate_flow(
    flow: http.HTTPFlow, target: tuple[Host, int] | None, bad_sni: bool
) -> Location | Reason:
    """Where `flow`'s request goes, given the connection's `target` (see addons.egress)."""
    request = flow.request
    if head_problem(request.data.method, request.headers.fields) is not None:
        return Reason.BAD_REQUEST  # bytes no upstream may see (D21)
    http1 = not (request.is_http2 or request.is_http3)
    return locate(
        RequestNames(
            transparent=is_transparent(flow.client_conn),
            host=request.host,
            port=request.port,
            host_header=request.host_header,
            sni=flow.client_conn.sni,
            client_tls=flow.client_conn.tls,
            target=target,
            sni_malformed=bad_sni,
            method=request.method,
            path=request.path,
            # HTTP/1 absolute-form, as mitmproxy keeps it in a tunnel and in transparent
            # mode; for HTTP/2 `authority` is :authority (the Host header, above).
            target_authority=request.authority if http1 else "",
        )
    )


def origin_form(request: http.Request, located: Location) -> None:
    """Send the request-target upstream in origin-form (SPEC 1.6, D20).

    HTTP/1: mitmproxy writes absolute-form while `authority` is set; the Host header
    then carries the name (added from the target when the client sent none). HTTP/2:
    `:path` becomes origin-form; `:authority` stays (filled from the target if absent).
    """
    request.path = located.path
    if not (request.is_http2 or request.is_http3):
        if request.data.authority and "Host" not in request.headers:
            # The client's bytes as they were (`request.authority` would IDNA-decode them).
            request.headers.insert(
                0, "Host", request.data.authority.decode("utf-8", "surrogateescape")
            )
        request.data.authority = b""
    elif located.authority and not request.data.authority:
        request.authority = located.authority
