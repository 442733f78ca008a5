"""The sandbox's own credential never travels, and the proxy's spellings never come back
(issue 32): a proxy of this module's own (one for all its tests) in front of the echo upstream, which answers
every request with its record (headers and target) as the JSON body.

* The `Basic` base64 of `user:value` and the percent-encoded query value the swap wrote
  reach the upstream (checked in its log) and are masked in the echo the sandbox reads.
* A resolved value in a request's header or target, raw or percent-encoded, is refused
  `secret_elsewhere`; an own `Authorization` beside a required placeholder is refused
  `credential_required`; neither reaches the upstream namespace.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from urllib.parse import quote

import pytest

from testbed.expect import Observed, assert_refused, header_values
from tests.e2e.conftest import PrivateProxy

pytestmark = pytest.mark.netns

KEY = "sk-egress-placeholder-never"
MAPS = "maps-egress-placeholder-never"
# A literal value with bytes a query must percent-encode (and whose base64 holds + and /).
VALUE = "real never/travels+key=ok 0123456789"
QUOTED = quote(VALUE, safe="")
CONFIG = f"""\
network:
  allowlist:
    - domain: api.allowed.test
      secrets: [{{placeholder: {KEY}, value: "{VALUE}", require: true}}]
    - domain: plain.allowed.test
      secrets: [{{placeholder: {MAPS}, value: "{VALUE}", in: [query]}}]
    - domain: other.allowed.test
    - domain: 198.18.1.0/24               # opens the upstreams' range (198.18/15 is reserved)
"""


@pytest.fixture(scope="module")
def shared_proxy(module_private_proxy: Callable[..., PrivateProxy]) -> PrivateProxy:
    return module_private_proxy("never-travels", CONFIG)


@pytest.fixture
def proxy(shared_proxy: PrivateProxy) -> PrivateProxy:
    """The module's proxy (issue 49, D641: the swap and the refusals keep no state between
    requests), once no connection of an earlier test is open in it."""
    shared_proxy.wait_idle()
    return shared_proxy


def test_basic_echo_of_the_swapped_value_is_masked(proxy: PrivateProxy, obs: Observed) -> None:
    sent = base64.b64encode(f"agent:{KEY}".encode()).decode()
    written = base64.b64encode(f"agent:{VALUE}".encode()).decode()
    response = proxy.view.https(
        "api.allowed.test:443", "/echo", [("Authorization", f"Basic {sent}")]
    )

    assert header_values(obs.only_request(), "Authorization") == [f"Basic {written}"]
    assert response.status == 200, response.describe()
    assert written.encode() not in response.body and VALUE.encode() not in response.body
    assert b"[redacted" in response.body


def test_percent_encoded_echo_of_the_swapped_value_is_masked(
    proxy: PrivateProxy, obs: Observed
) -> None:
    response = proxy.view.https("plain.allowed.test:443", f"/echo?key={MAPS}&q=1")

    assert obs.only_request()["target"] == f"/echo?key={QUOTED}&q=1"
    assert response.status == 200, response.describe()
    assert QUOTED.encode() not in response.body and VALUE.encode() not in response.body


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        ("/", [("X-Leak", VALUE)]),
        (f"/?k={QUOTED}", []),
        ("/", [("Authorization", "Basic " + base64.b64encode(f"me:{VALUE}".encode()).decode())]),
    ],
    ids=["raw in a header", "percent-encoded in the target", "inside a Basic credential"],
)
def test_a_resolved_value_sent_anywhere_is_secret_elsewhere(
    proxy: PrivateProxy, obs: Observed, path: str, headers: list[tuple[str, str]]
) -> None:
    response = proxy.view.https("other.allowed.test:443", path, headers)

    assert_refused(response, "secret_elsewhere", host="other.allowed.test")
    obs.assert_nothing_reached()


def test_an_own_authorization_beside_the_placeholder_is_refused(
    proxy: PrivateProxy, obs: Observed
) -> None:
    response = proxy.view.https(
        "api.allowed.test:443", "/", [("X-Api-Key", KEY), ("Authorization", "Bearer sk-own")]
    )

    assert_refused(response, "credential_required", host="api.allowed.test")
    obs.assert_nothing_reached()


@pytest.mark.parametrize(
    "spelled",
    [
        VALUE.replace(" ", "%20"),
        QUOTED,
        QUOTED.lower(),
        base64.urlsafe_b64encode(VALUE.encode()).decode(),
    ],
    ids=["raw", "percent-encoded", "lower-case percent", "base64url"],
)
def test_a_value_in_the_path_is_refused_and_never_written_to_the_audit(
    proxy: PrivateProxy, obs: Observed, spelled: str
) -> None:
    """Issue 43: the refusal's audit line carried the value the sandbox put in the path."""
    mark = proxy.view.audit_log.mark()
    response = proxy.view.https("other.allowed.test:443", f"/a/{spelled}/b?x=1")

    assert_refused(response, "secret_elsewhere", host="other.allowed.test")
    obs.assert_nothing_reached()
    line = proxy.view.audit_log.wait_for(mark, lambda r: r["method"] == "GET")
    assert (line["reason"], line["path"]) == ("secret_elsewhere", "/a/[secret]/b?x=…")
    written = proxy.process.audit.read_text()
    for shown in (VALUE, QUOTED, QUOTED.lower(), spelled, "never/travels", "never%2Ftravels"):
        assert shown not in written
