"""The one canonical spelling of a request path, for entries with rules
(docs/configuration.md#rules; D104).

`canonical_path` takes the origin-form request-target exactly as sent and returns the
path (before `?`) that rules are matched against, or None when an upstream could read
its bytes as another path. Rules never match a path loosely: an ambiguous spelling is
refused (`bad_request`), not guessed at.

What it does:
* percent-encoded unreserved characters (RFC 3986 2.3: `A-Z a-z 0-9 - _ ~`) are decoded;
  every other escape is kept, with its hex digits in upper case (`%2f` -> `%2F`);
* refused (None): a `\\`, a NUL, an encoded `/`, `\\`, `.` or NUL, a `%` not followed by
  two hex digits, a `.` or `..` segment, an empty segment before the last one (`//`,
  which nginx merges), a `;` (path parameters, which Java servers strip from a segment).

Invariant: for every path it returns, the segments an upstream that decodes the path
once sees are exactly the segments of the returned path decoded once (the property
test against nginx and a WSGI server, tests/proxy/test_paths_upstreams.py).

`allow_encoded_slash` (an entry's `allow_encoded_slash: true`) keeps `%2F` inside a
segment, as `%2F`: npm's scoped package names (`/@scope%2fname`) need it, and a
registry that reads `%2F` as part of a name is what the operator vouches for.
"""

from __future__ import annotations

_HEX = frozenset("0123456789abcdefABCDEF")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_~")
# Escapes that would change a path's segments (or end it) once an upstream decodes them.
_REFUSED_ESCAPES = frozenset({"2E", "5C", "00"})


def split_target(target: str) -> tuple[str, str]:
    """(path, query) of an origin-form request-target; the query without its `?`."""
    path, _, query = target.partition("?")
    return path, query


def canonical_path(path: str, *, allow_encoded_slash: bool = False) -> str | None:
    """The path rules compare, or None when its meaning is ambiguous (see the module)."""
    if not path.startswith("/") or "\\" in path or "\0" in path or ";" in path:
        return None
    if "%" not in path:
        return path if _plain_segments(path) else None
    out: list[str] = []
    i, size = 0, len(path)
    while i < size:
        char = path[i]
        if char != "%":
            out.append(char)
            i += 1
            continue
        digits = path[i + 1 : i + 3]
        if len(digits) != 2 or not set(digits) <= _HEX:
            return None
        digits = digits.upper()
        decoded = chr(int(digits, 16))
        if decoded in _UNRESERVED:
            out.append(decoded)
        elif digits in _REFUSED_ESCAPES or (digits == "2F" and not allow_encoded_slash):
            return None
        else:
            out.append("%" + digits)
        i += 3
    result = "".join(out)
    return result if _plain_segments(result) else None


def _plain_segments(path: str) -> bool:
    """No `.` or `..` segment, and no empty segment but the last."""
    if "//" in path or "/." not in path:
        return "//" not in path
    segments = path.split("/")[1:]
    return not any(s in (".", "..") for s in segments) and "" not in segments[:-1]
