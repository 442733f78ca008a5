"""`--audit-format ocsf` (proxy/audit/ocsf.py): every audit record becomes an OCSF 1.5 event that
validates against the published OCSF schema (testbed/ocsfschema.py), HTTP decisions as
HTTP Activity (4002) and CONNECT/TLS/TCP decisions as Network Activity (4001), with the
decision, reason, rule and sandbox mapped and no secret."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox_egress.proxy.audit.log import AuditLog, AuditRecord
from sandbox_egress.proxy.audit.ocsf import OcsfAuditLog, event
from testbed.ocsfschema import problems, record_of

AT = datetime(2026, 12, 4, 17, 0, 0, 123000, tzinfo=UTC)
SECRET = "sk-live-hunter2-never-logged"


def record(**changes: object) -> AuditRecord:
    fields: dict[str, object] = dict(
        client="10.0.0.5:40000", method="POST", scheme="https", host="api.example.com",
        port=443, decision="deny", reason="budget_exceeded", rule="api.example.com",
        injected=("Authorization",), status=429, bytes_sent=10, bytes_received=200,
        duration_s=0.25, connection="c-1", sni="api.example.com",
        upstream="203.0.113.7:443", clause="rules[0]", sandbox="sbx-42",
    )  # fmt: skip
    fields.update(changes)
    return AuditRecord(**fields)  # type: ignore[arg-type]


CASES = {
    # name: (record, class_uid, activity_id, action_id, disposition_id)
    "a refused POST": (record(), 4002, 6, 2, 2),
    "an allowed GET": (record(method="GET", decision="allow", reason="allowlisted",
                              status=200), 4002, 3, 1, 1),
    "report-only lets it through": (record(method="GET", decision="would_deny",
                                           reason="not_allowlisted"), 4002, 3, 1, 15),
    "a PATCH is Other": (record(method="PATCH"), 4002, 99, 2, 2),
    "an allowed CONNECT opens": (record(method="CONNECT", scheme="", decision="allow",
                                        reason="allowlisted", status=None), 4001, 1, 1, 1),
    "a refused CONNECT": (record(method="CONNECT", scheme="", reason="not_allowlisted",
                                 rule=None, clause=None, sandbox=None), 4001, 5, 2, 2),
    "an SNI passthrough": (record(method="TLS", decision="allow", reason="allowlisted",
                                  status=None), 4001, 1, 1, 1),
    "an IPv6 client": (record(client="[2001:db8::5]:40000", upstream=None), 4002, 6, 2, 2),
}  # fmt: skip


@pytest.mark.parametrize("name", CASES)
def test_each_decision_maps_and_validates(name: str) -> None:
    given_record, class_uid, activity_id, action_id, disposition_id = CASES[name]
    found = event(given_record, AT, worker=1)
    assert problems(found) == []
    assert (found["class_uid"], found["activity_id"], found["type_uid"]) == (
        class_uid, activity_id, class_uid * 100 + activity_id)  # fmt: skip
    assert (found["action_id"], found["disposition_id"]) == (action_id, disposition_id)
    assert found["status_detail"] == given_record.reason
    assert found["time"] == int(AT.timestamp() * 1000)
    assert found.get("firewall_rule", {}).get("name") == given_record.rule
    assert found["metadata"].get("tenant_uid") == given_record.sandbox
    assert found["unmapped"]["egress"]["reason"] == given_record.reason


def test_the_http_parts_and_endpoints() -> None:
    found = event(record(), AT)
    assert found["http_request"] == {
        "url": {
            "url_string": "https://api.example.com:443",
            "hostname": "api.example.com",
            "scheme": "https",
            "port": 443,
        },  # the origin: a path may carry secrets
        "http_method": "POST",
    }
    assert found["http_response"] == {"code": 429}
    assert found["src_endpoint"] == {"ip": "10.0.0.5", "port": 40000}
    assert found["dst_endpoint"] == {"hostname": "api.example.com", "ip": "203.0.113.7",
                                     "port": 443}  # fmt: skip
    assert event(record(client="[2001:db8::5]:4"), AT)["src_endpoint"]["ip"] == "2001:db8::5"


methods = st.sampled_from(["GET", "POST", "CONNECT", "TLS", "TCP", "PATCH", "BREW", "x" * 16])
texts = st.text(max_size=40)
records = st.builds(
    AuditRecord,
    client=st.one_of(st.just(""), st.just("10.1.2.3:5"), st.just("[::1]:9"),
                     st.just("[fe80::1%eth0]:7"), texts),
    method=methods, scheme=st.sampled_from(["", "http", "https"]), host=texts,
    port=st.one_of(st.none(), st.integers(-1, 70000)),
    decision=st.sampled_from(["allow", "deny", "would_deny"]), reason=texts,
    rule=st.one_of(st.none(), texts), injected=st.lists(texts, max_size=3).map(tuple),
    status=st.one_of(st.none(), st.integers(100, 599)),
    bytes_sent=st.integers(0, 2**40), bytes_received=st.integers(0, 2**40),
    duration_s=st.floats(0, 1e6), connection=texts, sni=st.one_of(st.none(), texts),
    upstream=st.one_of(st.none(), st.just("198.18.0.1:443"), texts),
    clause=st.one_of(st.none(), texts), sandbox=st.one_of(st.none(), texts),
)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(records, st.one_of(st.none(), st.integers(0, 64)))
def test_any_record_validates(given_record: AuditRecord, worker: int | None) -> None:
    assert problems(event(given_record, AT, worker)) == []


def test_the_ocsf_log_writes_one_event_per_line_and_no_secret() -> None:
    stream = io.StringIO()
    OcsfAuditLog(stream, worker=0).write(record(), AT)
    line = stream.getvalue()
    assert line.endswith("\n") and line.count("\n") == 1
    assert problems(json.loads(line)) == [] and SECRET not in line
    assert "Authorization" in line  # the injected header's name, never its value


def test_a_jsonl_line_reads_back_as_the_record_it_was_written_from() -> None:
    stream = io.StringIO()
    AuditLog(stream, worker=3).write(record(), AT)
    assert record_of(json.loads(stream.getvalue())) == (record(), AT, 3)
