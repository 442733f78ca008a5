"""The header fields an allowed request takes upstream: no hop-by-hop field, no variant of
an injected name, and, when it carries an injected value, no compression of the answer.

`outbound_fields(fields, injected, websocket)` is applied to every allowed request
before its transform headers are written (issue 21):

* RFC 9110 §7.6.1: the fields a `Connection` header names are removed, and so are
  `Keep-Alive`, `Proxy-Connection`, every `Proxy-*` field (`Proxy-Authorization`
  included: a credential for this proxy, never for the upstream), `TE` other than
  `trailers`, and `Upgrade` unless the request is a WebSocket upgrade. `Connection`
  itself keeps only `close` and `keep-alive` (mitmproxy reads them to end or keep the
  client's connection after the answer) and, for a WebSocket, `upgrade`. `Host`,
  `Content-Length` and `Transfer-Encoding` stay whatever `Connection` names: mitmproxy
  frames the message by them. The transform headers are written after, so `Connection`
  cannot remove them.
* A transform header also removes the client's spellings of its name that a server
  may read as the same field: any letter case and `_` for `-` (CGI and WSGI servers map
  both `X-Tenant` and `X_Tenant` to `HTTP_X_TENANT`).
* A request that carries an injected value asks for `Accept-Encoding: identity`, so
  that an echo of the value comes back in a body the proxy scans (D99); the sandbox's
  own `Accept-Encoding` is dropped. `encoded_answer` says whether an answer must then
  be refused: an upstream that compresses anyway, as a content coding or a transfer
  coding, cannot be scanned. `unasked_switch` says whether a `101` answers anything but the
  WebSocket upgrade the request asked for (D526): such an answer is dropped.

Pure: no mitmproxy; fields are `(name, value)` byte pairs as mitmproxy keeps them.
"""

from __future__ import annotations

from collections.abc import Iterable

Fields = tuple[tuple[bytes, bytes], ...]

# RFC 9110 §7.6.1 and the fields it lists by name (`Proxy-*` is matched by prefix).
HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"te", b"upgrade"})
# Fields a `Connection` header cannot remove: mitmproxy frames and routes by them.
FRAMING = frozenset({b"host", b"content-length", b"transfer-encoding"})
IDENTITY = b"identity"
CHUNKED = b"chunked"  # a transfer coding that only frames the body


def _tokens(value: bytes) -> list[bytes]:
    return [t.strip().lower() for t in value.split(b",") if t.strip()]


def spelling(name: bytes | str) -> bytes:
    """A field name as a CGI/WSGI server reads it: letter case and `_`/`-` do not count."""
    raw = name.encode("latin-1") if isinstance(name, str) else name
    return raw.lower().replace(b"_", b"-")


def outbound_fields(
    fields: Fields,
    injected: Iterable[str] = (),
    websocket: bool = False,
    carries_secret: bool | None = None,
) -> Fields:
    """`fields` without what no upstream may receive (see the module docstring).

    `carries_secret` (default: some name is `injected`) asks for an identity answer: a
    placeholder swapped into the client's own field carries a value without a transform."""
    injected_spellings = {spelling(name) for name in injected}
    identity = bool(injected_spellings) if carries_secret is None else carries_secret
    named: set[bytes] = set()
    for name, value in fields:
        if name.lower() == b"connection":
            named.update(_tokens(value))
    named -= {b"close", b"upgrade"} | FRAMING
    kept: list[tuple[bytes, bytes]] = []
    options: set[bytes] = set()
    for name, value in fields:
        lower = name.lower()
        if lower == b"connection":
            options.update(_tokens(value))
            continue
        if lower == b"te":
            if b"trailers" in _tokens(value):
                kept.append((name, b"trailers"))
            continue
        if lower == b"upgrade" and websocket:
            kept.append((name, value))
            continue
        if lower in HOP_BY_HOP or lower in named or lower.startswith(b"proxy-"):
            continue
        if spelling(lower) in injected_spellings:
            continue  # written by the transform, in its own spelling
        if identity and spelling(lower) == b"accept-encoding":
            continue
        kept.append((name, value))
    connection: list[bytes] = [t for t in (b"close", b"keep-alive") if t in options]
    if websocket:
        connection.append(b"Upgrade")
    if connection:
        kept.append((b"Connection", b", ".join(connection)))
    if identity:
        kept.append((b"Accept-Encoding", IDENTITY))
    return tuple(kept)


def encoded_answer(content_encoding: str | None, transfer_encoding: str | None = None) -> bool:
    """An answer with a content coding other than identity, or a transfer coding other
    than chunked (`gzip, chunked`, which mitmproxy de-chunks but never inflates, D520):
    its body is not scannable for an echo."""
    content = _tokens(content_encoding.encode("latin-1")) if content_encoding is not None else []
    transfer = _tokens(transfer_encoding.encode("latin-1")) if transfer_encoding is not None else []
    return any(t != IDENTITY for t in content) or any(
        t not in (IDENTITY, CHUNKED) for t in transfer
    )


def unasked_switch(status: int, request_upgrade: str | None, response_upgrade: str | None) -> bool:
    """A `101 Switching Protocols` that is not the WebSocket the request asked for (D526):
    an allowed request reaches its upstream with no `Upgrade` but a WebSocket's (D100), so
    any other switch is the upstream's own, and mitmproxy would relay raw bytes after it,
    unscanned."""
    if status != 101:
        return False
    return not (
        (request_upgrade or "").strip().lower() == "websocket"
        and (response_upgrade or "").strip().lower() == "websocket"
    )
