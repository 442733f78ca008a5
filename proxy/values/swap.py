"""The placeholder stage of a request (docs/configuration.md#placeholders,
docs/decisions.md D112-D114): refuse a request that carries another entry's placeholder,
swap the deciding entry's placeholders for their values, refuse one that lacks a
required placeholder.

Pure: the request's header fields and request-target in, the fields and target to send
(or the reason to refuse) out; `proxy.stages.decide_request` calls `swap` once per
request, the adapter (`addons/request.py`) applies the answer.

Invariants:
* A placeholder of an entry other than the deciding one (of any file: a node's and its
  sandboxes' are searched together, D179), found in any header value (a `Basic`
  credential decoded too), any header name, or the request-target (as sent, or
  percent-decoded), refuses the request with `placeholder_elsewhere`, whatever the
  allowlist said, except a refusal that is not about the allowlist (loopback, internal
  address, a malformed request): those keep their own reason.
* `require` (D207): every `Authorization` field, and every field or query parameter of a
  name that carries one of the entry's placeholders, must carry one: no credential of the
  sandbox's own travels beside a placeholder.
* A resolved value of any entry (a transform's, a secret's, their referenced parts) found
  the same way in any spelling (`proxy.values.spellings`, D360), or in a header's name (D521),
  or in the host name, or
  percent-decoded in a header, refuses the request `secret_elsewhere` (D208): checked
  before the placeholders, with the same exceptions. So does one in a body the proxy
  reads (`held_in`, D364), as sent or with its JSON or percent escapes decoded (D523).
* Values are written only for a real allow (`Decision.injects`), never a `would_deny`;
  into a query, a value is percent-encoded; into a `Basic` credential, re-encoded.
* The answer names where values went (header names, `query`), never a value.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import quote, unquote_to_bytes

from sandbox_egress.proxy.audit.log import Searcher as Spelled
from sandbox_egress.proxy.decision import REPORTABLE, Decision, Reason
from sandbox_egress.proxy.values.placeholders import (
    Holder,
    Place,
    Placeholder,
    PlaceholderIndex,
    Searcher,
)

Fields = tuple[tuple[bytes, bytes], ...]
Spelling = Callable[[Placeholder], bytes]  # how a value is written in one place

_BASIC = b"basic "


@dataclass(frozen=True, slots=True)
class Swap:
    reason: Reason | None = None  # placeholder_elsewhere or credential_required: refuse
    fields: Fields | None = None  # the header fields to send, when a value was written
    path: str | None = None  # the request-target to send, when a value was written
    injected: tuple[str, ...] = ()  # where values went: header names, then "query"
    # Every spelling of a value written (raw, Basic base64, percent-encoded): echo redaction.
    spellings: tuple[bytes, ...] = ()


UNCHANGED = Swap()
# Refusals a found value replaces: the allowlist's, and the credential checks' own (the
# value says more than "no placeholder"); loopback, internal and malformed keep theirs.
_PREEMPTED = REPORTABLE | {
    Reason.CREDENTIAL_REQUIRED,
    Reason.PLACEHOLDER_ELSEWHERE,
    Reason.SIGV4_SCOPE_DENIED,
    Reason.SIGV4_UNSUPPORTED,
}


def swap(
    index: PlaceholderIndex,
    decision: Decision,
    fields: Fields,
    path: str,
    own: Holder | None,
    host: str = "",
) -> Swap:
    """The placeholder stage of one request decided `decision`; `path` is its target,
    `host` the name it is for and `own` the holder of its deciding entry's placeholders
    (`Policy.holder`)."""
    if not (decision.allowed or decision.reason in REPORTABLE):
        return UNCHANGED  # refused for a reason the placeholder does not change
    if index.pattern is None and index.values is None:
        return UNCHANGED  # no placeholder and no value anywhere in the configuration
    # Every header value, then every decoded `Basic` credential, searched as one text.
    basics = {i: c for i, (_, v) in enumerate(fields) if (c := _basic(v)) is not None}
    # A placeholder holds no LF: no match can span two values.
    headers = b"\n".join([*(v for _, v in fields), *(c[1] for c in basics.values())])
    names = b"\n".join(n for n, _ in fields)  # searched, never swapped (D113)
    # A value may be a field's name too: HTTP/1 keeps a name's bytes as sent (D521).
    if index.values is not None and _held(index.values, headers + b"\n" + names, path, host):
        return Swap(Reason.SECRET_ELSEWHERE)
    if index.pattern is not None and _foreign(
        index, own, headers, names + b"\n" + host.encode(), path
    ):
        return Swap(Reason.PLACEHOLDER_ELSEWHERE)
    entry = decision.entry
    if not decision.injects or entry is None or not entry.secrets:
        return UNCHANGED
    found: set[str] = set()
    in_headers = [
        s for s in entry.secrets if Place.HEADERS in s.places and s.placeholder.encode() in headers
    ]
    in_query = [s for s in entry.secrets if Place.QUERY in s.places]
    sent, injected, spellings = list(fields), list[str](), list[bytes]()
    needles = [s.placeholder.encode() for s in in_headers]
    for number, (name, value) in enumerate(fields if in_headers else ()):
        if number not in basics and not any(n in value for n in needles):
            continue
        written = _swap_header(value, basics.get(number), in_headers, found)
        if written != value:
            injected.append(name.decode("latin-1"))
            sent[number] = (name, written)
            if number in basics:  # the base64 the proxy wrote, whole
                spellings.append(written[len(basics[number][0]) :].strip())
    target = _swap_query(path, in_query, found) if in_query else path
    if target != path:
        injected.append("query")
        spellings += [quote(s.value.reveal(), safe="").encode() for s in in_query]
    if any(s.require for s in entry.secrets) and (
        any(s.require and s.placeholder not in found for s in entry.secrets)
        or _own_credential(entry.secrets, fields, basics, path)
    ):
        return Swap(Reason.CREDENTIAL_REQUIRED)
    if not injected:
        return UNCHANGED
    return Swap(
        fields=tuple(sent) if sent != list(fields) else None,
        path=target if target != path else None,
        injected=tuple(dict.fromkeys(injected)),
        spellings=tuple(spellings),
    )


def secret_elsewhere(
    values: Searcher | None, decision: Decision, fields: Fields, path: str, host: str = ""
) -> bool:
    """Whether a request decided `decision` carries one of `values` (the credentials the
    cache fetched, D208) where `swap` looks for the configuration's own values."""
    if values is None or not (decision.allowed or decision.reason in _PREEMPTED):
        return False
    basics = [c[1] for _, v in fields if (c := _basic(v)) is not None]
    names = [n for n, _ in fields]  # a field's name is sent as it is, too (D521)
    return _held(values, b"\n".join([*(v for _, v in fields), *basics, *names]), path, host)


def held_in(values: Sequence[Spelled | None], body: bytes) -> bool:
    """Whether a request body the proxy read holds a value of `values` (every spelling,
    D360), also once its JSON string escapes or its percent escapes are decoded (a JSON
    or form decoder reads any mix of them, D523): such a request is `secret_elsewhere`
    too (D364)."""
    places = [body]
    if b"\\" in body:
        places.append(_JSON_ESCAPE.sub(_json_unescaped, body))
    if b"%" in body:
        places.append(unquote_to_bytes(body))
    return any(v is not None and v.search(p) is not None for v in values for p in places)


# A JSON string escape, read left to right (so `\\\\u0041` stays a backslash and text): a
# run of `\\uXXXX` (a UTF-16 surrogate pair is two), or a short escape.
_JSON_ESCAPE = re.compile(rb'\\((?:u[0-9A-Fa-f]{4})(?:\\u[0-9A-Fa-f]{4})*|["\\/bfnrt])')
_JSON_SHORT = {b'"': b'"', b"\\": b"\\", b"/": b"/", b"b": b"\b", b"f": b"\f", b"n": b"\n"}
_JSON_SHORT |= {b"r": b"\r", b"t": b"\t"}


def _json_unescaped(match: re.Match[bytes]) -> bytes:
    escape = match.group(1)
    if escape in _JSON_SHORT:
        return _JSON_SHORT[escape]
    units = b"".join(int(h, 16).to_bytes(2, "big") for h in escape[1:].split(b"\\u"))
    return units.decode("utf-16-be", "surrogatepass").encode("utf-8", "surrogatepass")


def _held(values: Searcher, headers: bytes, path: str, host: str) -> bool:
    """Whether a resolved value, in any spelling of `proxy.values.spellings` (D360), occurs in the
    header text, the request-target (as sent or percent-decoded) or the host name (an
    HTTP/2 `:authority` is no header field): the sandbox holds what it should never hold."""
    target = path.encode("utf-8", "surrogateescape")
    places = [headers, target, host.encode("utf-8", "surrogateescape")]
    places += [unquote_to_bytes(p) for p in (headers, target) if b"%" in p]
    return any(values.search(data) for data in places)


def _foreign(
    index: PlaceholderIndex, own: Holder | None, headers: bytes, names: bytes, path: str
) -> bool:
    """Whether a placeholder of an entry other than `own` occurs in the header values,
    the header names or the request-target (as sent, or percent-decoded)."""
    target = path.encode("utf-8", "surrogateescape")
    places = [headers, names, target]
    if b"%" in target:
        places.append(unquote_to_bytes(target))
    return any(index.foreign_in(data, own) for data in places)


def _own_credential(
    secrets: Sequence[Placeholder],
    fields: Fields,
    basics: dict[int, tuple[bytes, bytes]],
    path: str,
) -> bool:
    """Whether a credential of the sandbox's own travels beside the placeholders (`require`,
    D207): an `Authorization` field, or a field (a query parameter) of a name that carries
    a placeholder elsewhere in the request, without one of the entry's placeholders."""
    needles = [s.placeholder.encode() for s in secrets]

    def carries(number: int, value: bytes) -> bool:
        texts = (value, basics[number][1]) if number in basics else (value,)
        return any(n in t for n in needles for t in texts)

    marked = {b"authorization"} | {n.lower() for i, (n, v) in enumerate(fields) if carries(i, v)}
    if any(n.lower() in marked and not carries(i, v) for i, (n, v) in enumerate(fields)):
        return True
    params = [p.partition("=") for p in path.partition("?")[2].split("&")]
    found = [
        (k, any(n in v.encode("utf-8", "surrogateescape") for n in needles)) for k, _, v in params
    ]
    names = {k for k, carried in found if carried}
    return any(k in names and not carried for k, carried in found)


def _basic(value: bytes) -> tuple[bytes, bytes] | None:
    """A `Basic` credential: (the scheme as sent, with its space; the decoded credential)."""
    if b"BASIC " not in value[:16].upper():
        return None  # the usual header: one short search
    stripped = value.lstrip()
    if stripped[: len(_BASIC)].lower() != _BASIC:
        return None
    encoded = stripped[len(_BASIC) :].strip()
    try:
        decoded = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        return None
    return value[: len(value) - len(stripped) + len(_BASIC)], decoded


def _swap_header(
    value: bytes,
    credential: tuple[bytes, bytes] | None,
    secrets: Sequence[Placeholder],
    found: set[str],
) -> bytes:
    """`value` (whose `Basic` credential, if any, is `credential`) with `secrets` swapped."""
    if credential is not None:
        scheme, decoded = credential
        swapped = _replace(decoded, secrets, found, lambda s: s.value.reveal().encode())
        if swapped != decoded:
            return scheme + base64.b64encode(swapped)
    return _replace(value, secrets, found, lambda s: s.value.reveal().encode())


def _swap_query(path: str, secrets: Sequence[Placeholder], found: set[str]) -> str:
    """`path` with the placeholders in its query parameter values replaced (percent-encoded)."""
    head, question, query = path.partition("?")
    if not question:
        return path
    params = query.split("&")
    for number, param in enumerate(params):
        key, equals, value = param.partition("=")
        if not equals:
            continue
        raw = value.encode("utf-8", "surrogateescape")
        swapped = _replace(raw, secrets, found, lambda s: quote(s.value.reveal(), safe="").encode())
        if swapped != raw:
            params[number] = f"{key}={swapped.decode('utf-8', 'surrogateescape')}"
    return f"{head}?{'&'.join(params)}"


def _replace(
    data: bytes, secrets: Sequence[Placeholder], found: set[str], spelled: Spelling
) -> bytes:
    for secret in secrets:
        placeholder = secret.placeholder.encode()
        if placeholder in data:
            if not secret.value.deferred:  # a credential's: written once fetched (1.13)
                data = data.replace(placeholder, spelled(secret))
            found.add(secret.placeholder)
    return data
