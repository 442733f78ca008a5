"""End to end, budgets (docs/configuration.md#budgets): curl meets `429` with `Retry-After`
once an entry's request budget is spent, Python's urllib meets it once the upload budget
is, and an upload that crosses the budget while streaming is cut before its end reaches
the upstream. Nothing of a refused request goes upstream; the metrics say what is left.
"""

from __future__ import annotations

import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable

import pytest

from testbed.expect import Observed, assert_refused
from testbed.rawhttp import chunked
from tests.e2e.conftest import PrivateProxy, relaying

pytestmark = pytest.mark.netns


@pytest.fixture
def private_proxy(
    private_proxy: Callable[..., PrivateProxy], body_relay: bool
) -> Callable[..., PrivateProxy]:
    """Every proxy of this module's tests, with the body relay off and on (issue 49)."""
    return relaying(private_proxy, body_relay)


CONFIG = """\
network:
  allowlist:
    - domain: api.allowed.test
      budget:
        requests: "3/hour"
    - domain: other.allowed.test
      budget:
        upload: "100KiB/hour"
    - domain: 198.18.1.0/24
"""


def curl(p: PrivateProxy, url: str) -> tuple[int, dict[str, str]]:
    done = subprocess.run(
        ["curl", "-s", "-o", "/dev/null", "-D", "/dev/stderr", "-w", "%{http_code}",
         "--cacert", str(p.view.proxy_ca),
         "-x", f"http://{p.view.proxy_host}:{p.view.proxy_port}", url],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    lines = done.stderr.splitlines()
    headers = {k.lower(): v.strip() for k, sep, v in (x.partition(":") for x in lines) if sep}
    return int(done.stdout), headers


def test_curl_meets_429_once_the_request_budget_is_spent(
    private_proxy: Callable[..., PrivateProxy], obs: Observed
) -> None:
    p = private_proxy("budget-requests", CONFIG)
    answers = [curl(p, f"https://api.allowed.test/n{i}") for i in range(4)]
    assert [status for status, _ in answers] == [200, 200, 200, 429]
    headers = answers[3][1]
    assert headers["x-egress-denied"] == "budget_exceeded"
    assert 1100 <= int(headers["retry-after"]) <= 1200  # one request per 1200 s
    assert [r["target"] for r in obs.requests()] == ["/n0", "/n1", "/n2"]
    samples = p.process.scrape()
    labels = (("budget", "requests"), ("rule", "api.allowed.test"))
    assert samples[("egress_budget_exceeded_total", labels)] == 1
    assert samples[("egress_budget_remaining", labels)] < 1


def python_upload(p: PrivateProxy, size: int) -> int:
    proxy = f"http://{p.view.proxy_host}:{p.view.proxy_port}"
    context = ssl.create_default_context(cafile=str(p.view.proxy_ca))
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({"https": proxy}), urllib.request.HTTPSHandler(context=context)
    )
    request = urllib.request.Request(
        "https://other.allowed.test/upload", data=b"u" * size, method="POST"
    )
    try:
        with opener.open(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        assert error.headers["X-Egress-Denied"] == "budget_exceeded"
        assert error.headers["Retry-After"]
        return int(error.code)


def test_python_uploads_stop_at_the_upload_budget(
    private_proxy: Callable[..., PrivateProxy], obs: Observed
) -> None:
    p = private_proxy("budget-upload", CONFIG)
    assert python_upload(p, 60 * 1024) == 200
    assert python_upload(p, 60 * 1024) == 429  # announced larger than what is left
    assert python_upload(p, 30 * 1024) == 200
    assert [r["body_len"] for r in obs.requests()] == [60 * 1024, 30 * 1024]


def test_an_upload_crossing_the_budget_while_streaming_is_cut(
    private_proxy: Callable[..., PrivateProxy], obs: Observed
) -> None:
    p = private_proxy("budget-cut", CONFIG)
    body = b"c" * (300 * 1024)
    with p.view.tunnel("other.allowed.test:443") as conn:
        headers = [("Host", "other.allowed.test"), ("Transfer-Encoding", "chunked")]
        try:
            response = conn.request("POST", "/stream", headers, chunked(body, 16 * 1024))
            status = response.status
        except (ConnectionError, OSError, ValueError):
            status = 0  # the connection was closed: the upload is cut
    assert status != 200
    assert all(r.get("body_len") != len(body) for r in obs.requests())
    labels = (("budget", "upload"), ("rule", "other.allowed.test"))
    assert p.process.scrape()[("egress_budget_exceeded_total", labels)] == 1
    line = p.view.audit_log.wait_for(0, lambda a: a["method"] == "POST")
    assert line["reason"] == "budget_exceeded"
    refused = p.view.https("other.allowed.test:443", "/after", method="POST", body=b"x")
    assert_refused(refused, "budget_exceeded", status=429)
