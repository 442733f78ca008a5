"""A header looked up by name in one call, not six per field (issue 36, D310).

mitmproxy's `Headers` is a `MutableMapping` over a tuple of raw `(name, value)` byte pairs.
`headers.get("content-length")` goes `Mapping.get` → `_MultiDict.__getitem__` →
`Headers.get_all` → `_always_bytes` → `strutils.always_bytes` → `_MultiDict.get_all`, which
calls the static `_kconv` once per field and `_native` once per match, then
`_reduce_values`: about ten Python calls plus one per field. mitmproxy's HTTP/1 layers
look up `content-length`, `transfer-encoding`, `connection`, `expect` and `upgrade` in
every request and response (16 lookups per kept-alive request), and the policy a few more:
5.5 % of the proxy's samples in scenario 1 (b).

`install()` gives `Headers` its own `get_all`, `__getitem__`, `get` and `__contains__` that
do the same in one loop over the fields, with the same outcome for every argument: the
name is made bytes as `_always_bytes` does (a name neither `str`, `bytes` nor None raises
the same `TypeError`; None fails as before), compared to each field's name after
`bytes.lower()` (mitmproxy's `_kconv`), each match decoded as `_native` does, multiple
values folded with ", " (`_reduce_values`); a missing name raises `KeyError(name)` or
gives the default.
tests/runtime/test_headerlookup.py compares each against mitmproxy's own on a table of
headers and names, and pins the source it replaces, so an upgrade that changes what a
lookup means fails there.
"""

from __future__ import annotations

from typing import Any

from mitmproxy import http

REPLACED = ("get_all", "__getitem__", "get", "__contains__")
ORIGINALS = {name: http.Headers.__dict__.get(name) for name in REPLACED}
_always_bytes = http._always_bytes


def _name(key: Any) -> bytes:
    """`_kconv(_always_bytes(key))`: the field name a lookup compares with."""
    if type(key) is str:
        return key.encode("utf-8", "surrogateescape").lower()
    if type(key) is bytes:
        return key.lower()
    return _always_bytes(key).lower()  # None raises as mitmproxy's does (None.lower)


def get_all(self: http.Headers, name: str | bytes) -> list[str]:
    """Every value of field `name`, in order, unfolded (mitmproxy's `Headers.get_all`)."""
    wanted = _name(name)
    return [
        value.decode("utf-8", "surrogateescape")
        for key, value in self.fields
        if key.lower() == wanted
    ]


def getitem(self: http.Headers, key: str | bytes) -> str:
    values = get_all(self, key)
    if not values:
        raise KeyError(key)
    return ", ".join(values)


def get(self: http.Headers, key: str | bytes, default: Any = None) -> Any:
    values = get_all(self, key)
    return ", ".join(values) if values else default


def contains(self: http.Headers, key: Any) -> bool:
    # Decoding what matched, as mitmproxy's does: a value that is not bytes raises alike.
    return bool(get_all(self, key))


def install() -> None:
    """From now on `Headers` looks a name up in one loop (idempotent)."""
    http.Headers.get_all = get_all  # type: ignore[method-assign]
    http.Headers.__getitem__ = getitem  # type: ignore[method-assign,assignment]
    http.Headers.get = get  # type: ignore[method-assign,assignment]
    http.Headers.__contains__ = contains  # type: ignore[method-assign,assignment]


def uninstall() -> None:
    """mitmproxy's lookups again (for tests that compare both)."""
    for name, original in ORIGINALS.items():
        if original is None:
            if name in http.Headers.__dict__:
                delattr(http.Headers, name)
        else:
            setattr(http.Headers, name, original)
