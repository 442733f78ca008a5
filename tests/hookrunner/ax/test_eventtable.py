"""The event table: every AX event has one complete row, and what derives from it agrees."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandbox_egress.hookrunner.ax.eventtable import (
    BLOCKING_EVENTS,
    EVENTS,
    OBSERVATION_EVENTS,
    TOOL_EVENTS,
    AxEvent,
    EventSpec,
    Field,
    Form,
    Output,
)
from sandbox_egress.hookrunner.ax.metrics import possible_outcomes

ROOT = Path(__file__).resolve().parents[3]


def test_every_event_has_one_row_keyed_by_itself() -> None:
    assert sorted(EVENTS) == sorted(AxEvent) and len(EVENTS) == len(AxEvent)
    for event, spec in EVENTS.items():
        assert spec.event is event


@pytest.mark.parametrize("event", list(AxEvent))
def test_each_row_is_complete(event: AxEvent) -> None:
    spec = EVENTS[event]
    assert spec.feedback.strip() and spec.claude_code.strip()
    assert isinstance(spec.output, Output)
    for declared in spec.fields:
        assert declared.ax and isinstance(declared.form, Form)
    assert set(spec.legacy_args) <= {f.ax for f in spec.fields}
    if spec.skip is not None:
        assert spec.skip[1].strip()
    assert possible_outcomes(event)  # every kind of output has its outcome set


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"blocks": True}, "only an event whose output is a decision blocks"),
        ({"output": Output.DECISION}, "only an event whose output is a decision blocks"),
        ({"feedback": " "}, "needs its feedback"),
        ({"fields": (Field("x", "x", Form.STRING),), "output": Output.IGNORED}, "ids only"),
    ],
)
def test_an_incomplete_or_contradictory_row_is_refused(change: dict, message: str) -> None:
    row = {
        "event": AxEvent.STOP,
        "blocks": False,
        "output": Output.NOTICE,
        "tool": False,
        "fields": (),
        "feedback": "notices",
        "claude_code": "Stop",
    }
    with pytest.raises(ValueError, match=message):
        EventSpec(**{**row, **change})


def test_the_derived_sets() -> None:
    assert {AxEvent.PRE_TOOL_USE, AxEvent.USER_PROMPT_SUBMIT} == BLOCKING_EVENTS
    assert {
        AxEvent.PRE_TOOL_USE,
        AxEvent.POST_TOOL_USE,
        AxEvent.POST_TOOL_USE_FAILURE,
    } == TOOL_EVENTS
    assert len(OBSERVATION_EVENTS) == 5


@pytest.mark.parametrize("where", ["common/schemas", "schemas"])
def test_the_schema_names_exactly_the_events_of_the_table(where: str) -> None:
    schema = json.loads((ROOT / where / "ax-hooks.schema.json").read_text())
    enum = schema["$defs"]["entry"]["properties"]["event"]["enum"]
    assert enum == [e.value for e in AxEvent]


def test_the_docs_name_every_event_in_the_events_table() -> None:
    text = (ROOT / "docs" / "hooks.md").read_text()
    section = text.split("### Events", 1)[1].split("\n### ", 1)[0]
    for event in AxEvent:
        assert f"`{event.value}`" in section, event
