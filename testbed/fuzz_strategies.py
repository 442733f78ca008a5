"""Hypothesis strategies for the protocol fuzzer (tests/e2e/test_fuzz_e2e.py; D34).

What a hostile sandbox controls in one request: the method, the request-target, the
Host header(s), the rest of the header block (HTTP/1, as raw bytes) and the HTTP/2
header list. The strategies mix spellings of the tunnel's own host (which an honest
client uses) with every way the review and RFC 3986/9112 parser differentials spell
another host: userinfo, numeric IPv4 forms, IPv6 brackets, ports, percent-encoding,
trailing dots, IDNA and look-alike Unicode, case, backslashes, fragments.

Invariants: no generated field is named Content-Length or Transfer-Encoding (requests
have no body, so the proxy never waits for one; a value may still smuggle such a line
behind a bare CR/LF, which must be refused). `one_request` tells whether a head's only
empty line is its end (one connection, one request); the test skips the others.
Strategies are pure data; the test sends them.
"""

from __future__ import annotations

from hypothesis import strategies as st

HOST = "api.allowed.test"  # the tunnel's host: a transform entry
OTHER_ALLOWED = "other.allowed.test"

# Spellings that name the tunnel's host (or try to look as if they do).
HOST_SPELLINGS = [
    HOST,
    HOST.upper(),
    "Api.Allowed.Test",
    HOST + ".",
    HOST + ":443",
    HOST + ":0443",
    HOST + ":8443",
    HOST + ":",
    "xn--api.allowed.test",
    "\uff41pi.allowed.test",  # fullwidth "a": NFKC maps it to "a"
    "api.allowed.test\u3002",  # ideographic full stop
    "api%2eallowed.test",
    "api.allowed.test%00",
    "api.allowed.test\\",
]
# Spellings that name, or a lenient parser reads as, another host.
OTHER_SPELLINGS = [
    "evil.test",
    "notlisted.test",
    OTHER_ALLOWED,
    "api.allowed.test.evil.test",
    "evil.test.api.allowed.test",
    "api.allowed.test@evil.test",
    "evil.test@api.allowed.test",
    "user:pw@api.allowed.test",
    "api.allowed.test:443@evil.test",
    "evil.test\\@api.allowed.test",
    "evil.test%2f@api.allowed.test",
    "evil.test#@api.allowed.test",
    "evil.test?@api.allowed.test",
    "127.0.0.1",
    "2130706433",
    "0x7f.1",
    "0177.0.0.1",
    "198.18.1.2",
    "3323068674",  # 198.18.1.2 as one number
    "[::1]",
    "[::ffff:198.18.1.2]",
    "[::ffff:127.0.0.1]",
    "[fe80::1%25eth0]",
    "::1",
    "",
    " ",
    "api.allowed.test evil.test",
    "api.allowed.test,evil.test",
]
AUTHORITIES = HOST_SPELLINGS + OTHER_SPELLINGS

_path_char = st.sampled_from(list("/abcXYZ019-._~%?=&;:@!$'()*+,") + ["%2e", "%2f", "..", "//"])
PATHS = st.lists(_path_char, max_size=12).map(lambda parts: "/" + "".join(parts))
_nasty_path_char = st.sampled_from(["#", "\\", " ", "\x00", "\x7f", "\x01", "\xe9", "\t", "\u00ff"])


@st.composite
def request_targets(draw: st.DrawFn) -> str:
    """origin-form, absolute-form with any authority spelling, asterisk, and malformed ones."""
    path = draw(PATHS)
    if draw(st.booleans()):
        path += draw(_nasty_path_char) + draw(PATHS)[1:]
    kind = draw(st.sampled_from(["origin", "absolute", "absolute", "asterisk", "bare", "scheme"]))
    if kind == "origin":
        return path
    if kind == "asterisk":
        return "*"
    authority = draw(st.sampled_from(AUTHORITIES) | st.text("abc.:@[]", max_size=12))
    if kind == "bare":  # no scheme: "api.allowed.test/x"
        return authority + path
    scheme = draw(st.sampled_from(["https", "http", "HTTPS", "HtTp", "ftp", "ws", "https:"]))
    return f"{scheme}://{authority}{draw(st.sampled_from([path, '', '?q', '#f']))}"


METHODS = st.sampled_from(
    ["GET", "GET", "POST", "PUT", "HEAD", "OPTIONS", "DELETE", "PATCH", "get", "M-SEARCH"]
) | st.sampled_from(["GET(", "G@T", "GET\x00", "GE\x7fT", "G\xc9T", "CONNECT", "TRACE"])

# Header names: ordinary, case variants of the sensitive ones, and non-tokens.
_NAMES = [
    b"X-A",
    b"Accept",
    b"authorization",
    b"AUTHORIZATION",
    b"x-api-key",
    b"X-Api-Key",
    b"host",
    b"HOST",
    b"X-Forwarded-Host",
    b"Forwarded",
    b"Connection",
    b"Proxy-Connection",
    b"Upgrade",
    b"Keep-Alive",
    b"TE",
    b"X\x00Y",
    b"X Y",
    b"Host ",
    b" Host",
    b"X(Y",
    b"X\xe9",
]
_VALUE_PIECES = [
    b"v",
    b"evil.test",
    b"api.allowed.test",
    b"Bearer sandbox-token",
    b" ",
    b"\t",
    b"\r",
    b"\n",
    b"\r\n ",  # obs-fold
    b"\r\n\t",
    b"\x00",
    b"\x01",
    b"\x0b",
    b"\x1b",
    b"\x7f",
    b"\xe9",
    b"\xff\xfe",
    b"\r\nHost: evil.test",
    b"\nTransfer-Encoding: chunked",
    b"close",
    b"chunked",
    b"h2c",
]
HEADER_VALUES = st.lists(st.sampled_from(_VALUE_PIECES), max_size=6).map(b"".join) | st.builds(
    lambda n: b"x" * n, st.integers(min_value=1000, max_value=20000)
)
HEADER_FIELDS = st.lists(st.tuples(st.sampled_from(_NAMES), HEADER_VALUES), max_size=5)
HOST_HEADERS = st.lists(
    st.sampled_from(AUTHORITIES).map(lambda s: s.encode("utf-8")), min_size=0, max_size=2
)


def http1_head(
    method: str, target: str, hosts: list[bytes], fields: list[tuple[bytes, bytes]]
) -> bytes:
    """The raw request head: request line, Host headers, other fields, `Connection: close`."""
    line = f"{method} {target} HTTP/1.1\r\n".encode()
    block = b"".join(b"Host: " + host + b"\r\n" for host in hosts)
    block += b"".join(name + b": " + value + b"\r\n" for name, value in fields)
    return line + block + b"Connection: close\r\n\r\n"


def one_request(head: bytes) -> bool:
    """True when the head's only empty line (CRLF CRLF, LF LF, LF CRLF) is at its end."""
    body = head[:-2]
    return not any(marker in body for marker in (b"\n\n", b"\n\r\n"))


# -- HTTP/2 ----------------------------------------------------------------------------------

H2_PATHS = request_targets().filter(lambda t: "\x00" not in t and "\r" not in t)
_H2_EXTRA = [
    (b"host", b"api.allowed.test"),
    (b"host", b"evil.test"),
    (b"connection", b"keep-alive"),
    (b"keep-alive", b"timeout=5"),
    (b"proxy-connection", b"keep-alive"),
    (b"transfer-encoding", b"chunked"),
    (b"upgrade", b"h2c"),
    (b"te", b"trailers"),
    (b"te", b"gzip"),
    (b"authorization", b"Bearer sandbox-token"),
    (b"x-api-key", b"sandbox-key"),
    (b"X-Upper", b"v"),
    (b"x-ctl", b"a\x01b"),
    (b"x-high", b"\xe9"),
    (b"x-tab", b"a\tb"),
    (b"x-space", b" padded "),
    (b":authority", b"evil.test"),
    (b":path", b"/second"),
    (b":method", b"POST"),
    (b":scheme", b"http"),
    (b":protocol", b"websocket"),
    (b":status", b"200"),
]


@st.composite
def h2_header_lists(draw: st.DrawFn) -> list[tuple[bytes, bytes]]:
    """A request header list: pseudo-headers (some missing, some duplicated, some after a
    regular field), `:authority` and `host` that may disagree, connection-specific fields."""
    # No HEAD: the proxy's own refusals of a HEAD carry no body any more (D34), but an
    # answer produced below the hooks to a malformed HEAD can still carry DATA, which h2
    # rejects on the client's side. tests/e2e/test_head_refusal_e2e.py covers HEAD.
    method = draw(st.sampled_from(["GET", "GET", "POST", "OPTIONS", "CONNECT", "get"]))
    authority = draw(st.sampled_from(AUTHORITIES + [None]))
    pseudo: list[tuple[bytes, bytes]] = [
        (b":method", method.encode()),
        (b":scheme", draw(st.sampled_from([b"https", b"https", b"http", b"ftp", b""]))),
        (b":path", draw(H2_PATHS).encode("utf-8")),
    ]
    if authority is not None:
        pseudo.append((b":authority", authority.encode("utf-8")))
    dropped = draw(st.sets(st.integers(0, len(pseudo) - 1), max_size=1))
    pseudo = [p for i, p in enumerate(pseudo) if i not in dropped]
    extra = draw(st.lists(st.sampled_from(_H2_EXTRA), max_size=4))
    headers = pseudo + extra
    if draw(st.booleans()):
        headers = draw(st.permutations(headers))
    return headers
