"""mitmproxy's own error pages replaced by the product's JSON (addons/pages.py). End to end
in tests/e2e/test_adversary_fronting_e2e.py (HTTP/1) and test_fuzz_e2e.py (HTTP/2)."""

from __future__ import annotations

import inspect
import json
from types import SimpleNamespace
from typing import Any

import pytest
from mitmproxy.proxy.layers.http import HttpStream, SendHttp, _http1
from mitmproxy.proxy.layers.http._events import (
    ErrorCode,
    ResponseData,
    ResponseEndOfMessage,
    ResponseHeaders,
    ResponseProtocolError,
)
from mitmproxy.test import tflow

from sandbox_egress.addons import pages


def _validation_refuses(self: Any, request: bool) -> Any:
    error = ResponseProtocolError(
        1, "Invalid request scheme: ftp", ErrorCode.REQUEST_VALIDATION_FAILED
    )
    yield SendHttp(error, self.context.client)
    return True


def _run(monkeypatch: pytest.MonkeyPatch, http2: bool) -> tuple[list[Any], bool]:
    monkeypatch.setattr(pages, "_original_check_invalid", _validation_refuses)
    flow = tflow.tflow()
    flow.request.http_version = "HTTP/2.0" if http2 else "HTTP/1.1"
    stream = SimpleNamespace(
        flow=flow, stream_id=1, context=SimpleNamespace(client=flow.client_conn)
    )
    generator = pages._check_invalid(stream, True)  # type: ignore[arg-type]
    sent: list[Any] = []
    try:
        while True:
            sent.append(generator.send(None))
    except StopIteration as stop:
        return sent, bool(stop.value)


def test_an_http2_request_mitmproxy_refuses_gets_the_products_400(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent, invalid = _run(monkeypatch, http2=True)
    assert invalid
    assert [type(c.event) for c in sent] == [ResponseHeaders, ResponseData, ResponseEndOfMessage]
    answer = sent[0].event.response
    assert answer.status_code == 400 and "Server" not in answer.headers
    assert answer.headers["X-Egress-Denied"] == "bad_request"
    assert json.loads(sent[1].event.data)["error"] == "egress_denied"


def test_http1_keeps_mitmproxys_path_whose_page_is_replaced_below(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent, invalid = _run(monkeypatch, http2=False)  # the connection is closed after it
    assert invalid and [type(c.event) for c in sent] == [ResponseProtocolError]


@pytest.mark.parametrize(("status", "reason"), [(400, "bad_request"), (502, "upstream_reset")])
def test_mitmproxys_http1_error_page_is_the_products_json(status: int, reason: str) -> None:
    raw = pages._error_response(status, "<script>the request's own bytes</script>")
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 %d " % status)
    assert b"mitmproxy" not in raw and b"<script>" not in raw and b"<html" not in raw
    assert f"X-Egress-Denied: {reason}".encode() in head and b"Connection: close" in head
    assert json.loads(body)["reason"] == reason


def test_the_internals_it_relies_on_are_where_they_were() -> None:
    assert "make_error_response(" in inspect.getsource(_http1.Http1Server)
    check = inspect.getsource(HttpStream.check_invalid)
    assert "ResponseProtocolError(" in check and "self.context.client" in check
    assert "if (yield from self.check_invalid(True)):" in inspect.getsource(HttpStream)
