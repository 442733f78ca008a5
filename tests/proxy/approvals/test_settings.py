"""`approvals:` parsed (proxy/approvals/settings.py): named cases, accepted and refused with
the location of each problem; the JSON Schema agrees on what it can see."""

from __future__ import annotations

from typing import Any

import pytest

from sandbox_egress.proxy.approvals.approvers.command import CommandApprover
from sandbox_egress.proxy.approvals.approvers.webhook import WebhookApprover
from sandbox_egress.proxy.approvals.scopes import Scope, parse_scope
from sandbox_egress.proxy.approvals.settings import NO_APPROVALS, parse_approvals
from tests.test_schemas import schema

NETWORK = {"network": {"allowlist": ["a.example.com"]}}


def parsed(section: Any, environ: dict[str, str] | None = None) -> tuple[Any, list[str]]:
    problems: list[str] = []
    found = parse_approvals(
        {**NETWORK, "approvals": section}, lambda where, what: problems.append(where), environ
    )
    return found, problems


def test_without_a_section_nothing_is_held() -> None:
    assert parse_approvals(NETWORK, lambda *_: None) == NO_APPROVALS
    assert NO_APPROVALS.hold is False


def test_a_whole_section() -> None:
    found, problems = parsed(
        {
            "unknown": "hold", "timeout": "90s", "max_pending": 5,
            "scopes": ["once", "session", "1h"],
            "approvers": [
                {"command": ["/bin/approve", "-v"], "timeout": "3s"},
                {"webhook": {"url": "https://hooks.example/egress", "secret": "${HOOK}"}},
            ],
        },
        {"HOOK": "s3cret-value"},
    )  # fmt: skip
    assert problems == []
    assert (found.hold, found.timeout_s, found.max_pending) == (True, 90.0, 5)
    assert [s.text for s in found.scopes] == ["once", "session", "1h"]
    command, webhook = found.approvers
    assert command == CommandApprover(("/bin/approve", "-v"), 3.0)
    assert isinstance(webhook, WebhookApprover) and webhook.secret == b"s3cret-value"
    assert "s3cret-value" not in repr(found)
    assert found.scope("1h") == Scope("1h", 3600.0)
    assert found.scope("2h") is None  # not in scopes
    assert found.scope("session") == Scope("session")


REFUSED: dict[str, tuple[Any, str]] = {
    "not a mapping": ([], "approvals"),
    "unknown key": ({"unknwon": "hold"}, "approvals.unknwon"),
    "unknown value": ({"unknown": "allow"}, "approvals.unknown"),
    "timeout too long": ({"timeout": "2h"}, "approvals.timeout"),
    "timeout zero": ({"timeout": "0s"}, "approvals.timeout"),
    "pending zero": ({"max_pending": 0}, "approvals.max_pending"),
    "pending bool": ({"max_pending": True}, "approvals.max_pending"),
    "empty scopes": ({"scopes": []}, "approvals.scopes"),
    "bad scope": ({"scopes": ["forever"]}, "approvals.scopes[0]"),
    "scope too long": ({"scopes": ["31d"]}, "approvals.scopes[0]"),
    "two kinds": ({"approvers": [{"command": ["x"], "webhook": {}}]}, "approvals.approvers[0]"),
    "no kind": ({"approvers": [{"shell": "x"}]}, "approvals.approvers[0]"),
    "shell string": ({"approvers": [{"command": "approve"}]}, "approvals.approvers[0].command"),
    "empty argv": ({"approvers": [{"command": []}]}, "approvals.approvers[0].command"),
    "command timeout": (
        {"approvers": [{"command": ["x"], "timeout": "10m"}]},
        "approvals.approvers[0].timeout",
    ),
    "plain http webhook": (
        {"approvers": [{"webhook": {"url": "http://hooks.example/x", "secret": "s"}}]},
        "approvals.approvers[0].webhook.url",
    ),
    "webhook without secret": (
        {"approvers": [{"webhook": {"url": "https://hooks.example/x"}}]},
        "approvals.approvers[0].webhook.secret",
    ),
    "unresolved secret": (
        {"approvers": [{"webhook": {"url": "https://h.example/x", "secret": "${NOPE}"}}]},
        "approvals.approvers[0].webhook.secret",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused(case: str) -> None:
    section, where = REFUSED[case]
    _found, problems = parsed(section, {})
    assert problems == [where]


def test_a_loopback_webhook_may_be_plain_http() -> None:
    found, problems = parsed(
        {"approvers": [{"webhook": {"url": "http://127.0.0.1:9/x", "secret": "s"}}]}, {}
    )
    assert problems == [] and found.approvers[0].url == "http://127.0.0.1:9/x"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("once", None), ("session", None), ("30m", 1800.0), ("7d", 604800.0), ("1s", 1.0)],
)
def test_scopes(text: str, seconds: float | None) -> None:
    found = parse_scope(text)
    assert found is not None and found.seconds == seconds


@pytest.mark.parametrize("text", ["", "0s", "1y", "1.5h", " 1h", "ONCE", None, 3600])
def test_not_scopes(text: Any) -> None:
    assert parse_scope(text) is None


def test_the_schema_agrees() -> None:
    good = {**NETWORK, "approvals": {"unknown": "hold", "scopes": ["once", "1h"],
            "approvers": [{"command": ["x"]}]}}  # fmt: skip
    assert list(schema("egress-config").iter_errors(good)) == []
    for bad in ({"unknown": "yes"}, {"scopes": ["forever"]}, {"approvers": [{"shell": "x"}]}):
        assert list(schema("egress-config").iter_errors({**NETWORK, "approvals": bad})) != []
