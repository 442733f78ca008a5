"""Placeholder wiring (addons/request.py applying proxy/values/swap.py) with mitmproxy's test flows:
what the upstream would receive, the refusal, the audit line, the counter, the echo."""

from __future__ import annotations

import base64
import json

from mitmproxy import http
from mitmproxy.test import taddons

from tests.addons.test_egress import Resolver, count, https_flow, make_addon, run

PH = "sk-egress-placeholder-addon"
SECRET = "s3cr3t-addon-test"  # what ${TOKEN} resolves to (tests/addons/test_egress.py)
ENTRIES = (
    {
        "domain": "api.example",
        "secrets": [{"placeholder": PH, "value": "${TOKEN}", "in": ["headers", "query"]}],
    },
    {"domain": "other.example"},
)
ANSWERS = {"api.example": ["93.184.216.34"], "other.example": ["93.184.216.35"]}


def test_the_upstream_gets_the_value_in_headers_basic_and_query() -> None:
    addon, metrics, audit = make_addon(Resolver(ANSWERS), *ENTRIES)
    basic = b"Basic " + base64.b64encode(f"x:{PH}".encode())
    flow = https_flow(
        "api.example",
        [(b"Host", b"api.example"), (b"X-Api-Key", PH.encode()), (b"Authorization", basic)],
    )
    flow.request.path = f"/v1?key={PH}&n=1"
    with taddons.context(addon):
        addon.client_connected(flow.client_conn)
        run(addon.requests.requestheaders(flow))
        flow.response = http.Response.make(200, b"", {"X-Echo": SECRET})
        addon.responses.responseheaders(flow)
        addon.responses.response(flow)
    request = flow.request
    assert request.headers["X-Api-Key"] == SECRET
    assert (
        request.headers["Authorization"]
        == "Basic " + base64.b64encode(f"x:{SECRET}".encode()).decode()
    )
    assert request.headers["Host"] == "api.example"
    assert request.path == f"/v1?key={SECRET}&n=1"
    assert flow.response.headers["X-Echo"] == "[redacted]"
    line = json.loads(audit.getvalue())
    assert (line["decision"], line["injected"]) == (
        "allow",
        ["X-Api-Key", "Authorization", "query"],
    )
    assert SECRET not in audit.getvalue()
    injections = metrics.registry.get_sample_value(
        "egress_injections_total", {"rule": "api.example"}
    )
    assert injections == 1.0


def test_a_placeholder_sent_to_another_host_is_refused_audited_and_counted() -> None:
    addon, metrics, audit = make_addon(Resolver(ANSWERS), *ENTRIES)
    flow = https_flow("other.example", [(b"Host", b"other.example"), (b"X-Key", PH.encode())])
    with taddons.context(addon):
        addon.client_connected(flow.client_conn)
        run(addon.requests.requestheaders(flow))
        addon.responses.response(flow)
    assert flow.response is not None
    assert flow.response.status_code == 403
    assert flow.response.headers["X-Egress-Denied"] == "placeholder_elsewhere"
    assert flow.request.headers["X-Key"] == PH  # nothing swapped, nothing sent
    line = json.loads(audit.getvalue())
    assert (line["decision"], line["reason"], line["injected"]) == (
        "deny",
        "placeholder_elsewhere",
        [],
    )
    assert count(metrics, "deny", "placeholder_elsewhere") == 1.0
