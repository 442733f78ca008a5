"""The lingering close's adapter (addons/layers/linger.py): what a refusal answered before its
body is read carries, and the mitmproxy internals the wrapper relies on. End to end, with
boto3, httpx, curl and raw clients: tests/e2e/test_lingering_e2e.py."""

from __future__ import annotations

import inspect

from mitmproxy import http
from mitmproxy.proxy.layers.http import HttpLayer, HttpStream, _http1, _http2
from mitmproxy.test import tflow

from sandbox_egress.addons.layers import limits, linger, pushgate
from sandbox_egress.addons.layers.limits import BODY_FOLLOWS
from sandbox_egress.addons.request import REFUSED_BODY_LIMIT, unread


def test_the_internals_the_wrapper_relies_on_are_where_they_were() -> None:
    for name in ("send_response", "check_killed", "state_consume_request_body", "state_done",
                 "state_errored"):  # fmt: skip
        assert hasattr(HttpStream, name), name
    send = inspect.getsource(HttpStream.send_response)
    assert "yield HttpResponseHook(self.flow)" in send
    assert "if self.client_state == self.state_done:" in send  # else no end of message
    headers = inspect.getsource(HttpStream.state_wait_for_request_headers)
    assert 'headers.get("expect", "").lower() == "100-continue"' in headers
    assert "self.client_state = self.state_consume_request_body" in headers
    assert "connections" in inspect.getsource(HttpLayer.__init__)
    h2 = inspect.getsource(_http2.Http2Connection)
    assert "self.h2_conn = BufferedH2Connection" in h2 and "def is_closed" in h2
    # HTTP/1: a response done before its request lets the body be read, then closes on
    # `Connection: close`; a body event for a dropped stream is ignored by the HTTP layer.
    done = inspect.getsource(_http1.Http1Connection.mark_done)
    assert "http1.connection_close(" in done
    assert "except KeyError:" in inspect.getsource(HttpLayer.event_to_child)


def test_installed_around_the_push_gate() -> None:
    limits.install(lambda _limit: None)
    assert HttpStream._handle_event is linger._lingering
    assert linger.installed() and pushgate.installed()
    limits.install(lambda _limit: None)  # idempotent: no second wrapper in the chain
    assert HttpStream._handle_event is linger._lingering
    assert linger._inner is pushgate._gated


def test_an_early_answer_says_close_and_asks_for_no_body() -> None:
    limits.install(lambda _limit: None)
    flow = tflow.tflow()
    flow.request.headers["Expect"] = "100-continue"
    response = http.Response.make(403, b"{}")
    linger.answer_early(flow, response)
    assert flow.response is response and response.headers["Connection"] == "close"
    assert "expect" not in flow.request.headers  # no `100 Continue` is sent
    assert flow.metadata[linger.LINGER] is True and flow.error is None


def test_which_refusals_are_answered_before_their_body() -> None:
    def flow_with(follows: bool, **headers: str) -> tflow.HTTPFlow:
        flow = tflow.tflow()
        flow.request.headers.clear()
        for name, value in headers.items():
            flow.request.headers[name.replace("_", "-")] = value
        flow.metadata[BODY_FOLLOWS] = follows
        return flow

    assert not unread(flow_with(False))  # a GET
    assert not unread(flow_with(True, content_length=str(REFUSED_BODY_LIMIT)))
    assert unread(flow_with(True, content_length=str(REFUSED_BODY_LIMIT + 1)))
    assert unread(flow_with(True, transfer_encoding="chunked"))
    assert unread(flow_with(True, content_length="10", expect="100-continue"))
