"""End to end, report-only rollout (issue 14): a new allowlist tried before it is enforced.

With `network.report_only: true` a request the allowlist would refuse reaches its
upstream, is audited and counted as `would_deny` with the reason it would have had, and
carries no injected credential; loopback and internal addresses stay refused.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from testbed.expect import Observed, assert_refused, header_values
from tests.e2e.conftest import SECRET_ENV, PrivateProxy

pytestmark = pytest.mark.netns

CONFIG = f"""\
network:
  report_only: true
  allowlist:
    - domain: api.allowed.test
      transform:
        Authorization: "Bearer ${{{SECRET_ENV}}}"
    - domain: 198.18.1.0/24
"""


def test_would_deny_is_let_through_audited_and_counted(
    private_proxy: Callable[..., PrivateProxy], obs: Observed
) -> None:
    p = private_proxy("report", CONFIG)
    mark = p.view.audit_log.mark()
    response = p.view.https("notlisted.test:443", "/trial", [("Authorization", "Bearer own")])

    assert response.status == 200, response.describe()
    record = obs.only_request()
    assert record["target"] == "/trial"
    assert header_values(record, "Authorization") == ["Bearer own"]  # nothing injected
    lines = p.view.audit_log.wait_count(mark, 2)
    assert [(a["method"], a["decision"], a["reason"], a["injected"]) for a in lines] == [
        ("CONNECT", "would_deny", "not_allowlisted", []),
        ("GET", "would_deny", "not_allowlisted", []),
    ]
    samples = p.process.scrape()
    key = ("egress_requests_total", (("decision", "would_deny"), ("reason", "not_allowlisted")))
    assert samples[key] == 2


def test_the_allowed_transform_host_still_gets_its_credential(
    private_proxy: Callable[..., PrivateProxy], obs: Observed
) -> None:
    p = private_proxy("report-allow", CONFIG)
    assert p.view.https("api.allowed.test:443", "/real").status == 200
    record = obs.only_request()
    assert header_values(record, "Authorization") == [f"Bearer {p.view.secrets[0]}"]


@pytest.mark.parametrize(
    ("host", "reason"),
    [("rebind.test", "loopback"), ("internal.test", "internal_address")],
)
def test_loopback_and_internal_stay_refused(
    private_proxy: Callable[..., PrivateProxy], obs: Observed, host: str, reason: str
) -> None:
    p = private_proxy("report-never", CONFIG)
    assert_refused(p.view.plain(f"http://{host}/never"), reason)
    obs.assert_nothing_reached()
