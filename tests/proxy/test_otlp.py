"""`--otlp-endpoint` (proxy/otlp.py, runtime/otlp.py): audit records reach a real OTLP/HTTP
receiver on loopback (a test server that decodes what arrives) with the standard attribute
names; a dead collector only drops and counts, and writing never waits for it."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from sandbox_egress.proxy.audit import AuditRecord
from sandbox_egress.proxy.otlp import log_record
from sandbox_egress.runtime.cmdline import _otlp_url, parser
from sandbox_egress.runtime.otlp import (
    BATCH,
    CAPACITY,
    OtlpExporter,
    header_option,
    resolve_headers,
)

AT = datetime(2026, 12, 4, 17, 0, 0, tzinfo=UTC)


def record(n: int = 0, **changes: Any) -> AuditRecord:
    fields: dict[str, Any] = dict(
        client="10.0.0.5:40000", method="POST", scheme="https", host="api.example.com",
        port=443, decision="deny", reason="budget_exceeded", rule="api.example.com",
        injected=("Authorization",), status=429, bytes_sent=n, bytes_received=2,
        duration_s=0.25, connection="c-1", sni="api.example.com",
        upstream="203.0.113.7:443", clause=None, sandbox="sbx-42",
    )  # fmt: skip
    fields.update(changes)
    return AuditRecord(**fields)


class Receiver(ThreadingHTTPServer):
    """A collector's OTLP/HTTP logs endpoint: decodes each JSON export request it gets."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, Any]]] = []
        self.headers: list[dict[str, str]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.headers.append(dict(self.headers.items()))
                receiver.requests.append(
                    (self.path, self.headers["Content-Type"], json.loads(body))
                )
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    def records(self) -> list[dict[str, Any]]:
        return [
            log
            for _, _, request in self.requests
            for resource in request["resourceLogs"]
            for scope in resource["scopeLogs"]
            for log in scope["logRecords"]
        ]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def attributes(log: dict[str, Any]) -> dict[str, Any]:
    return {a["key"]: next(iter(a["value"].values())) for a in log["attributes"]}


def test_records_arrive_batched_with_the_standard_attribute_names(receiver: Receiver) -> None:
    dropped: list[int] = []
    exporter = OtlpExporter(f"http://127.0.0.1:{receiver.server_address[1]}", dropped.append)

    async def export() -> None:
        for n in range(BATCH + 3):
            exporter.write(record(n))
        await exporter.flush()

    asyncio.run(export())
    assert dropped == [] and exporter.sent == BATCH + 3
    assert [(path, kind) for path, kind, _ in receiver.requests] == [
        ("/v1/logs", "application/json")
    ] * 2  # one full batch, then the rest
    logs = receiver.records()
    assert len(logs) == BATCH + 3
    found = attributes(logs[0])
    assert found["http.request.method"] == "POST"
    assert found["url.full"] == "https://api.example.com:443"  # the origin, never a path
    assert found["server.address"] == "api.example.com" and found["server.port"] == "443"
    assert found["client.address"] == "10.0.0.5" and found["client.port"] == "40000"
    assert found["http.response.status_code"] == "429"
    assert found["egress.reason"] == "budget_exceeded" and found["egress.sandbox"] == "sbx-42"
    assert found["egress.injected"] == {"values": [{"stringValue": "Authorization"}]}
    resource = receiver.requests[0][2]["resourceLogs"][0]["resource"]["attributes"]
    assert {"key": "service.name", "value": {"stringValue": "sandbox-egress"}} in resource


def test_a_dead_collector_only_drops_and_counts() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dropped: list[int] = []
    exporter = OtlpExporter(f"http://127.0.0.1:{port}/v1/logs", dropped.append)

    async def export() -> None:
        for n in range(CAPACITY + 5):
            exporter.write(record(n))  # never waits: the queue is bounded
        await exporter.flush()

    asyncio.run(export())
    assert sum(dropped) == CAPACITY + 5 and exporter.sent == 0


def test_the_log_record_of_a_connect_has_no_url_and_a_time_in_nanoseconds() -> None:
    log = log_record(record(method="CONNECT", scheme="", status=None), AT, worker=2)
    found = attributes(log)
    assert "url.full" not in found and found["http.request.method"] == "CONNECT"
    assert found["egress.worker"] == "2"
    assert log["timeUnixNano"] == str(int(AT.timestamp()) * 10**9)
    assert (log["severityNumber"], log["severityText"]) == (14, "WARN2")


@pytest.mark.parametrize("url", ["ftp://collector:21", "http://", "collector:4318", "http://h:0"])
def test_a_bad_endpoint_is_refused_on_the_command_line(url: str) -> None:
    with pytest.raises(Exception, match="expected http"):
        _otlp_url(url)


def test_otlp_headers_reach_the_collector_with_file_references_read_per_batch(
    receiver: Receiver, tmp_path: Any
) -> None:
    """Issue 48: `--otlp-header NAME=VALUE` (repeatable; `${file:...}` and `${NAME}`),
    as the collector receives it; a rotated token file is read for the next batch (D402)."""
    token = tmp_path / "otlp-token"
    token.write_text("first-otlp-s3cret\n")
    args = parser().parse_args(
        ["run", "--otlp-header", f"Authorization=Bearer ${{file:{token}}}",
         "--otlp-header", "X-Scope-OrgID=${OTLP_TENANT}"]
    )  # fmt: skip
    assert args.otlp_header == [
        ("Authorization", f"Bearer ${{file:{token}}}"),
        ("X-Scope-OrgID", "${OTLP_TENANT}"),
    ]
    exporter = OtlpExporter(
        f"http://127.0.0.1:{receiver.server_address[1]}", [].append, headers=args.otlp_header
    )

    async def export() -> None:
        exporter.write(record(1))
        await exporter.flush()
        token.write_text("second-otlp-s3cret\n")
        exporter.write(record(2))
        await exporter.flush()

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OTLP_TENANT", "tenant-7")
        asyncio.run(export())
    assert exporter.sent == 2
    assert [(h["Authorization"], h["X-Scope-OrgID"]) for h in receiver.headers] == [
        ("Bearer first-otlp-s3cret", "tenant-7"),
        ("Bearer second-otlp-s3cret", "tenant-7"),
    ]


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("Authorization", "expected NAME=VALUE"),
        ("Bad Name=x", "expected NAME=VALUE"),
        ("Content-Length=5", "set by the exporter itself"),
    ],
)
def test_a_bad_otlp_header_is_refused_on_the_command_line(option: str, message: str) -> None:
    with pytest.raises(SystemExit):
        parser().parse_args(["run", "--otlp-header", option])
    with pytest.raises(ValueError, match=message):
        header_option(option)


def test_an_unresolvable_otlp_header_stops_the_start_naming_the_reference_only(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from sandbox_egress.runtime import cli

    missing = tmp_path / "absent-token"
    argv = ["run", "--otlp-endpoint", "http://127.0.0.1:4318", "--otlp-header"]
    assert cli.main([*argv, f"Authorization=Bearer ${{file:{missing}}}"]) == 2
    err = capsys.readouterr().err
    assert f"--otlp-header Authorization: cannot read ${{file:{missing}}}" in err
    assert resolve_headers([("A", "plain")], {}) == [("A", "plain")]
