"""The placeholder stage (proxy/values/swap.py) through `decide_request`: one table of named cases.

Each row is a request (host, header fields, request-target) in, and out the reason, the
header fields and target the upstream would receive, and where values were written.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses

import pytest

from sandbox_egress.proxy.config.loader import parse
from sandbox_egress.proxy.decision import Reason
from sandbox_egress.proxy.hosts import IPAddress, canonical_host
from sandbox_egress.proxy.policy import Policy
from sandbox_egress.proxy.stages import ConnectionFacts, RequestAsk, decide_request
from sandbox_egress.proxy.targets import RequestNames
from sandbox_egress.proxy.values.swap import swap

OPENAI = "sk-egress-placeholder-openai"
GIT = "ghp-egress-placeholder-git"
MAPS = "maps-egress-placeholder"
REAL_OPENAI = "sk-real-openai-0123456789"
REAL_GIT = "ghp_real_git_0123456789"
REAL_MAPS = "real maps/key&=+"  # needs percent-encoding in a query

ENV = {"OPENAI": REAL_OPENAI, "GIT": REAL_GIT, "MAPS": REAL_MAPS}
POLICY = Policy(
    parse(
        {
            "network": {
                "allowlist": [
                    {
                        "domain": "api.openai.test",
                        "secrets": [{"placeholder": OPENAI, "value": "${OPENAI}", "require": True}],
                    },
                    {"domain": "git.test", "secrets": [{"placeholder": GIT, "value": "${GIT}"}]},
                    {
                        "domain": "maps.test",
                        "secrets": [{"placeholder": MAPS, "value": "${MAPS}", "in": ["query"]}],
                    },
                    {
                        "domain": "both.test",
                        "secrets": [
                            {
                                "placeholder": "both-egress-placeholder",
                                "value": "${GIT}",
                                "in": ["headers", "query"],
                            }
                        ],
                    },  # fmt: skip
                    {
                        "domain": "plain.test",
                        "allow_plaintext": True,
                        "secrets": [{"placeholder": "plain-egress-placeholder", "value": "${GIT}"}],
                    },  # fmt: skip
                    {"domain": "other.test"},
                    {"domain": "report.test", "report_only": True, "ports": [8443]},
                ]
            }
        },
        "env.yaml",
        ENV,
    )
)


async def resolve(name: str, port: int) -> list[IPAddress]:
    return [canonical_host("93.184.216.34").ip] if name.endswith(".test") else []  # type: ignore[list-item]


def basic(user: str, password: str) -> bytes:
    return b"Basic " + base64.b64encode(f"{user}:{password}".encode())


def ask(host: str, path: str = "/", *fields: tuple[bytes, bytes], https: bool = True) -> RequestAsk:
    return RequestAsk(
        method=b"GET",
        fields=((b"Host", host.encode()), *fields),
        names=RequestNames(
            transparent=False,
            host=host,
            port=443 if https else 80,
            host_header=host,
            sni=None,
            client_tls=https,
            target=None,
            path=path,
        ),
        https=https,
    )


BEARER = (b"Authorization", f"Bearer {OPENAI}".encode())
REAL_BEARER = (b"Authorization", f"Bearer {REAL_OPENAI}".encode())
MAPS_QUOTED = "real%20maps%2Fkey%26%3D%2B"

CASES = [
    # (id, ask, reason, header fields sent (None: as received), target sent, written)
    ("bearer-swapped", ask("api.openai.test", "/v1/models", BEARER), Reason.ALLOWLISTED,
     ((b"Host", b"api.openai.test"), REAL_BEARER), "/v1/models", ("Authorization",)),
    ("every-occurrence", ask("api.openai.test", "/", (b"X-Key", f"{OPENAI},{OPENAI}".encode())),
     Reason.ALLOWLISTED, ((b"Host", b"api.openai.test"),
                          (b"X-Key", f"{REAL_OPENAI},{REAL_OPENAI}".encode())), "/", ("X-Key",)),
    ("required-missing", ask("api.openai.test", "/v1/models"), Reason.CREDENTIAL_REQUIRED,
     None, None, ()),
    ("own-key-brought", ask("api.openai.test", "/", (b"Authorization", b"Bearer sk-mine")),
     Reason.CREDENTIAL_REQUIRED, None, None, ()),
    ("required-only-in-headers", ask("api.openai.test", f"/?key={OPENAI}"),
     Reason.CREDENTIAL_REQUIRED, None, None, ()),
    ("basic-password", ask("git.test", "/r.git/info/refs", (b"Authorization", basic("x", GIT))),
     Reason.ALLOWLISTED, ((b"Host", b"git.test"), (b"Authorization", basic("x", REAL_GIT))),
     "/r.git/info/refs", ("Authorization",)),
    ("basic-user", ask("git.test", "/", (b"Authorization", basic(GIT, "x-oauth-basic"))),
     Reason.ALLOWLISTED, ((b"Host", b"git.test"),
                          (b"Authorization", basic(REAL_GIT, "x-oauth-basic"))),
     "/", ("Authorization",)),
    ("not-required-absent", ask("git.test", "/"), Reason.ALLOWLISTED, None, "/", ()),
    ("query-value-encoded", ask("maps.test", f"/geo?q=x&key={MAPS}&z=1"), Reason.ALLOWLISTED,
     None, f"/geo?q=x&key={MAPS_QUOTED}&z=1", ("query",)),
    ("query-only-not-headers", ask("maps.test", "/", (b"X-Key", MAPS.encode())),
     Reason.ALLOWLISTED, None, "/", ()),
    ("query-name-untouched", ask("maps.test", f"/?{MAPS}=1"), Reason.ALLOWLISTED, None,
     f"/?{MAPS}=1", ()),
    ("headers-and-query", ask("both.test", "/?k=both-egress-placeholder",
                              (b"X-K", b"both-egress-placeholder")), Reason.ALLOWLISTED,
     ((b"Host", b"both.test"), (b"X-K", REAL_GIT.encode())), f"/?k={REAL_GIT}",
     ("X-K", "query")),
    ("elsewhere-header", ask("other.test", "/", BEARER), Reason.PLACEHOLDER_ELSEWHERE,
     None, None, ()),
    ("elsewhere-basic", ask("other.test", "/", (b"Authorization", basic("x", GIT))),
     Reason.PLACEHOLDER_ELSEWHERE, None, None, ()),
    ("elsewhere-header-name", ask("other.test", "/", (OPENAI.encode(), b"1")),
     Reason.PLACEHOLDER_ELSEWHERE, None, None, ()),
    ("elsewhere-header-name-beside-own", ask("api.openai.test", "/", BEARER,
                                             (f"X-{GIT}".encode(), b"1")),
     Reason.PLACEHOLDER_ELSEWHERE, None, None, ()),
    ("own-in-a-header-name-not-swapped", ask("api.openai.test", "/", BEARER, (OPENAI.encode(), b"1")),
     Reason.ALLOWLISTED, ((b"Host", b"api.openai.test"), REAL_BEARER, (OPENAI.encode(), b"1")),
     "/", ("Authorization",)),
    ("elsewhere-path", ask("other.test", f"/upload/{OPENAI}"), Reason.PLACEHOLDER_ELSEWHERE,
     None, None, ()),
    ("elsewhere-percent-encoded", ask("other.test", "/?k=%73k-egress-placeholder-openai"),
     Reason.PLACEHOLDER_ELSEWHERE, None, None, ()),
    ("elsewhere-other-credentialled-host", ask("git.test", "/", BEARER),
     Reason.PLACEHOLDER_ELSEWHERE, None, None, ()),
    ("elsewhere-beside-own", ask("api.openai.test", f"/?leak={GIT}", BEARER),
     Reason.PLACEHOLDER_ELSEWHERE, None, None, ()),
    ("elsewhere-unlisted-host", ask("evil.test", "/", BEARER), Reason.PLACEHOLDER_ELSEWHERE,
     None, None, ()),
    ("elsewhere-would-deny", ask("report.test", "/", BEARER), Reason.PLACEHOLDER_ELSEWHERE,
     None, None, ()),
    ("loopback-keeps-its-reason", ask("localhost", "/", BEARER), Reason.LOOPBACK, None, None, ()),
    ("plaintext-refused", ask("api.openai.test", "/", BEARER, https=False),
     Reason.PLAINTEXT_CREDENTIALS, None, None, ()),
    ("plaintext-allowed", ask("plain.test", "/", (b"X", b"plain-egress-placeholder"), https=False),
     Reason.ALLOWLISTED, ((b"Host", b"plain.test"), (b"X", REAL_GIT.encode())), "/", ("X",)),
    ("nothing-to-swap", ask("other.test", "/x?y=1"), Reason.ALLOWLISTED, None, "/x?y=1", ()),
]  # fmt: skip


@pytest.mark.parametrize(
    ("request_ask", "reason", "fields", "target", "written"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_placeholder_stage(
    request_ask: RequestAsk,
    reason: Reason,
    fields: tuple[tuple[bytes, bytes], ...] | None,
    target: str | None,
    written: tuple[str, ...],
) -> None:
    answer = asyncio.run(decide_request(POLICY, resolve, ConnectionFacts(), request_ask))
    assert answer.decision.reason is reason
    assert answer.fields == fields
    assert (answer.location.path if answer.location else None) == target
    assert answer.swapped == written
    assert bool(answer.redactions) is bool(written)  # only what was sent can be echoed
    if not answer.decision.allowed:
        assert answer.pin is None  # nothing goes upstream


def test_the_real_value_is_redacted_when_echoed() -> None:
    answer = asyncio.run(
        decide_request(POLICY, resolve, ConnectionFacts(), ask("api.openai.test", "/", BEARER))
    )
    echoed = f"you sent {REAL_OPENAI}".encode()
    assert answer.redactions.header(echoed) == b"you sent [redacted]"


def test_a_configuration_without_placeholders_changes_nothing() -> None:
    plain = Policy(parse({"network": {"allowlist": [{"domain": "a.test"}]}}, "e.yaml", {}))
    decision = plain.decide(canonical_host("a.test"), 443, tls=True)
    fields = ((b"X", OPENAI.encode()),)
    own = plain.holder(decision.entry)
    assert swap(plain.config.placeholders, decision, fields, "/", own).reason is None


def test_a_malformed_basic_credential_is_searched_as_it_is() -> None:
    mangled = (b"Authorization", b"Basic !!" + GIT.encode())
    answer = asyncio.run(
        decide_request(POLICY, resolve, ConnectionFacts(), ask("git.test", "/", mangled))
    )
    assert answer.fields == (
        (b"Host", b"git.test"),
        (b"Authorization", b"Basic !!" + REAL_GIT.encode()),
    )


def test_trace_to_a_host_with_placeholders_is_refused() -> None:
    trace = dataclasses.replace(
        ask("git.test", "/", (b"Authorization", basic("x", GIT))),
        method=b"TRACE",
    )
    trace = dataclasses.replace(trace, names=dataclasses.replace(trace.names, method="TRACE"))
    answer = asyncio.run(decide_request(POLICY, resolve, ConnectionFacts(), trace))
    assert (answer.decision.reason, answer.fields, answer.pin) == (
        Reason.METHOD_NOT_ALLOWED,
        None,
        None,
    )
