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
from hypothesis import given, settings
from hypothesis import strategies as st
from mitmproxy.test import tflow

from sandbox_egress.addons.targets import request_names
from sandbox_egress.proxy.clauses.rules import OVERRIDES as OVERRIDE_NAMES
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


def _override_methods_oracle(fields: tuple[tuple[bytes, bytes], ...]) -> tuple[str, ...]:
    """override_methods as it was before its one-pass check (stop 48): every field's name
    lower-cased and looked up, the oracle the faster one must equal."""
    return tuple(
        value.strip(b" \t").decode("utf-8", "surrogateescape")
        for name, value in fields
        if name.lower() in OVERRIDE_NAMES
    )


def _spellings(name: bytes) -> st.SearchStrategy[bytes]:
    """`name` in any letter case, sometimes one byte short, long or changed."""
    cased = st.lists(st.booleans(), min_size=len(name), max_size=len(name)).map(
        lambda upper: b"".join(
            name[i : i + 1].upper() if u else name[i : i + 1] for i, u in enumerate(upper)
        )
    )
    return (
        cased
        | cased.map(lambda b: b[:-1])
        | cased.map(lambda b: b + b"e")
        | cased.map(lambda b: b.replace(b"-", b"_", 1))
    )


_NAMES = st.one_of(
    *(_spellings(n) for n in sorted(OVERRIDE_NAMES)),
    _spellings(b"method"),
    st.binary(max_size=20),  # any bytes: CR, LF, NUL, obs-text, "method" split by LF
    st.sampled_from([b"Host", b"Accept", b"x-http-\nmethod", b"METHOD\n", b"\xffMethod"]),
)
_VALUES = st.binary(max_size=12) | st.sampled_from([b" PATCH ", b"\tDELETE", b"GET, DELETE", b""])


@given(st.lists(st.tuples(_NAMES, _VALUES), max_size=8).map(tuple))
@settings(max_examples=1500)
def test_override_methods_equals_the_field_by_field_scan(
    fields: tuple[tuple[bytes, bytes], ...],
) -> None:
    assert override_methods(fields) == _override_methods_oracle(fields)


@pytest.mark.parametrize("sent", [b"get", b"Get", b"GET", b"pOsT"])
def test_the_adapter_judges_the_method_as_sent(sent: bytes) -> None:
    flow = tflow.tflow()
    flow.request.data.method = sent
    names = request_names(flow, ConnectionFacts())
    assert names.method == sent.decode()
