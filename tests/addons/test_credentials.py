"""The credentials stage wired into the request addon (addons/clauses/credentials.py) with
mitmproxy's test flows and a real cache over real sources (env, file): what the upstream
would receive, the 502 refusal with nothing written, the audit line, the echo."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

from mitmproxy import http
from mitmproxy.test import taddons

from sandbox_egress.addons.egress import EgressPolicy
from sandbox_egress.proxy.audit.log import AuditLog
from sandbox_egress.proxy.config.loader import parse
from sandbox_egress.proxy.credentials.cache import Credentials
from sandbox_egress.proxy.credentials.https import Https
from sandbox_egress.proxy.credentials.section import sources
from sandbox_egress.proxy.metrics import ProxyMetrics
from sandbox_egress.proxy.policy import Policy
from tests.addons.test_egress import Resolver, count, https_flow, run

TOKEN = "minted-credential-value-1"
ANSWERS = {"api.example": ["93.184.216.34"], "git.example": ["93.184.216.35"],
           "gone.example": ["93.184.216.36"], "rules.example": ["93.184.216.37"],
           "ph.example": ["93.184.216.38"]}  # fmt: skip


def make(tmp_path: Path) -> tuple[EgressPolicy, ProxyMetrics, io.StringIO]:
    document = {
        "credentials": {
            "api": {"env": "API_TOKEN"},
            "gh": {"file": str(tmp_path / "gh")},
            "gone": {"file": str(tmp_path / "absent")},
        },
        "network": {
            "allowlist": [
                {"domain": "api.example", "transform": {"X-Key": "key=${credential:api}"}},
                {
                    "domain": "git.example",
                    "credential": {"name": "gh", "as": "basic", "username": "x-access-token"},
                },
                {"domain": "gone.example", "credential": {"name": "gone", "as": "bearer"}},
                {
                    "domain": "ph.example",
                    "secrets": [
                        {
                            "placeholder": "egress-placeholder-gh",
                            "value": "${credential:gh}",
                            "in": ["headers", "query"],
                            "require": True,
                        }
                    ],
                },
                {
                    "domain": "rules.example",
                    "credential": {"name": "gone", "as": "bearer"},
                    "rules": [{"methods": ["GET"]}],
                },
            ]
        },
    }
    (tmp_path / "gh").write_text(TOKEN + "\n")
    environ = {"API_TOKEN": TOKEN}
    config = parse(document, "env.yaml", environ)
    metrics, audit = ProxyMetrics(), io.StringIO()
    addon = EgressPolicy(Policy(config), metrics, AuditLog(audit), resolver=Resolver(ANSWERS))

    def on_fetch(name: str, outcome: str) -> None:
        metrics.credential_fetches.labels(name, outcome).inc()

    addon.shared.credentials = Credentials(*sources(config.credentials, Https()), on_fetch=on_fetch)
    return addon, metrics, audit


def request(addon: EgressPolicy, host: str, method: str = "GET", echo: str = "") -> http.HTTPFlow:
    flow = https_flow(host, [(b"Host", host.encode()), (b"Authorization", b"Bearer sandbox-own")])
    flow.request.method = method
    with taddons.context(addon):
        addon.client_connected(flow.client_conn)
        run(addon.requests.requestheaders(flow))
        if flow.response is None:
            flow.response = http.Response.make(200, b"", {"X-Echo": echo})
            addon.responses.responseheaders(flow)
        addon.responses.response(flow)
    return flow


def test_a_transform_naming_a_credential_is_written_and_its_echo_redacted(
    tmp_path: Path,
) -> None:
    addon, metrics, audit = make(tmp_path)
    flow = request(addon, "api.example", echo=f"you sent key={TOKEN}")
    assert flow.request.headers["X-Key"] == f"key={TOKEN}"
    assert flow.response is not None and flow.response.headers["X-Echo"] == "you sent [redacted]"
    line = json.loads(audit.getvalue())
    assert (line["decision"], line["injected"], line["credentials"]) == (
        "allow",
        ["X-Key"],
        ["api"],
    )
    assert TOKEN not in audit.getvalue()
    fetches = metrics.registry.get_sample_value(
        "egress_credential_fetches_total", {"credential": "api", "outcome": "ok"}
    )
    assert fetches == 1.0


def test_a_basic_binding_replaces_the_sandboxs_authorization(tmp_path: Path) -> None:
    addon, _, _ = make(tmp_path)
    flow = request(addon, "git.example")
    expected = base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
    assert flow.request.headers.get_all("Authorization") == [f"Basic {expected}"]


def test_a_missing_credential_is_502_and_nothing_is_written(tmp_path: Path) -> None:
    addon, metrics, audit = make(tmp_path)
    flow = request(addon, "gone.example")
    assert flow.response is not None and flow.response.status_code == 502
    assert flow.response.headers["X-Egress-Denied"] == "credential_unavailable"
    assert "Authorization" not in flow.request.headers  # nothing written (nor sent)
    line = json.loads(audit.getvalue())
    assert (line["reason"], line["credentials"], line["injected"]) == (
        "credential_unavailable",
        ["gone"],
        [],
    )
    assert count(metrics, "deny", "credential_unavailable") == 1.0


def test_a_request_the_rules_refuse_never_fetches(tmp_path: Path) -> None:
    addon, metrics, audit = make(tmp_path)
    flow = request(addon, "rules.example", method="POST")
    assert flow.response is not None and flow.response.headers["X-Egress-Denied"] == "rule_mismatch"
    fetched = metrics.registry.get_sample_value(
        "egress_credential_fetches_total", {"credential": "gone", "outcome": "failed"}
    )
    assert fetched is None
    assert "credentials" not in json.loads(audit.getvalue())


def test_a_placeholder_naming_a_credential_is_swapped_in_basic_and_query(tmp_path: Path) -> None:
    addon, _, audit = make(tmp_path)
    basic = "Basic " + base64.b64encode(b"x-access-token:egress-placeholder-gh").decode()
    flow = https_flow("ph.example", [(b"Host", b"ph.example"), (b"Authorization", basic.encode())])
    flow.request.path = "/repo?token=egress-placeholder-gh"
    with taddons.context(addon):
        addon.client_connected(flow.client_conn)
        run(addon.requests.requestheaders(flow))
        flow.response = http.Response.make(200, b"", {"X-Echo": TOKEN})
        addon.responses.responseheaders(flow)
        addon.responses.response(flow)
    expected = base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
    assert flow.request.headers["Authorization"] == f"Basic {expected}"
    assert flow.request.path == f"/repo?token={TOKEN}"
    assert flow.response is not None and flow.response.headers["X-Echo"] == "[redacted]"
    line = json.loads(audit.getvalue())
    assert (line["injected"], line["credentials"]) == (["Authorization", "query"], ["gh"])


def test_a_required_placeholder_naming_a_credential_is_still_required(tmp_path: Path) -> None:
    addon, metrics, _ = make(tmp_path)
    flow = request(addon, "ph.example")  # the sandbox's own key, no placeholder
    assert flow.response is not None
    assert flow.response.headers["X-Egress-Denied"] == "credential_required"
    fetched = metrics.registry.get_sample_value(
        "egress_credential_fetches_total", {"credential": "gh", "outcome": "ok"}
    )
    assert fetched is None  # refused before any fetch
