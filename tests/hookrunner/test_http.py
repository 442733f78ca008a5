"""http handlers against real local HTTPS servers and a real CONNECT proxy."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest

from sandbox_egress.hookrunner.outcome import Outcome
from tests.hookrunner.helpers import Env, base_environ, pre_group, rule
from tests.hookrunner.net_support import (
    Reply,
    closed_port,
    connect_proxy,
    https_server,
)
from tests.hookrunner.tls_support import Pki

DENY_BODY = json.dumps({"decision": "deny", "reason": "blocked by policy"}).encode()


def http(url: str, timeout: int | None = None, **headers: str) -> dict[str, Any]:
    handler: dict[str, Any] = {"type": "http", "url": url}
    if timeout is not None:
        handler["timeout"] = timeout
    if headers:
        handler["headers"] = {k.replace("_", "-"): v for k, v in headers.items()}
    return handler


def _pre(env: Env, pki: Pki, handler: dict[str, Any], **environ: str):
    env.hooks({"web": pre_group(rule("*", handler))})
    session = env.session(environ=base_environ(**{"SSL_CERT_FILE": str(pki.ca_file), **environ}))
    started = time.monotonic()
    decision = session.pre("read_file", {"path": "private/x.json"})
    return decision, time.monotonic() - started


def test_deny_in_a_2xx_body_with_headers_and_exact_payload(env: Env, pki: Pki) -> None:
    with https_server(pki.server_context(), Reply(200, DENY_BODY)) as server:
        handler = http(f"{server.url}/api/v1/agent-events?src=test", X_Event_Source="sandbox")
        decision, _ = _pre(env, pki, handler)
    assert decision.to_json() == {"decision": "deny", "reason": "blocked by policy", "group": "web"}
    [request] = server.received
    assert (request.method, request.path) == ("POST", "/api/v1/agent-events?src=test")
    assert request.headers["content-type"] == "application/json"
    assert request.headers["x-event-source"] == "sandbox"
    assert request.headers["host"] == f"127.0.0.1:{server.port}"
    assert "authorization" not in request.headers
    assert json.loads(request.body) == {
        "tool_call": {"name": "read_file", "args": {"path": "private/x.json"}},
        "environment_id": "env_test",
    }


@pytest.mark.parametrize(
    ("reply", "outcome", "cause"),
    [
        (Reply(500, DENY_BODY), Outcome.HTTP_ERROR, "answered HTTP 500"),
        (Reply(403, DENY_BODY), Outcome.HTTP_ERROR, "answered HTTP 403"),
        (Reply(200, b""), Outcome.EMPTY_OUTPUT, "printed nothing"),
        (Reply(204), Outcome.EMPTY_OUTPUT, "printed nothing"),
        (Reply(200, b'{"decision": "allow"}'), Outcome.ALLOW, "allowed"),
        (
            Reply(200, b"<html>"),
            Outcome.UNPARSEABLE,
            "output is not exactly one JSON value: Expecting value at character 0",
        ),
        (Reply(200, b"x" * (2 * 1024 * 1024)), Outcome.TRUNCATED, "output exceeded the 1 MiB cap"),
    ],
)
def test_everything_but_an_exact_2xx_deny_allows(
    env: Env, pki: Pki, reply: Reply, outcome: Outcome, cause: str
) -> None:
    with https_server(pki.server_context(), reply) as server:
        decision, _ = _pre(env, pki, http(server.url))
    [run] = decision.runs
    assert (decision.allowed, run.outcome, run.detail) == (True, outcome, cause)
    assert env.runs("pre_tool_execution", "http", outcome.value) == 1
    expected = [] if outcome is Outcome.ALLOW else [("fail_open", outcome.value, cause)]
    assert [(w["kind"], w["outcome"], w["cause"]) for w in env.warnings()] == expected


def test_redirect_is_not_followed_and_its_target_never_contacted(env: Env, pki: Pki) -> None:
    with https_server(pki.server_context(), Reply(200, DENY_BODY)) as target:
        moved = Reply(302, b"", (("Location", f"{target.url}/deny?token=abc"),))
        with https_server(pki.server_context(), moved) as origin:
            decision, _ = _pre(env, pki, http(origin.url))
    [run] = decision.runs
    assert (decision.allowed, run.outcome) == (True, Outcome.HTTP_ERROR)
    assert run.detail == "answered HTTP 302; the redirect to https://127.0.0.1 was not followed"
    assert (len(origin.received), target.received) == (1, [])


@pytest.mark.parametrize(
    "reply",
    [Reply(200, DENY_BODY, delay=10), Reply(200, DENY_BODY + b" " * 100, drip=0.2)],
    ids=["slow headers", "trickling body"],
)
def test_total_deadline_is_enforced(env: Env, pki: Pki, reply: Reply) -> None:
    with https_server(pki.server_context(), reply) as server:
        decision, elapsed = _pre(env, pki, http(server.url, timeout=1))
    [run] = decision.runs
    assert (decision.allowed, run.outcome) == (True, Outcome.TIMEOUT)
    assert elapsed < 1 + 1
    assert len(server.received) == 1


def test_untrusted_certificate_is_a_tls_error(env: Env, pki: Pki, other_pki: Pki) -> None:
    with https_server(other_pki.server_context(), Reply(200, DENY_BODY)) as server:
        decision, _ = _pre(env, pki, http(server.url))
    [run] = decision.runs
    assert (decision.allowed, run.outcome) == (True, Outcome.TLS_ERROR)
    assert run.detail == "TLS failed: unable to get local issuer certificate"
    assert server.received == []


def test_ca_file_option_is_used(env: Env, pki: Pki) -> None:
    with https_server(pki.server_context(), Reply(200, DENY_BODY)) as server:
        env.hooks({"web": pre_group(rule("*", http(server.url)))})
        session = env.session(environ=base_environ(), ca_file=str(pki.ca_file))
        assert session.pre("read_file", {"path": "x"}).reason == "blocked by policy"


def test_missing_ca_file_is_a_tls_error(env: Env, pki: Pki) -> None:
    with https_server(pki.server_context(), Reply(200, DENY_BODY)) as server:
        decision, _ = _pre(env, pki, http(server.url), SSL_CERT_FILE=str(env.root / "none.pem"))
    [run] = decision.runs
    assert (run.outcome, run.detail) == (
        Outcome.TLS_ERROR,
        "cannot load the CA file: No such file or directory",
    )


def test_refused_connection_is_a_network_error(env: Env, pki: Pki) -> None:
    port = closed_port()
    decision, _ = _pre(env, pki, http(f"https://127.0.0.1:{port}/"))
    [run] = decision.runs
    assert (decision.allowed, run.outcome, run.detail) == (
        True,
        Outcome.NETWORK_ERROR,
        f"cannot connect to 127.0.0.1:{port}: Connection refused",
    )


def test_https_proxy_is_used(env: Env, pki: Pki) -> None:
    with (
        https_server(pki.server_context(), Reply(200, DENY_BODY)) as server,
        connect_proxy() as proxy,
    ):
        decision, _ = _pre(env, pki, http(server.url), HTTPS_PROXY=proxy.url)
    assert (decision.allowed, decision.reason) == (False, "blocked by policy")
    assert proxy.connects == [f"127.0.0.1:{server.port}"]
    assert (proxy.auth, len(server.received)) == ([None], 1)


def test_lower_case_https_proxy_wins(env: Env, pki: Pki) -> None:
    with (
        https_server(pki.server_context(), Reply(200, DENY_BODY)) as server,
        connect_proxy() as used,
    ):
        environ = {"https_proxy": used.url, "HTTPS_PROXY": f"http://127.0.0.1:{closed_port()}"}
        decision, _ = _pre(env, pki, http(server.url), **environ)
    assert (decision.allowed, used.connects) == (False, [f"127.0.0.1:{server.port}"])


@pytest.mark.parametrize(
    "no_proxy", ["127.0.0.1", "*", "localhost,127.0.0.0/8", "127.0.0.1:{port}"]
)
def test_no_proxy_is_respected(env: Env, pki: Pki, no_proxy: str) -> None:
    with (
        https_server(pki.server_context(), Reply(200, DENY_BODY)) as server,
        connect_proxy() as proxy,
    ):
        environ = {"HTTPS_PROXY": proxy.url, "NO_PROXY": no_proxy.format(port=server.port)}
        decision, _ = _pre(env, pki, http(server.url), **environ)
    assert (decision.allowed, proxy.connects, len(server.received)) == (False, [], 1)


def test_proxy_refusal_is_its_own_outcome_and_credentials_stay_secret(env: Env, pki: Pki) -> None:
    with (
        https_server(pki.server_context(), Reply(200, DENY_BODY)) as server,
        connect_proxy(refuse=True) as proxy,
    ):
        proxy_url = f"http://agent:s3cret-pass@127.0.0.1:{proxy.port}"
        decision, _ = _pre(env, pki, http(server.url), HTTPS_PROXY=proxy_url)
    [run] = decision.runs
    assert (decision.allowed, run.outcome, run.detail) == (
        True,
        Outcome.PROXY_REFUSED,
        "the proxy refused CONNECT with 403 (not_allowlisted)",
    )
    assert proxy.auth == ["Basic " + base64.b64encode(b"agent:s3cret-pass").decode()]
    assert server.received == []
    assert "s3cret" not in env.stream.getvalue()


def test_post_event_sends_the_error_and_ignores_the_answer(env: Env, pki: Pki) -> None:
    with https_server(pki.server_context(), Reply(200, DENY_BODY)) as server:
        env.hooks({"audit": {"post_tool_execution": [rule("*", http(server.url))]}})
        session = env.session(environ=base_environ(SSL_CERT_FILE=str(pki.ca_file)))
        runs = session.post("read_file", {"path": "x"}, error="read_file: x: No such file")
    assert [r.outcome for r in runs] == [Outcome.OK]
    assert json.loads(server.received[0].body)["error"] == "read_file: x: No such file"


def test_post_event_http_failure_is_a_post_failure_warning(env: Env, pki: Pki) -> None:
    with https_server(pki.server_context(), Reply(503)) as server:
        env.hooks({"audit": {"post_tool_execution": [rule("*", http(server.url))]}})
        session = env.session(environ=base_environ(SSL_CERT_FILE=str(pki.ca_file)))
        session.post("read_file", {"path": "x"})
    assert [(w["kind"], w["outcome"], w["cause"]) for w in env.warnings()] == [
        ("post_failure", "http_error", "answered HTTP 503")
    ]
    assert env.runs("post_tool_execution", "http", "http_error") == 1
