"""Request head bytes a proxy must not forward (RFC 9110 5.1, 5.5, 9.1; RFC 9112 5.2).

A lenient upstream reads a bare CR as a line end, unfolds an obs-fold line into a
header of its own, or stops a value at NUL: bytes the sandbox hides inside one field
value become a second Host or a Transfer-Encoding next to the injected credential.
mitmproxy's HTTP/1 reader keeps all of them (it joins an obs-fold continuation into the
value as CRLF SP); h2 rejects only NUL, CR and LF in values. So the request stage checks
every field, for HTTP/1 and HTTP/2 alike, and refuses the request (`bad_request`,
docs/decisions.md D21) rather than repairing it.

Pure: bytes in, the first problem out (never the offending value, which may be a secret
the sandbox holds). Invariant: a head for which `head_problem` returns None has a token
method, token field names, and field values without control bytes other than HTAB.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# RFC 9110 5.6.2: token = 1*tchar
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# RFC 9110 5.5: field-value bytes are VCHAR, obs-text, SP and HTAB; every other control
# byte (NUL, CR, LF, which is how an obs-fold arrives here, ESC, DEL, ...) is refused.
_FORBIDDEN_IN_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")

# Fields by which a client asks the upstream to treat a request as another method: a
# `GET` carrying one may be a `DELETE` to the upstream. The rules judge the method each
# names (1.8) and such a request is never sent twice (D682).
METHOD_OVERRIDES = frozenset({"x-http-method-override", "x-http-method", "x-method-override"})


def head_problem(method: bytes, fields: Iterable[tuple[bytes, bytes]]) -> str | None:
    """What makes this request head unforwardable, or None when nothing does."""
    if not _TOKEN.fullmatch(method):
        return "method is not a token"
    return fields_problem(fields)


def fields_problem(fields: Iterable[tuple[bytes, bytes]]) -> str | None:
    """What makes a header or trailer block unforwardable, or None when nothing does."""
    for index, (name, value) in enumerate(fields):
        if not _TOKEN.fullmatch(name):
            return f"header field {index}: name is not a token"
        if _FORBIDDEN_IN_VALUE.search(value):
            return f"header field {index}: control character in value (bare CR, obs-fold, NUL)"
    return None
