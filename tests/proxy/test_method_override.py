"""Rules and methods (docs/configuration.md#rules, issue 33): the method judged is the
method sent, byte for byte, and on an entry with rules every method-override header field
is judged as a method too.

The decisions go through `decide_request` (tests/proxy/test_stages.py's RULED policy); the
adapter's part — the method as received, not mitmproxy's upper-cased `request.method` — is
`request_names`, checked on a real mitmproxy `Request` below.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from mitmproxy.test import tflow

from sandbox_egress.addons.targets import request_names
from sandbox_egress.proxy.clauses.rules import override_methods
from sandbox_egress.proxy.decision import Reason
from sandbox_egress.proxy.stages import ConnectionFacts, decide_request
from tests.proxy.test_stages import NEW, RULED, rule_resolve, ruled

OVERRIDES = [
    # (id, method, path, host, extra header fields, reason, clause)
    ("no-override", "POST", "/repos/acme/web/issues", "api.example", (),
     Reason.ALLOWLISTED, "rules[1]"),
    ("override-to-delete", "POST", "/repos/acme/web/issues", "api.example",
     ((b"X-HTTP-Method-Override", b"DELETE"),), Reason.RULE_MISMATCH, ""),
    ("x-http-method", "POST", "/repos/acme/web/issues", "api.example",
     ((b"X-HTTP-Method", b"DELETE"),), Reason.RULE_MISMATCH, ""),
    ("x-method-override", "POST", "/repos/acme/web/issues", "api.example",
     ((b"x-method-override", b"DELETE"),), Reason.RULE_MISMATCH, ""),
    ("name-case-free", "POST", "/repos/acme/web/issues", "api.example",
     ((b"X-Http-Method-OVERRIDE", b"DELETE"),), Reason.RULE_MISMATCH, ""),
    ("override-admitted", "POST", "/repos/acme/web/issues", "api.example",
     ((b"X-HTTP-Method-Override", b"PATCH"),), Reason.ALLOWLISTED, "rules[1]"),
    ("every-occurrence", "POST", "/repos/acme/web/issues", "api.example",
     ((b"X-HTTP-Method-Override", b"PATCH"), (b"X-HTTP-Method-Override", b"DELETE")),
     Reason.RULE_MISMATCH, ""),
    ("every-header", "POST", "/repos/acme/web/issues", "api.example",
     ((b"X-HTTP-Method-Override", b"PATCH"), (b"X-Method-Override", b"PUT")),
     Reason.RULE_MISMATCH, ""),
    ("override-case-exact", "GET", "/repos/acme/web", "api.example",
     ((b"X-HTTP-Method-Override", b"get"),), Reason.RULE_MISMATCH, ""),
    ("override-list-is-one-token", "GET", "/repos/acme/web", "api.example",
     ((b"X-HTTP-Method-Override", b"GET, DELETE"),), Reason.RULE_MISMATCH, ""),
    ("override-hits-deny", "DELETE", "/x", "open.example",
     ((b"X-HTTP-Method", b"GET"),), Reason.RULE_DENIED, "deny[0]"),
    ("deny-by-override", "PUT", "/x", "open.example",
     ((b"X-HTTP-Method-Override", b"DELETE"),), Reason.RULE_DENIED, "deny[0]"),
    ("empty-override", "GET", "/repos/acme/web", "api.example",
     ((b"X-HTTP-Method-Override", b""),), Reason.RULE_MISMATCH, ""),
    ("lower-case-method-sent", "get", "/repos/acme/web", "api.example", (),
     Reason.RULE_MISMATCH, ""),
]  # fmt: skip


@pytest.mark.parametrize(
    ("method", "path", "host", "extra", "reason", "clause"),
    [c[1:] for c in OVERRIDES],
    ids=[c[0] for c in OVERRIDES],
)
def test_method_overrides_are_judged(
    method: str,
    path: str,
    host: str,
    extra: tuple[tuple[bytes, bytes], ...],
    reason: Reason,
    clause: str,
) -> None:
    base = ruled(method, path, host)
    request = replace(base, fields=(*base.fields, *extra))
    answer = asyncio.run(decide_request(RULED, rule_resolve, NEW, request))
    assert (answer.decision.reason, answer.decision.clause) == (reason, clause)


def test_an_entry_without_rules_ignores_overrides() -> None:
    base = ruled("POST", "/anything", "open.example")
    request = replace(base, fields=(*base.fields, (b"X-HTTP-Method-Override", b"PUT")))
    answer = asyncio.run(decide_request(RULED, rule_resolve, NEW, request))
    assert answer.decision.reason is Reason.ALLOWLISTED


def test_override_methods_reads_every_field_occurrence() -> None:
    fields = (
        (b"x-http-method-override", b" PATCH "),
        (b"Accept", b"*/*"),
        (b"X-HTTP-Method", b"\xffDEL"),
        (b"X-Method-Override", b"PUT"),
    )
    assert override_methods(fields) == ("PATCH", "\udcffDEL", "PUT")


@pytest.mark.parametrize("sent", [b"get", b"Get", b"GET", b"pOsT"])
def test_the_adapter_judges_the_method_as_sent(sent: bytes) -> None:
    flow = tflow.tflow()
    flow.request.data.method = sent
    names = request_names(flow, ConnectionFacts())
    assert names.method == sent.decode()
