"""The audit line ties a CONNECT to its requests and names what was connected (issue 14)."""

from __future__ import annotations

import pytest

from testbed.harness import Harness
from testbed.netns import UPSTREAM_IP

pytestmark = pytest.mark.netns


def test_connection_id_sni_and_the_address_connected_to(harness: Harness) -> None:
    mark = harness.audit_log.mark()
    with harness.tunnel("api.allowed.test:443") as conn:
        for path in ("/audit-1", "/audit-2"):
            assert conn.request("GET", path, [("Host", "api.allowed.test")]).status == 200
    lines = harness.audit_log.wait_count(mark, 3)
    connect, first, second = lines
    assert [line["method"] for line in lines] == ["CONNECT", "GET", "GET"]
    assert connect["connection"] == first["connection"] == second["connection"] != ""
    assert (connect["sni"], first["sni"], second["sni"]) == (
        None,
        "api.allowed.test",
        "api.allowed.test",
    )
    assert {line["upstream"] for line in lines} == {f"{UPSTREAM_IP}:443"}
    assert {line["worker"] for line in lines} == {None}
    other = harness.audit_log.since(mark + 3)
    assert other == []


def test_a_refused_connect_names_no_upstream(harness: Harness) -> None:
    mark = harness.audit_log.mark()
    assert harness.connect("notlisted.test:443").status == 403
    (line,) = harness.audit_log.wait_count(mark, 1)
    assert (line["decision"], line["reason"], line["upstream"]) == ("deny", "not_allowlisted", None)
