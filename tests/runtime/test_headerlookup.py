"""A header looked up in one loop (runtime/engine/headerlookup.py, D310): every lookup answers what
mitmproxy's own answers, value or exception, on a table of headers and names; the lean
engine installs it; the mitmproxy source it replaces is pinned."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from mitmproxy import http
from mitmproxy.coretypes import multidict

from sandbox_egress.runtime.engine import headerlookup

FIELDS: dict[str, tuple[tuple[Any, Any], ...]] = {
    "empty": (),
    "usual": ((b"Host", b"example.com"), (b"Content-Length", b"12"), (b"Accept", b"*/*")),
    "repeated, mixed case": (
        (b"Accept", b"text/html"),
        (b"X-Other", b"1"),
        (b"aCCept", b"application/xml"),
        (b"ACCEPT", b""),
    ),
    "not utf-8": ((b"X-Raw", b"caf\xe9 \xff"), (b"X-\xc4", b"umlaut name")),
    "non-ascii name": ((b"X-\xc3\x84rger", b"utf-8 name"),),
    "a str field (invalid)": (("Host", "str name"), (b"Host", b"bytes name")),
    "a str value (invalid)": ((b"X-Str", "not bytes"),),
}
NAMES: tuple[Any, ...] = (
    "host", "HOST", b"host", "content-length", "accept", b"ACCEPT", "missing", "",
    "x-raw", "x-\udcc4", b"x-\xc4", "X-\xc4rger", "x-\xe4rger", "x-str",
    None, 7, 1.5,
)  # fmt: skip


def outcome(call: Callable[[], Any]) -> Any:
    try:
        return ("value", call())
    except Exception as error:  # the exact type and arguments count, not only that it raised
        return ("raised", type(error), error.args if isinstance(error, KeyError) else None)


LOOKUPS: dict[str, Callable[[http.Headers, Any], Any]] = {
    "get_all": lambda h, n: h.get_all(n),
    "[]": lambda h, n: h[n],
    "get": lambda h, n: h.get(n),
    "get with default": lambda h, n: h.get(n, "dflt"),
    "in": lambda h, n: n in h,
}


def answers() -> dict[tuple[str, str, str], Any]:
    found = {}
    for table, fields in FIELDS.items():
        headers = http.Headers()
        headers.fields = fields  # as a layer or addon may set them, unchecked
        for name in NAMES:
            for lookup, call in LOOKUPS.items():
                found[table, repr(name), lookup] = outcome(lambda: call(headers, name))  # noqa: B023
    return found


@pytest.fixture
def restore() -> Iterator[None]:
    installed = http.Headers.__dict__.get("get") is headerlookup.get
    yield
    (headerlookup.install if installed else headerlookup.uninstall)()


def test_every_lookup_answers_what_mitmproxys_does(restore: None) -> None:
    headerlookup.uninstall()
    assert http.Headers.get is Mapping.get  # mitmproxy's own chain
    theirs = answers()
    headerlookup.install()
    assert http.Headers.get is headerlookup.get
    ours = answers()
    assert ours == theirs
    # The table reaches each kind of answer.
    kinds = {(lookup, value[0]) for (_t, _n, lookup), value in ours.items()}
    assert {(lookup, "value") for lookup in LOOKUPS} <= kinds
    assert {(lookup, "raised") for lookup in LOOKUPS} <= kinds
    assert ours["repeated, mixed case", "'accept'", "get"] == (
        "value", "text/html, application/xml, "
    )  # fmt: skip
    assert ours["repeated, mixed case", "b'ACCEPT'", "get_all"] == (
        "value", ["text/html", "application/xml", ""]
    )  # fmt: skip
    assert ours["not utf-8", "'x-raw'", "[]"] == ("value", "caf\udce9 \udcff")
    assert ours["usual", "'missing'", "[]"] == ("raised", KeyError, ("missing",))
    assert ours["usual", "'missing'", "get with default"] == ("value", "dflt")
    assert ours["usual", "7", "in"] == ("raised", TypeError, None)


def test_a_request_and_a_response_read_the_same(restore: None) -> None:
    headerlookup.install()
    request = http.Request.make(
        "POST", "https://example.com/p", b"body", [(b"Content-Type", b"text/plain"), (b"X-A", b"1")]
    )
    request.headers.add("x-a", "2")
    assert request.headers["content-length"] == "4"
    assert request.headers.get("X-A") == "1, 2"
    assert "CONTENT-TYPE" in request.headers and "x-b" not in request.headers
    request.headers["x-a"] = "3"  # setting goes through mitmproxy's set_all, unchanged
    assert request.headers.get_all("x-a") == ["3"]
    del request.headers["X-A"]
    assert request.headers.get("x-a") is None and "x-a" not in request.headers


def test_the_lean_engine_installs_it(restore: None) -> None:
    from sandbox_egress.runtime.engine.lean import LeanMaster, LeanOptions

    async def main() -> None:
        LeanMaster(LeanOptions())

    headerlookup.uninstall()
    asyncio.run(main())
    assert http.Headers.__dict__["get"] is headerlookup.get
    assert http.Headers.__dict__["__contains__"] is headerlookup.contains


def test_the_mitmproxy_source_it_replaces() -> None:
    # Headers itself defines get_all only; get, [] and `in` come from _MultiDict and Mapping.
    assert headerlookup.ORIGINALS["get"] is None
    assert headerlookup.ORIGINALS["__getitem__"] is None
    assert headerlookup.ORIGINALS["__contains__"] is None
    original = headerlookup.ORIGINALS["get_all"]
    assert original is not None
    get_all = inspect.getsource(original)
    assert "name = _always_bytes(name)" in get_all
    assert "return [_native(x) for x in super().get_all(name)]" in get_all
    base = inspect.getsource(multidict._MultiDict.get_all)
    assert "key = self._kconv(key)" in base
    assert "[value for k, value in self.fields if self._kconv(k) == key]" in base
    getitem = inspect.getsource(multidict._MultiDict.__getitem__)
    assert "raise KeyError(key)" in getitem and "self._reduce_values(values)" in getitem
    assert "return key.lower()" in inspect.getsource(http.Headers._kconv)
    assert 'return ", ".join(values)' in inspect.getsource(http.Headers._reduce_values)
    assert 'x.decode("utf-8", "surrogateescape")' in inspect.getsource(http._native)
    assert '"utf-8", "surrogateescape"' in inspect.getsource(http._always_bytes)
