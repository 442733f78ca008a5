"""Hypothesis strategies for the protocol fuzzer (tests/e2e/test_attack_fuzz_e2e.py): hostile requests.

Everything here builds what a hostile sandbox may send, as bytes: request methods,
request-targets (origin-form, absolute-form with many authority spellings, `*`,
authority-form), Host header variants, header blocks with forbidden bytes (CR, LF,
NUL, obs-fold, other controls, high bytes, very long values) and HTTP/2 header lists
(pseudo-header sets that disagree, repeat or are missing, connection-specific
fields). The spellings the review of issue 10 used are in `NASTY_*`, so that the
tests can also name them as explicit `@example`s.

Invariant: no generated request carries a body or a framing header (Content-Length,
Transfer-Encoding); request smuggling through bodies is out of this fuzzer's scope
(docs/decisions.md D36), so every request ends at its CRLFCRLF and one read answers it.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

DECIDED = "api.allowed.test"  # the CONNECT host of every fuzzed tunnel: a transform entry
PLAIN = "plain.allowed.test"  # the transform entry allowed over plain HTTP

# Authorities a target or Host may name: the decided host spelled otherwise, other hosts
# (allowed, wildcard, unlisted), numeric and bracketed addresses, userinfo, ports,
# percent-encoding, trailing dots, IDNA and a homoglyph.
NASTY_AUTHORITIES: list[bytes] = [
    b"api.allowed.test",
    b"API.Allowed.Test",
    b"api.allowed.test.",
    b"api.allowed.test:443",
    b"api.allowed.test:8443",
    b"api.allowed.test:0",
    b"api.allowed.test:99999",
    b"api.allowed.test:",
    b"evil.test",
    b"other.allowed.test",
    b"x.wild.test",
    b"notlisted.test",
    b"api.allowed.test@evil.test",
    b"evil.test@api.allowed.test",
    b"user:pw@api.allowed.test",
    b"api.allowed.test.evil.test",
    b"api%2eallowed.test",
    b"api.allowed.test%00.evil.test",
    b"127.0.0.1",
    b"2130706433",
    b"0x7f000001",
    b"0177.0.0.1",
    b"127.1",
    b"198.18.1.2",
    b"[::1]",
    b"[::ffff:127.0.0.1]",
    b"[::ffff:198.18.1.2]:443",
    b"[fe80::1%25eth0]",
    b"xn--pi-7ba.allowed.test",
    "аpi.allowed.test".encode(),  # Cyrillic a
    b"",
]

NASTY_TARGETS: list[bytes] = [
    b"/",
    b"/fuzz?q=1",
    b"https://evil.test/x",
    b"http://evil.test/x",
    b"https://api.allowed.test/x",
    b"https://api.allowed.test:443/x",
    b"https://api.allowed.test@evil.test/x",
    b"//evil.test/x",
    b"evil.test:443",
    b"api.allowed.test:443",
    b"*",
    b"HTTPS://EVIL.TEST/x",
    b"ftp://evil.test/x",
    b"/x#frag",
    b"/%2e%2e/%00",
]

METHODS: list[bytes] = [
    b"GET", b"POST", b"HEAD", b"OPTIONS", b"PUT", b"DELETE", b"PATCH", b"get", b"CONNECT", b"X-Y",
]  # fmt: skip

TCHAR = b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
FRAMING = (b"content-length", b"transfer-encoding")

# Header values that RFC 9112 5 and 9110 5.5 forbid a proxy to forward as they are.
NASTY_VALUES: list[bytes] = [
    b"a\rb",  # bare CR
    b"a\r\n b",  # obs-fold
    b"a\r\n\tb",
    b"a\x00b",  # NUL
    b"a\nb",  # bare LF
    b"a\nHost: evil.test",
    b"a\r\nHost: evil.test",
    b"a\x7fb",
    b"a\x0bb",
    b"\xff\xfe",
    b" padded ",
    b"x" * 9000,
]
NASTY_NAMES: list[bytes] = [b"X Y", b"X-Y ", b"X\x00Y", b"", b"Host\r", b":authority", b"\xffX"]


PATH_PIECES = b"a / ? = & % %2F %00 # .. @ : \xc3\xa9 ~ { \\".split()


def _authority() -> st.SearchStrategy[bytes]:
    label = st.text("abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12)
    generated = st.builds(
        lambda labels, port: ".".join(labels).encode() + port,
        st.lists(label, min_size=1, max_size=4),
        st.sampled_from([b"", b":443", b":80", b":8443", b":65536"]),
    )
    return st.one_of(st.sampled_from(NASTY_AUTHORITIES), generated)


def _path() -> st.SearchStrategy[bytes]:
    chars = st.sampled_from(PATH_PIECES)
    return st.lists(chars, max_size=8).map(lambda parts: b"/" + b"".join(parts))


def request_targets() -> st.SearchStrategy[bytes]:
    scheme = st.sampled_from([b"https", b"http", b"HTTPS", b"ftp", b"ws"])
    absolute = st.builds(lambda s, a, p: s + b"://" + a + p, scheme, _authority(), _path())
    return st.one_of(st.sampled_from(NASTY_TARGETS), _path(), absolute, _authority(), st.just(b"*"))


def open_finding(authority: bytes, decided: str = DECIDED) -> bool:
    """A Host / `:authority` value that was forwarded as sent before D35 (empty, or the
    decided host with a trailing dot). D35 closed these; none is left out any more."""
    return False


def host_authorities(decided: str = DECIDED) -> st.SearchStrategy[bytes]:
    """Authorities for a Host field: the decided host spelled otherwise, and all others."""
    d = decided.encode()
    spellings = [d, d.upper(), d + b":443", d + b":8443", b"u@" + d, d + b"@evil.test", d + b".x"]
    either = st.sampled_from(spellings) | _authority()
    return either.filter(lambda a: not open_finding(a, decided))


def host_lines(decided: str = DECIDED) -> st.SearchStrategy[list[bytes]]:
    """Host header lines: none, one or several, with casing and spacing variants (a request
    without Host gets the decided host's, D35)."""
    name = st.sampled_from([b"Host", b"host", b"HOST"])
    line = st.builds(
        lambda n, sep, a: n + sep + a,
        name,
        st.sampled_from([b": ", b":"]),
        host_authorities(decided),
    )
    return st.one_of(
        st.just([b"Host: " + decided.encode()]), st.lists(line, min_size=0, max_size=3)
    )


@dataclass(frozen=True)
class Field:
    name: bytes
    value: bytes


def _name() -> st.SearchStrategy[bytes]:
    token = st.text(TCHAR.decode(), min_size=1, max_size=16).map(str.encode)
    ok = token.filter(lambda n: n.lower() not in FRAMING)
    return st.one_of(
        ok,
        st.sampled_from([b"Authorization", b"X-Api-Key", b"x-api-key", b"Connection", b"Cookie"]),
        st.sampled_from(NASTY_NAMES),
    )


def _value() -> st.SearchStrategy[bytes]:
    plain = st.binary(max_size=40)
    printable = st.text(" !\"#$%&'()*+,-./0123456789:;<=>?@ABCXYZabcxyz\t", max_size=40)
    return st.one_of(st.sampled_from(NASTY_VALUES), printable.map(str.encode), plain)


def header_blocks() -> st.SearchStrategy[list[Field]]:
    """Mostly clean fields with at most one hostile one, so that the rest of a head stays
    acceptable often enough for the hostile part to be what the proxy has to judge."""
    clean = st.builds(
        Field,
        st.text(TCHAR.decode(), min_size=1, max_size=12).map(str.encode),
        st.text("abcxyz0123 ;=,/-", max_size=20).map(str.encode),
    ).filter(lambda f: f.name.lower() not in FRAMING + (b"host",))
    hostile = st.builds(Field, _name(), _value())

    def place(fields: list[Field], bad: Field | None, at: int) -> list[Field]:
        return fields if bad is None else fields[:at] + [bad] + fields[at:]

    return st.builds(place, st.lists(clean, max_size=3), st.none() | hostile, st.integers(0, 3))


@dataclass(frozen=True)
class Head:
    """One HTTP/1.1 request head, as the sandbox writes it inside the tunnel."""

    method: bytes
    target: bytes
    hosts: list[bytes]
    fields: list[Field]

    def wire(self) -> bytes:
        lines = [self.method + b" " + self.target + b" HTTP/1.1", *self.hosts]
        lines += [f.name + b": " + f.value for f in self.fields]
        lines.append(b"Connection: close")
        return b"\r\n".join(lines) + b"\r\n\r\n"


def request_heads(decided: str = DECIDED) -> st.SearchStrategy[Head]:
    """A clean head changed in one part (so that the change is what the proxy judges), or
    a head changed in every part."""
    method, methods = st.just(b"GET"), st.sampled_from(METHODS)
    target, host = st.just(b"/fuzz"), st.just([b"Host: " + decided.encode()])
    none: st.SearchStrategy[list[bytes]] = st.just([])
    hosts = host_lines(decided)
    return st.one_of(
        st.builds(Head, methods, target, host, none),
        st.builds(Head, method, request_targets(), host, none),
        st.builds(Head, method, target, hosts, none),
        st.builds(Head, method, target, host, header_blocks()),
        st.builds(Head, method | methods, request_targets(), hosts, header_blocks()),
    )


def plain_heads() -> st.SearchStrategy[Head]:
    """Absolute-form requests to the plain transform entry: the Host and fields vary."""
    method = st.just(b"GET") | st.sampled_from(METHODS)
    target = st.builds(lambda p: b"http://" + PLAIN.encode() + p, _path())
    hosts = st.just([b"Host: " + PLAIN.encode()]) | host_lines(PLAIN)
    return st.builds(Head, method, target, hosts, header_blocks())


# -- HTTP/2 -----------------------------------------------------------------------------

CONNECTION_SPECIFIC = [
    (b"connection", b"keep-alive"),
    (b"keep-alive", b"timeout=5"),
    (b"proxy-connection", b"keep-alive"),
    (b"transfer-encoding", b"chunked"),
    (b"upgrade", b"websocket"),
    (b"te", b"gzip"),
    (b"host", b"evil.test"),
]


def _h2_field() -> st.SearchStrategy[tuple[bytes, bytes]]:
    lower = _name().map(bytes.lower).filter(lambda n: n and n not in FRAMING + (b"host",))
    return st.one_of(
        st.sampled_from(CONNECTION_SPECIFIC),
        st.tuples(lower, _value()),
        st.tuples(st.sampled_from([b"X-Upper", b"X-Api-Key"]), st.just(b"v")),
    )


def h2_header_lists() -> st.SearchStrategy[list[tuple[bytes, bytes]]]:
    """A HEADERS block: a pseudo-header set (maybe missing, repeated, disagreeing), then fields."""
    # Each part is its clean value half of the time, so that one change alone is common.
    method = st.just(b"GET") | st.sampled_from([b"POST", b"OPTIONS", b"CONNECT", b"get", b""])
    scheme = st.just(b"https") | st.sampled_from([b"http", b"ftp", b"HTTPS", b""])
    path = st.just(b"/fuzz") | st.sampled_from(NASTY_TARGETS) | request_targets()
    authority = st.one_of(st.just(DECIDED.encode()), host_authorities())
    pseudo = st.builds(
        lambda m, s, p, a: [(b":method", m), (b":scheme", s), (b":path", p), (b":authority", a)],
        method,
        scheme,
        path,
        authority,
    )
    extra_pseudo = st.lists(
        st.tuples(
            st.sampled_from([b":authority", b":path", b":method", b":status"]), host_authorities()
        ),
        max_size=2,
    )

    def assemble(
        base: list[tuple[bytes, bytes]],
        drop: int,
        extra: list[tuple[bytes, bytes]],
        fields: list[tuple[bytes, bytes]],
        pseudo_last: bool,
    ) -> list[tuple[bytes, bytes]]:
        kept = [h for i, h in enumerate(base) if i != drop]
        return fields + kept + extra if pseudo_last else kept + extra + fields

    return st.builds(
        assemble,
        pseudo,
        st.integers(-1, 3) | st.just(-1),
        extra_pseudo,
        st.lists(_h2_field(), max_size=4),
        st.booleans(),
    )


# -- CONNECT authorities ------------------------------------------------------------------

CONNECT_HOSTS: list[bytes] = [
    b"api.allowed.test", b"API.ALLOWED.TEST", b"plain.allowed.test", b"x.wild.test",
    b"ports.allowed.test", b"notlisted.test", b"evil.test", b"internal.test", b"rebind.test",
    b"self.allowed.test", b"mixed.allowed.test", b"loop6.wild.test", b"localhost",
    b"198.18.1.2", b"127.0.0.1", b"2130706433", b"0x7f000001", b"0177.0.0.1", b"127.1",
    b"169.254.169.254", b"0.0.0.0", b"[::1]", b"[::ffff:127.0.0.1]", b"[::ffff:198.18.1.2]",
    b"[64:ff9b::7f00:1]", b"api.allowed.test@evil.test", b"api%2eallowed.test", b"",
    b"api.allowed.test.evil.test", b"\xef\xbd\x81pi.allowed.test",
]  # fmt: skip


def connect_authorities() -> st.SearchStrategy[bytes]:
    """`host:port` for a CONNECT: names and address spellings (trailing dots included, D35),
    ports in and out of range."""
    generated = st.text("abcxyz019-.", min_size=1, max_size=10).map(
        lambda t: t.encode() + b".allowed.test"
    )
    host = st.sampled_from(CONNECT_HOSTS) | generated
    port = st.sampled_from([b":443", b":8443", b":0", b":65536", b":443:443", b""])
    return st.builds(bytes.__add__, host, port)
