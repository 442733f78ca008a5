"""The connection stages' decisions (proxy/stages.py), one table of named cases per stage.

Each row is plain values in, the answer out: what the adapter then applies to the flow
(refuse with a reason, relay or intercept, the address pinned, the connection's target).
The resolver is a table too: nothing here touches a socket.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass, replace
from typing import Any

import pytest

from sandbox_egress.proxy.config.loader import parse
from sandbox_egress.proxy.decision import Reason
from sandbox_egress.proxy.hosts import IPAddress, canonical_host
from sandbox_egress.proxy.policy import Policy
from sandbox_egress.proxy.stages import (
    ConnectionFacts,
    Hello,
    HelloAnswer,
    Pin,
    RequestAsk,
    decide_clienthello,
    decide_connect,
    decide_request,
    decide_tcp,
    http3_name,
    upstream_offers,
)
from sandbox_egress.proxy.targets import RequestNames

SECRET = "stage-table-secret"


def policy_of(*allowlist: dict[str, object]) -> Policy:
    return Policy(parse({"network": {"allowlist": list(allowlist)}}, "env.yaml", {"T": SECRET}))


POLICY = policy_of(
    {"domain": "api.example", "transform": {"Authorization": "Bearer ${T}"}},
    {"domain": "pkg.example", "passthrough": True},
    {"domain": "*.pass.example", "passthrough": True},
    {"domain": "git.example"},
    {"domain": "*.wild.example"},
    {"domain": "internal.example"},
    {"domain": "198.18.5.0/24"},
    {"domain": "198.18.6.0/24", "ports": [22]},
)
STAR = policy_of({"domain": "*"})

ANSWERS = {
    "api.example": ["93.184.216.34"],
    "pkg.example": ["93.184.216.35"],
    "git.example": ["93.184.216.36"],
    "internal.example": ["10.0.0.5"],
}


async def resolve(name: str, port: int) -> list[IPAddress]:
    if name not in ANSWERS:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    return [ipaddress.ip_address(a) for a in ANSWERS[name]]


def target(host: str, port: int = 443) -> ConnectionFacts:
    return ConnectionFacts(target=(canonical_host(host), port))


def pin(destination: str, address: str, port: int = 443) -> Pin:
    return Pin((destination, port), (address, port))


# -- CONNECT ------------------------------------------------------------------------------

CONNECTS = [
    # (id, authority host, port, reason, host named, pin, tunnel is pass-through)
    ("allowed", "api.example", 443, Reason.ALLOWLISTED, "api.example",
     pin("api.example", "93.184.216.34"), False),
    ("canonical-name", "API.Example.", 443, Reason.ALLOWLISTED, "api.example",
     pin("api.example", "93.184.216.34"), False),
    ("passthrough-entry", "pkg.example", 443, Reason.ALLOWLISTED, "pkg.example",
     pin("pkg.example", "93.184.216.35"), True),
    ("not-listed", "evil.example", 443, Reason.NOT_ALLOWLISTED, "evil.example", None, False),
    ("malformed", "bad host!", 443, Reason.BAD_REQUEST, "bad host!", None, False),
    ("resolves-internal", "internal.example", 443, Reason.INTERNAL_ADDRESS,
     "internal.example", None, False),
    ("does-not-resolve", "nowhere.wild.example", 443, Reason.DNS_FAILURE,
     "nowhere.wild.example", None, False),
    ("address-entry", "198.18.5.9", 22, Reason.ALLOWLISTED, "198.18.5.9",
     pin("198.18.5.9", "198.18.5.9", 22), False),
    ("address-entry-port", "198.18.6.1", 443, Reason.PORT_NOT_ALLOWED, "198.18.6.1", None,
     False),
    ("loopback", "127.0.0.1", 443, Reason.LOOPBACK, "127.0.0.1", None, False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("host", "port", "reason", "named", "pinned", "passthrough"),
    [c[1:] for c in CONNECTS],
    ids=[c[0] for c in CONNECTS],
)
def test_connect(
    host: str, port: int, reason: Reason, named: str, pinned: Pin | None, passthrough: bool
) -> None:
    answer = asyncio.run(decide_connect(POLICY, resolve, ConnectionFacts(), host, port))
    assert (answer.decision.reason, answer.host, answer.pin) == (reason, named, pinned)
    assert answer.decision.allowed is (pinned is not None)
    expected = ConnectionFacts()
    if pinned is not None:  # only an allowed tunnel has a target its requests must name
        expected = ConnectionFacts(target=(canonical_host(named), port), passthrough=passthrough)
    assert answer.facts == expected


# -- TLS ClientHello -------------------------------------------------------------------------

UPSTREAM_OFFERS = [
    ("h2_only", (b"h2",), (b"h2", b"http/1.1")),
    ("h2_and_another", (b"h2", b"acme"), (b"h2", b"acme", b"http/1.1")),
    ("h2_first", (b"h2", b"http/1.1"), (b"h2", b"http/1.1")),
    ("http11_first", (b"http/1.1", b"h2"), (b"http/1.1", b"h2")),
    ("http11_only", (b"http/1.1",), (b"http/1.1",)),
    ("none", (), ()),
    ("other_only", (b"acme",), (b"acme",)),
    # HTTP/3's names are QUIC's, never offered over TCP (D305)
    ("h3_first", (b"h3", b"http/1.1"), (b"http/1.1",)),
    ("h3_and_h2", (b"h3", b"h2"), (b"h2", b"http/1.1")),
    ("h3_only", (b"h3",), (b"http/1.1",)),
    ("h3_drafts_only", (b"h3-29", b"h3-32"), (b"http/1.1",)),
    ("h3_and_another", (b"h3", b"acme"), (b"acme",)),
    ("like_h3_but_not", (b"h30", b"h3x"), (b"h30", b"h3x")),
]


@pytest.mark.parametrize(
    ("client", "upstream"), [c[1:] for c in UPSTREAM_OFFERS], ids=[c[0] for c in UPSTREAM_OFFERS]
)
def test_upstream_offers(client: tuple[bytes, ...], upstream: tuple[bytes, ...]) -> None:
    """The upstream is offered `http/1.1` too when the client offers `h2` without it (D82)."""
    assert upstream_offers(client) == upstream


UPSTREAM_OFFERS_NO_HTTP2 = [
    ("h2_only", (b"h2",), ()),
    ("h2_and_http11", (b"h2", b"http/1.1"), (b"http/1.1",)),
    ("h3_and_h2", (b"h3", b"h2"), (b"http/1.1",)),
    ("acme", (b"acme",), (b"acme",)),
]


@pytest.mark.parametrize(
    ("client", "upstream"),
    [c[1:] for c in UPSTREAM_OFFERS_NO_HTTP2],
    ids=[c[0] for c in UPSTREAM_OFFERS_NO_HTTP2],
)
def test_upstream_offers_with_http2_off(
    client: tuple[bytes, ...], upstream: tuple[bytes, ...]
) -> None:
    """With HTTP/2 off, `h2` is not offered either (as mitmproxy's own copy does)."""
    assert upstream_offers(client, http2=False) == upstream


@pytest.mark.parametrize(
    "name", [b"h3", b"h3-29", b"h3-", b"h30", b"h2", b"http/1.1", b"hq-interop", b"", b"H3"]
)
def test_http3_name_is_mitmproxys(name: bytes) -> None:
    """The names mitmproxy's HTTP layer would run as HTTP/3 are exactly these (pinned)."""
    from mitmproxy.proxy.layers.http import is_h3_alpn

    assert http3_name(name) == is_h3_alpn(name)


H2_CHOICE = (b"h2", b"http/1.1")
ORIGINAL = ("203.0.113.66", 443)  # a transparent connection's original destination
PKG_TUNNEL = ConnectionFacts(target=(canonical_host("pkg.example"), 443), passthrough=True)


def tunnel(sni: str | None, alpn: tuple[bytes, ...] = (), sni_sent: bool = True) -> Hello:
    return Hello(transparent=False, sni=sni, sni_sent=sni_sent, alpn=alpn, destination=None)


def transparent(
    sni: str | None, alpn: tuple[bytes, ...] = (), destination: Any = ORIGINAL
) -> Hello:
    return Hello(
        transparent=True, sni=sni, sni_sent=sni is not None, alpn=alpn, destination=destination
    )


def relayed(host: str, address: str) -> HelloAnswer:
    """A transparent pass-through: pinned by name and by the original destination."""
    checked = pin(host, address)
    return HelloAnswer(
        ConnectionFacts(target=(canonical_host(host), 443), passthrough=True),
        relay=True,
        pins=(checked, Pin(ORIGINAL, checked.address)),
    )


@dataclass(frozen=True)
class Outline:
    """An answer without its decision object: the decision is compared by reason."""

    answer: HelloAnswer
    reason: Reason | None = None


def outline(answer: HelloAnswer) -> Outline:
    reason = answer.decision.reason if answer.decision else None
    return Outline(
        HelloAnswer(
            answer.facts,
            answer.relay,
            answer.upstream_first,
            answer.server_address,
            answer.pins,
        ),
        reason,
    )


HELLOS = [
    # (id, facts before, hello, answer)
    ("tunnel-passthrough-relayed", PKG_TUNNEL, tunnel("PKG.example"),
     Outline(HelloAnswer(PKG_TUNNEL, relay=True))),
    ("tunnel-passthrough-other-sni-intercepted", PKG_TUNNEL, tunnel("evil.example"),
     Outline(HelloAnswer(PKG_TUNNEL))),
    ("tunnel-passthrough-no-sni-relayed", PKG_TUNNEL, tunnel(None, sni_sent=False),
     Outline(HelloAnswer(PKG_TUNNEL, relay=True))),
    ("tunnel-without-target-intercepted", ConnectionFacts(), tunnel("api.example"),
     Outline(HelloAnswer(ConnectionFacts()))),
    ("tunnel-alpn-choice-upstream-first", target("api.example"), tunnel("api.example", H2_CHOICE),
     Outline(HelloAnswer(target("api.example"), upstream_first=True))),
    ("tunnel-one-alpn-offer", target("api.example"), tunnel("api.example", (b"h2",)),
     Outline(HelloAnswer(target("api.example")))),
    ("tunnel-malformed-sni", target("api.example"), tunnel("bad host!"),
     Outline(HelloAnswer(ConnectionFacts(target("api.example").target, bad_sni=True)))),
    ("unreadable-server-name", ConnectionFacts(), tunnel(None, sni_sent=True),
     Outline(HelloAnswer(ConnectionFacts(bad_sni=True)))),
    ("transparent-passthrough-relayed", ConnectionFacts(), transparent("pkg.example"),
     Outline(relayed("pkg.example", "93.184.216.35"), Reason.ALLOWLISTED)),
    ("transparent-passthrough-unresolvable-intercepted", ConnectionFacts(),
     transparent("x.pass.example"),
     Outline(HelloAnswer(target("x.pass.example")), Reason.DNS_FAILURE)),
    ("transparent-no-sni", ConnectionFacts(), transparent(None),
     Outline(HelloAnswer(ConnectionFacts(target("203.0.113.66").target, no_sni=True)))),
    ("transparent-alpn-choice-upstream-first", ConnectionFacts(),
     transparent("API.example", H2_CHOICE),
     Outline(HelloAnswer(target("api.example"), upstream_first=True,
                         server_address=("api.example", 443),
                         pins=(pin("api.example", "93.184.216.34"),)))),
    ("transparent-refused-name-opens-nothing", ConnectionFacts(),
     transparent("evil.example", H2_CHOICE), Outline(HelloAnswer(target("evil.example")))),
    ("transparent-one-alpn-offer", ConnectionFacts(), transparent("api.example", (b"h2",)),
     Outline(HelloAnswer(target("api.example")))),
    ("transparent-no-destination", ConnectionFacts(), transparent("api.example", destination=None),
     Outline(HelloAnswer(ConnectionFacts()))),
    ("transparent-malformed-sni", ConnectionFacts(), transparent("bad host!"),
     Outline(HelloAnswer(ConnectionFacts(bad_sni=True)))),
]  # fmt: skip


@pytest.mark.parametrize(
    ("facts", "hello", "expected"), [c[1:] for c in HELLOS], ids=[c[0] for c in HELLOS]
)
def test_clienthello(facts: ConnectionFacts, hello: Hello, expected: Outline) -> None:
    answer = asyncio.run(decide_clienthello(POLICY, resolve, facts, hello))
    assert outline(answer) == expected


# -- raw TCP -------------------------------------------------------------------------------

TCPS = [
    # (id, policy, facts, transparent, destination, reason, pin)
    ("tunnel-to-address-entry", POLICY, target("198.18.5.9", 22), False, ("198.18.5.9", 22),
     Reason.ALLOWLISTED, pin("198.18.5.9", "198.18.5.9", 22)),
    ("tunnel-to-named-entry", POLICY, target("git.example", 22), False, ("git.example", 22),
     Reason.NOT_ALLOWLISTED, None),
    ("tunnel-port-restricted-entry", POLICY, target("198.18.6.1", 22), False,
     ("198.18.6.1", 22), Reason.ALLOWLISTED, pin("198.18.6.1", "198.18.6.1", 22)),
    ("tunnel-port-not-in-entry", POLICY, target("198.18.6.1", 443), False,
     ("198.18.6.1", 443), Reason.NOT_ALLOWLISTED, None),
    ("star-never-opens-raw-tcp", STAR, target("93.184.216.34", 22), False,
     ("93.184.216.34", 22), Reason.NOT_ALLOWLISTED, None),
    ("transparent-original-destination", POLICY, target("api.example"), True,
     ("198.18.5.7", 5432), Reason.ALLOWLISTED, pin("198.18.5.7", "198.18.5.7", 5432)),
    ("transparent-unlisted-destination", POLICY, ConnectionFacts(), True, ("198.18.9.1", 22),
     Reason.NOT_ALLOWLISTED, None),
    ("tunnel-without-target", POLICY, ConnectionFacts(), False, ("198.18.5.9", 22),
     Reason.NOT_ALLOWLISTED, None),
    ("no-destination", POLICY, target("198.18.5.9", 22), False, None,
     Reason.NOT_ALLOWLISTED, None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("policy", "facts", "transparent_mode", "destination", "reason", "pinned"),
    [c[1:] for c in TCPS],
    ids=[c[0] for c in TCPS],
)
def test_raw_tcp(
    policy: Policy,
    facts: ConnectionFacts,
    transparent_mode: bool,
    destination: tuple[str, int] | None,
    reason: Reason,
    pinned: Pin | None,
) -> None:
    answer = decide_tcp(policy, facts, transparent_mode, destination)
    assert (answer.decision.reason, answer.pin) == (reason, pinned)
    assert answer.decision.allowed is (pinned is not None)


# -- requests --------------------------------------------------------------------------------


NEW = ConnectionFacts()  # a connection nothing was learned about yet


def ask(
    host: str = "api.example",
    facts: ConnectionFacts = NEW,
    *,
    port: int = 443,
    https: bool = True,
    method: str = "GET",
    transparent_mode: bool = False,
    host_header: str | None = None,
    fields: tuple[tuple[bytes, bytes], ...] | None = None,
) -> RequestAsk:
    header = host_header if host_header is not None else host
    return RequestAsk(
        method=method.encode(),
        fields=fields if fields is not None else ((b"Host", header.encode()),),
        names=RequestNames(
            transparent=transparent_mode,
            host=host,
            port=port,
            host_header=header,
            sni=None,
            client_tls=https,
            target=facts.target,
            sni_malformed=facts.bad_sni,
            method=method,
        ),
        https=https,
    )


NO_SNI = ConnectionFacts(no_sni=True)
NO_SNI_ADDRESS = ConnectionFacts(target=(canonical_host("198.18.5.9"), 443), no_sni=True)
NO_SNI_PUBLIC = ConnectionFacts(target=(canonical_host("93.184.216.34"), 443), no_sni=True)

REQUESTS = [
    # (id, facts, ask, reason, host named, pin, headers injected)
    ("allowed-injects", ConnectionFacts(), ask("api.example"), Reason.ALLOWLISTED, "api.example",
     pin("api.example", "93.184.216.34"), ("Authorization",)),
    ("canonical-host", ConnectionFacts(), ask("API.Example"), Reason.ALLOWLISTED, "api.example",
     pin("api.example", "93.184.216.34"), ("Authorization",)),
    ("no-transform", ConnectionFacts(), ask("git.example"), Reason.ALLOWLISTED, "git.example",
     pin("git.example", "93.184.216.36"), ()),
    ("plaintext-to-transform-host", ConnectionFacts(), ask("api.example", port=80, https=False),
     Reason.PLAINTEXT_CREDENTIALS, "api.example", None, ()),
    ("trace-to-transform-host", ConnectionFacts(), ask("api.example", method="TRACE"),
     Reason.METHOD_NOT_ALLOWED, "api.example", None, ()),
    ("fronting-in-a-tunnel", target("api.example"), ask("git.example", target("api.example")),
     Reason.HOST_MISMATCH, "git.example", None, ()),
    ("host-header-disagrees", ConnectionFacts(), ask("api.example", host_header="git.example"),
     Reason.HOST_MISMATCH, "api.example", None, ()),
    ("forbidden-head-bytes", ConnectionFacts(),
     ask("api.example", fields=((b"Host", b"api.example"), (b"X", b"a\rHost: evil.example"))),
     Reason.BAD_REQUEST, "api.example", None, ()),
    ("not-listed", ConnectionFacts(), ask("evil.example"), Reason.NOT_ALLOWLISTED,
     "evil.example", None, ()),
    ("does-not-resolve", ConnectionFacts(), ask("nowhere.wild.example"), Reason.DNS_FAILURE,
     "nowhere.wild.example", None, ()),
    ("resolves-internal", ConnectionFacts(), ask("internal.example"), Reason.INTERNAL_ADDRESS,
     "internal.example", None, ()),
    ("no-sni-without-target", NO_SNI, ask("api.example", NO_SNI, transparent_mode=True),
     Reason.NO_SNI, "api.example", None, ()),
    ("no-sni-public-address", NO_SNI_PUBLIC,
     ask("93.184.216.34", NO_SNI_PUBLIC, transparent_mode=True), Reason.NO_SNI,
     "93.184.216.34", None, ()),
    ("no-sni-address-entry", NO_SNI_ADDRESS,
     ask("198.18.5.9", NO_SNI_ADDRESS, transparent_mode=True), Reason.ALLOWLISTED,
     "198.18.5.9", pin("198.18.5.9", "198.18.5.9"), ()),
    ("malformed-sni", ConnectionFacts(bad_sni=True), ask("api.example",
     ConnectionFacts(bad_sni=True)), Reason.BAD_REQUEST, "api.example", None, ()),
]  # fmt: skip


@pytest.mark.parametrize(
    ("facts", "request_ask", "reason", "named", "pinned", "injected"),
    [c[1:] for c in REQUESTS],
    ids=[c[0] for c in REQUESTS],
)
def test_request(
    facts: ConnectionFacts,
    request_ask: RequestAsk,
    reason: Reason,
    named: str,
    pinned: Pin | None,
    injected: tuple[str, ...],
) -> None:
    answer = asyncio.run(decide_request(POLICY, resolve, facts, request_ask))
    assert (answer.decision.reason, answer.host, answer.pin) == (reason, named, pinned)
    assert tuple(t.header for t in answer.transforms) == injected
    assert (answer.location is not None) is (pinned is not None)
    assert bool(answer.redactions) is bool(injected)  # only what was sent can be echoed


def test_a_refused_name_is_never_resolved() -> None:
    asked: list[str] = []

    async def recording(name: str, port: int) -> list[IPAddress]:
        asked.append(name)
        return await resolve(name, port)

    for host in ("evil.example", "api.example"):
        asyncio.run(decide_request(POLICY, recording, ConnectionFacts(), ask(host)))
        asyncio.run(decide_connect(POLICY, recording, ConnectionFacts(), host, 443))
    assert asked == ["api.example", "api.example"]


# -- rules inside an allowed host (docs/configuration.md#rules) --------------------------------------------------

RULED = policy_of(
    {
        "domain": "api.example",
        "rules": [
            {"methods": ["GET", "HEAD"]},
            {
                "methods": ["POST", "PATCH"],
                "paths": ["/repos/acme/*/issues", "/repos/acme/*/issues/**"],
            },
            {"methods": ["GET"], "paths": ["/search"], "query": {"q": "repo:acme/*"}},
        ],
        "deny": [{"paths": ["/user/keys", "/user/keys/**"]}],
    },
    {
        "domain": "registry.example",
        "rules": [{"paths": ["/@acme%2f*"]}],
        "allow_encoded_slash": True,
    },
    {"domain": "open.example", "deny": [{"methods": ["DELETE"]}]},
    {"domain": "198.18.7.0/24", "rules": [{"methods": ["GET"]}]},
)
RULE_ANSWERS = {**ANSWERS, "registry.example": ["93.184.216.37"], "open.example": ["93.184.216.38"]}


async def rule_resolve(name: str, port: int) -> list[IPAddress]:
    return [ipaddress.ip_address(a) for a in RULE_ANSWERS[name]]


def ruled(method: str, path: str, host: str = "api.example") -> RequestAsk:
    base = ask(host, method=method)
    return replace(base, names=replace(base.names, path=path))


RULE_REQUESTS = [
    # (id, method, request-target, host, reason, clause)
    ("get-anything", "GET", "/repos/acme/web", "api.example", Reason.ALLOWLISTED, "rules[0]"),
    ("head-anything", "HEAD", "/", "api.example", Reason.ALLOWLISTED, "rules[0]"),
    ("post-issue", "POST", "/repos/acme/web/issues", "api.example", Reason.ALLOWLISTED, "rules[1]"),
    ("patch-issue-below", "PATCH", "/repos/acme/web/issues/7", "api.example",
     Reason.ALLOWLISTED, "rules[1]"),
    ("post-other-org", "POST", "/repos/evil/web/issues", "api.example", Reason.RULE_MISMATCH, ""),
    ("star-is-one-segment", "POST", "/repos/acme/a/b/issues", "api.example",
     Reason.RULE_MISMATCH, ""),
    ("delete-repo", "DELETE", "/repos/acme/web", "api.example", Reason.RULE_MISMATCH, ""),
    ("method-case-sensitive", "get", "/repos/acme/web", "api.example", Reason.RULE_MISMATCH, ""),
    ("deny-wins-over-get", "GET", "/user/keys", "api.example", Reason.RULE_DENIED, "deny[0]"),
    ("deny-below", "GET", "/user/keys/12", "api.example", Reason.RULE_DENIED, "deny[0]"),
    ("deny-unreserved-decoded", "GET", "/user/%6beys", "api.example", Reason.RULE_DENIED,
     "deny[0]"),
    ("deny-encoded-slash", "GET", "/user%2fkeys", "api.example", Reason.BAD_REQUEST, ""),
    ("deny-encoded-dot", "GET", "/user/keys/%2e%2e/x", "api.example", Reason.BAD_REQUEST, ""),
    ("dot-dot-segment", "POST", "/repos/acme/web/issues/../../../x", "api.example",
     Reason.BAD_REQUEST, ""),
    ("dot-segment", "GET", "/user/./keys", "api.example", Reason.BAD_REQUEST, ""),
    ("double-slash", "GET", "//user/keys", "api.example", Reason.BAD_REQUEST, ""),
    ("backslash", "GET", "/user\\keys", "api.example", Reason.BAD_REQUEST, ""),
    ("encoded-backslash", "GET", "/user%5ckeys", "api.example", Reason.BAD_REQUEST, ""),
    ("encoded-nul", "GET", "/user/keys%00", "api.example", Reason.BAD_REQUEST, ""),
    ("bad-escape", "GET", "/user/%zzkeys", "api.example", Reason.BAD_REQUEST, ""),
    ("path-parameter", "GET", "/user/keys;x=1", "api.example", Reason.BAD_REQUEST, ""),
    ("options-asterisk", "OPTIONS", "*", "api.example", Reason.BAD_REQUEST, ""),
    ("query-matches", "GET", "/search?q=repo:acme/web", "api.example", Reason.ALLOWLISTED,
     "rules[0]"),
    ("query-not-path", "GET", "/user/keys?x=/", "api.example", Reason.RULE_DENIED, "deny[0]"),
    ("npm-scoped-name", "GET", "/@acme%2fleft-pad", "registry.example", Reason.ALLOWLISTED,
     "rules[0]"),
    ("npm-scoped-upper", "GET", "/@acme%2Fleft-pad", "registry.example", Reason.ALLOWLISTED,
     "rules[0]"),
    ("npm-other-scope", "GET", "/@evil%2fleft-pad", "registry.example", Reason.RULE_MISMATCH, ""),
    ("deny-only-entry-allows", "PUT", "/x", "open.example", Reason.ALLOWLISTED, ""),
    ("deny-only-entry-refuses", "DELETE", "/x", "open.example", Reason.RULE_DENIED, "deny[0]"),
    ("deny-only-entry-ambiguous", "GET", "/a/../x", "open.example", Reason.BAD_REQUEST, ""),
    ("address-entry-with-rules", "POST", "/", "198.18.7.1", Reason.RULE_MISMATCH, ""),
]  # fmt: skip


@pytest.mark.parametrize(
    ("method", "path", "host", "reason", "clause"),
    [c[1:] for c in RULE_REQUESTS],
    ids=[c[0] for c in RULE_REQUESTS],
)
def test_rules(method: str, path: str, host: str, reason: Reason, clause: str) -> None:
    answer = asyncio.run(decide_request(RULED, rule_resolve, NEW, ruled(method, path, host)))
    assert (answer.decision.reason, answer.decision.clause) == (reason, clause)
    assert (answer.pin is not None) is (reason is Reason.ALLOWLISTED)


QUERY_RULE = policy_of(
    {"domain": "api.example", "rules": [{"query": {"state": "open", "per_page": "*"}}]}
)
QUERIES = [
    ("all-present", "/?state=open&per_page=30", Reason.ALLOWLISTED),
    ("order-free", "/?per_page=&state=open", Reason.ALLOWLISTED),
    ("decoded", "/?st%61te=op%65n&per_page=1", Reason.ALLOWLISTED),
    ("one-missing", "/?state=open", Reason.RULE_MISMATCH),
    ("wrong-value", "/?state=closed&per_page=1", Reason.RULE_MISMATCH),
    ("repeated", "/?state=open&state=closed&per_page=1", Reason.RULE_MISMATCH),
    ("no-query", "/", Reason.RULE_MISMATCH),
]  # fmt: skip


@pytest.mark.parametrize(("path", "reason"), [c[1:] for c in QUERIES], ids=[c[0] for c in QUERIES])
def test_rule_query(path: str, reason: Reason) -> None:
    answer = asyncio.run(decide_request(QUERY_RULE, resolve, NEW, ruled("GET", path)))
    assert answer.decision.reason is reason


def test_a_rule_refusal_is_reported_through_in_report_only_mode() -> None:
    policy = policy_of(
        {"domain": "api.example", "rules": [{"methods": ["GET"]}], "report_only": True}
    )
    answer = asyncio.run(decide_request(policy, resolve, NEW, ruled("POST", "/")))
    assert (answer.decision.verdict, answer.decision.reason) == ("would_deny", Reason.RULE_MISMATCH)
    ambiguous = asyncio.run(decide_request(policy, resolve, NEW, ruled("GET", "/a/../b")))
    assert (ambiguous.decision.verdict, ambiguous.decision.reason) == ("deny", Reason.BAD_REQUEST)


def test_raw_tcp_to_an_entry_with_rules_is_refused() -> None:
    answer = decide_tcp(RULED, target("198.18.7.1", 22), False, ("198.18.7.1", 22))
    assert (answer.decision.allowed, answer.decision.reason) == (False, Reason.RULE_MISMATCH)
    assert answer.pin is None
