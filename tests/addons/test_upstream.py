"""An upstream TLS failure becomes the project's refusal (addons/upstream.py), with
mitmproxy's test flows; end to end in tests/e2e/test_upstream_tls_e2e.py."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from mitmproxy.proxy.layers.http import DropStream, SendHttp
from mitmproxy.proxy.layers.http._events import (
    ErrorCode,
    ResponseData,
    ResponseEndOfMessage,
    ResponseHeaders,
    ResponseProtocolError,
)
from mitmproxy.test import tflow

from sandbox_egress.addons import upstream
from sandbox_egress.addons.shared import FLOW_KEY, FlowState
from sandbox_egress.proxy.config.loader import parse
from sandbox_egress.proxy.decision import Decision, Reason
from sandbox_egress.proxy.failures import UNPROCESSED
from sandbox_egress.proxy.metrics import ProxyMetrics

ENTRY = parse({"network": {"allowlist": [{"domain": "*.test"}]}}, "e.yaml", {}).allowlist[0]


def failed_flow(failures: upstream.UpstreamFailures, allowed: bool = True) -> Any:
    flow = tflow.tflow()
    flow.response = None
    decision = Decision.allow(ENTRY) if allowed else Decision.deny(Reason.NOT_ALLOWLISTED)
    flow.metadata[FLOW_KEY] = FlowState(decision, "api.test")
    data = SimpleNamespace(
        context=SimpleNamespace(client=flow.client_conn),
        conn=SimpleNamespace(error="Certificate verify failed: unable to get local issuer"),
    )
    failures.tls_failed_server(data)  # type: ignore[arg-type]
    return flow


def test_a_failed_handshake_turns_the_request_into_upstream_tls() -> None:
    failures = upstream.UpstreamFailures()
    flow = failed_flow(failures)
    failures.error(flow)
    state = flow.metadata[FLOW_KEY]
    assert (state.decision.verdict, state.decision.reason) == ("deny", Reason.UPSTREAM_TLS)
    assert flow.response.status_code == 502
    assert flow.response.headers["X-Egress-Denied"] == "upstream_tls"
    assert json.loads(flow.response.content)["host"] == "api.test"
    assert flow.metadata[upstream.REFUSAL_KEY] is flow.response


def test_other_failures_and_refusals_are_left_alone() -> None:
    failures = upstream.UpstreamFailures()
    refused = failed_flow(failures, allowed=False)
    failures.error(refused)
    assert refused.response is None
    unrelated = tflow.tflow()
    unrelated.response = None
    unrelated.metadata[FLOW_KEY] = FlowState(Decision.allow(ENTRY), "api.test")
    failures.error(unrelated)  # no handshake failed on its connection
    assert unrelated.response is None
    failures.client_disconnected(unrelated.client_conn)


def test_the_error_mitmproxy_would_send_is_replaced_by_the_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    failures = upstream.UpstreamFailures()
    flow = failed_flow(failures)
    failures.error(flow)
    client = flow.client_conn
    event = ResponseProtocolError(1, "Certificate verify failed", ErrorCode.CONNECT_FAILED)

    def original(self: object, evt: ResponseProtocolError) -> Any:
        yield SendHttp(evt, client)
        yield DropStream(1)

    monkeypatch.setattr(upstream, "_original", original)
    stream = SimpleNamespace(flow=flow, stream_id=1, context=SimpleNamespace(client=client))
    sent = list(upstream._readable(stream, event))  # type: ignore[arg-type]
    assert [type(c.event) if isinstance(c, SendHttp) else type(c) for c in sent] == [
        ResponseHeaders,
        ResponseData,
        ResponseEndOfMessage,
        DropStream,
    ]
    assert sent[0].event.response is flow.response


def _stream(flow: Any) -> Any:
    return SimpleNamespace(flow=flow, stream_id=1, context=SimpleNamespace(client=flow.client_conn))


def _mitmproxy_answers(
    monkeypatch: pytest.MonkeyPatch, failures: upstream.UpstreamFailures
) -> None:
    """mitmproxy's handle_protocol_error, as far as the wrapper sees it: the error hook,
    then the error sent to the client."""

    def original(self: Any, evt: ResponseProtocolError) -> Any:
        self.flow.error = SimpleNamespace(msg=evt.message)
        failures.error(self.flow)
        yield SendHttp(evt, self.context.client)
        yield DropStream(1)

    monkeypatch.setattr(upstream, "_original", original)


@pytest.mark.parametrize(
    ("code", "message", "reason", "status"),
    [
        (ErrorCode.CONNECT_FAILED, "[Errno 111] Connect call failed", "upstream_refused", 502),
        (ErrorCode.CONNECT_FAILED, "connect timed out after 2 s", "upstream_timeout", 504),
        (ErrorCode.GENERIC_SERVER_ERROR, "server closed connection", "upstream_reset", 502),
    ],
)
def test_an_upstream_failure_is_named_audited_and_answered(
    monkeypatch: pytest.MonkeyPatch, code: ErrorCode, message: str, reason: str, status: int
) -> None:
    failures = upstream.UpstreamFailures()
    flow = tflow.tflow()
    flow.response = None
    flow.metadata[FLOW_KEY] = FlowState(Decision.allow(ENTRY), "api.test")
    _mitmproxy_answers(monkeypatch, failures)
    event = ResponseProtocolError(1, message, code)
    sent = list(upstream._readable(_stream(flow), event))  # type: ignore[arg-type]
    state = flow.metadata[FLOW_KEY]
    assert (state.decision.verdict, state.decision.reason.value) == ("deny", reason)
    head = sent[0].event.response
    assert head is flow.response and head.status_code == status
    assert head.headers["X-Egress-Denied"] == reason and "Server" not in head.headers
    assert json.loads(head.content)["error"] == "egress_failed"


def test_a_page_no_hook_replaced_is_the_products_json_still(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    flow = tflow.tflow()
    flow.response = None  # no FlowState: the policy never saw it

    def original(self: Any, evt: ResponseProtocolError) -> Any:
        yield SendHttp(evt, self.context.client)

    monkeypatch.setattr(upstream, "_original", original)
    event = ResponseProtocolError(1, "server closed connection", ErrorCode.GENERIC_SERVER_ERROR)
    sent = list(upstream._readable(_stream(flow), event))  # type: ignore[arg-type]
    response = sent[0].event.response
    assert (response.status_code, response.headers["X-Egress-Denied"]) == (502, "upstream_reset")


def test_a_client_that_went_away_is_no_upstream_failure() -> None:
    failures = upstream.UpstreamFailures()
    flow = tflow.tflow()
    flow.response = None
    flow.metadata[FLOW_KEY] = FlowState(Decision.allow(ENTRY), "api.test")
    failures.error(flow)  # no failure noted: the client disconnected
    assert flow.response is None and flow.metadata[FLOW_KEY].decision.allowed


def test_the_internals_the_wrappers_rely_on_are_where_they_were() -> None:
    import inspect

    from mitmproxy.proxy.layers.http import HttpStream

    source = inspect.getsource(HttpStream.make_server_connection)
    assert "self.handle_protocol_error(" in source and "ErrorCode.CONNECT_FAILED" in source
    # `_send_again` asks it whether the client reset its stream while the second
    # connection opened (D712): it peeks at the events queued during the pause.
    killed = inspect.getsource(HttpStream.check_killed)
    assert "for evt in self._paused_event_queue:" in killed
    assert "isinstance(evt, RequestProtocolError)" in killed
    assert "yield HttpErrorHook(self.flow)" in killed


def _sent_again(metrics: ProxyMetrics, cause: str, outcome: str) -> float | None:
    return metrics.registry.get_sample_value(
        "egress_upstream_sent_again_total", {"cause": cause, "outcome": outcome}
    )


def test_a_request_sent_again_is_counted_as_it_ends() -> None:
    """D702: answered when its answer head comes, failed when the error hook runs before
    one; a request never sent again is not counted."""
    metrics = ProxyMetrics()
    failures = upstream.UpstreamFailures(metrics)

    def flow_sent_again(cause: str | None) -> Any:
        flow = tflow.tflow()
        flow.response = None
        flow.metadata[FLOW_KEY] = FlowState(Decision.allow(ENTRY), "api.test")
        if cause is not None:
            flow.metadata[upstream.AGAIN_KEY] = cause
        return flow

    answered = flow_sent_again("unprocessed")
    answered.response = tflow.tresp()
    failures.responseheaders(answered)
    failures.error(flow_sent_again("closed"))
    late = flow_sent_again("closed")  # failed after its answer head: counted answered only
    late.response = tflow.tresp()
    failures.error(late)
    failures.responseheaders(flow_sent_again(None))
    failures.error(flow_sent_again(None))
    counts = {
        (cause, outcome): _sent_again(metrics, cause, outcome)
        for cause in ("closed", "unprocessed")
        for outcome in ("answered", "failed")
    }
    assert counts == {
        ("closed", "answered"): 0.0,
        ("closed", "failed"): 1.0,
        ("unprocessed", "answered"): 1.0,
        ("unprocessed", "failed"): 0.0,
    }


def _retrying_stream(flow: Any, killed: bool = False) -> Any:
    """What `_readable` and `_send_again` read of mitmproxy's `HttpStream`: a stream that
    sent its whole request and waits for the answer head; its new connection opens."""

    def make_server_connection() -> Any:
        yield "GetHttpConnection"
        return True

    def check_killed(_emit: bool) -> Any:
        yield from ()
        return killed

    done, waiting = object(), object()
    return SimpleNamespace(
        flow=flow, stream_id=1, context=SimpleNamespace(client=flow.client_conn, server="new"),
        client_state=done, state_done=done, server_state=waiting,
        state_wait_for_response_headers=waiting,
        make_server_connection=make_server_connection, check_killed=check_killed,
    )  # fmt: skip


@pytest.mark.parametrize("killed", [False, True], ids=["sent", "client-left"])
def test_a_request_the_upstream_did_not_process_goes_once_more_on_the_new_connection(
    killed: bool,
) -> None:
    flow = tflow.tflow()
    flow.response = None
    flow.request.content = b"held"  # held whole: a body may go again (D701)
    flow.request.method = "POST"
    event = ResponseProtocolError(1, UNPROCESSED, ErrorCode.GENERIC_SERVER_ERROR)
    sent = list(upstream._readable(_retrying_stream(flow, killed), event))  # type: ignore[arg-type]
    assert sent[0] == "GetHttpConnection"
    names = [(type(c.event).__name__, c.connection) for c in sent[1:]]
    expected = [("RequestHeaders", "new"), ("RequestData", "new"), ("RequestEndOfMessage", "new")]
    assert names == ([] if killed else expected)  # D712: the client left, nothing is sent
    assert flow.metadata[upstream.AGAIN_KEY] == "unprocessed"
    assert [c.event.data for c in sent[1:] if hasattr(c.event, "data")] == (
        [] if killed else [b"held"]
    )
