"""The hook kernel: the one outcome set, the one full-env parser, warnings through logging."""

from __future__ import annotations

import logging

import pytest

from sandbox_egress.hookrunner.kernel import env_switch, full_env_switch
from sandbox_egress.hookrunner.metrics import HookMetrics
from sandbox_egress.hookrunner.outcome import FAILURES, MECHANISM_FAILURES, Outcome
from sandbox_egress.hookrunner.session import HookSession
from tests.hookrunner.helpers import Env, base_environ, warnings_in


def test_the_one_failure_set() -> None:
    answers = {Outcome.ALLOW, Outcome.DENY, Outcome.OK, Outcome.ASK, Outcome.EXIT_2}
    assert {o for o in Outcome if o not in FAILURES} == answers
    assert {o for o in Outcome if o.failed} == FAILURES
    for produced in MECHANISM_FAILURES.values():
        assert produced <= FAILURES


@pytest.mark.parametrize(
    ("environ", "flag", "on", "notice"),
    [
        ({}, None, False, None),
        ({"HOOKRUNNER_FULL_ENV": "1"}, None, True, None),
        ({"HOOKRUNNER_FULL_ENV": "1"}, False, False, None),
        ({}, True, True, None),
        ({"HOOKRUNNER_FULL_ENV": "true"}, None, False,
         "HOOKRUNNER_FULL_ENV is 'true', not '1', so it is ignored"),
        ({"HOOKRUNNER_FULL_ENV": "1 "}, None, False,
         "HOOKRUNNER_FULL_ENV is '1 ', not '1', so it is ignored"),
    ],
)  # fmt: skip
def test_full_env_switch(
    environ: dict[str, str], flag: bool | None, on: bool, notice: str | None
) -> None:
    found = full_env_switch(environ, flag)
    assert (found.on, found.notice) == (on, notice)


def test_an_earlier_variable_that_is_on_hides_a_later_notice() -> None:
    found = env_switch({"A": "1", "B": "yes"}, None, ("A", "B"))
    assert (found.on, found.notice) == (True, None)
    found = env_switch({"A": "no", "B": "1"}, None, ("A", "B"))
    assert (found.on, found.notice) == (True, "A is 'no', not '1', so it is ignored")


def test_a_full_env_value_that_is_not_1_is_a_config_warning(env: Env) -> None:
    session = env.session(environ=base_environ(HOOKRUNNER_FULL_ENV="yes", API_TOKEN="tok-123456"))
    assert warnings_in(env.stream.getvalue()) == [
        {
            "level": "warning",
            "kind": "config",
            "cause": "HOOKRUNNER_FULL_ENV is 'yes', not '1', so it is ignored",
        }
    ]
    assert env.metrics.value("hook_warnings_total", kind="config") == 1.0
    assert "API_TOKEN" not in session.kernel.hook_env  # the switch stayed off


def test_without_a_stream_warnings_go_through_logging(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    env.hooks({"broken": {"pre_tool_execution": "not a list"}})
    with caplog.at_level(logging.INFO, logger="hookrunner"):
        session = HookSession(
            env.workspace,
            system_config=env.system_config,
            environ=base_environ(),
            metrics=HookMetrics(),
        )
        session.pre("read_file", {"path": "x"})
    records = [(r.name, r.levelno, r.getMessage().split(" ")[:3]) for r in caplog.records]
    assert records == [
        ("hookrunner.report", logging.WARNING, ["hookrunner:", "warning", "kind=config"]),
        (
            "hookrunner.report",
            logging.INFO,
            ["hookrunner:", "decision", "event=pre_tool_execution"],
        ),
    ]
