"""The usage meter (proxy.llm.streams, proxy.llm.sse): usage read from every format,
streamed or not, fed in any chunk split; bytes reach the client unchanged apart from the
usage chunk the proxy asked for; no input makes it raise."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox_egress.proxy.llm import Api
from sandbox_egress.proxy.llm.sse import Splitter
from sandbox_egress.proxy.llm.streams import Meter
from sandbox_egress.proxy.llm.usage import Usage
from testbed import model_wire as wire

USAGE = (1234, 56)
Answer = Callable[[], tuple[str, list[bytes]]]
ANSWERS: list[tuple[Api, Answer]] = [
    (Api.OPENAI, lambda: wire.openai_chat("m", "hello there you", USAGE, False, False)),
    (Api.OPENAI, lambda: wire.openai_chat("m", "hello there you", USAGE, True, True)),
    (Api.OPENAI, lambda: wire.openai_responses("m", "hello there", USAGE, False)),
    (Api.OPENAI, lambda: wire.openai_responses("m", "hello there", USAGE, True)),
    (Api.OPENAI, lambda: wire.embeddings("m", (USAGE[0], 0))),
    (Api.ANTHROPIC, lambda: wire.anthropic_messages("m", "hello there", USAGE, False)),
    (Api.ANTHROPIC, lambda: wire.anthropic_messages("m", "hello there", USAGE, True)),
    (Api.GEMINI, lambda: wire.gemini("m", "hello there", USAGE, False, False)),
    (Api.GEMINI, lambda: wire.gemini("m", "hello there", USAGE, True, True)),
    (Api.GEMINI, lambda: wire.gemini("m", "hello there", USAGE, True, False)),
]


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


def run(meter: Meter, chunks: list[bytes]) -> bytes:
    return b"".join(meter.feed(c) for c in chunks) + meter.close()


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(range(len(ANSWERS))), st.lists(st.integers(0, 10**6), max_size=30))
def test_usage_read_in_any_split_and_bytes_unchanged(which: int, cuts: list[int]) -> None:
    api, answer = ANSWERS[which]
    content_type, pieces = answer()
    data = b"".join(pieces)
    meter = Meter(api, content_type)
    assert run(meter, split(data, cuts)) == data
    expected = Usage(USAGE[0], 0) if "embedding" in data.decode() else Usage(*USAGE)
    assert (meter.usage, meter.final) == (expected, True)
    assert meter.settled(sent=10**6) == (*((USAGE[0], 0) if expected.output == 0 else USAGE), False)
    assert meter.received == len(data)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 10**6), max_size=30), st.booleans())
def test_the_usage_chunk_asked_for_is_removed_and_nothing_else(cuts: list[int], crlf: bool) -> None:
    _, pieces = wire.openai_chat("m", "a b c d", USAGE, True, True)
    if crlf:
        pieces = [p.replace(b"\n", b"\r\n") for p in pieces]
    usage_chunk = [p for p in pieces if b'"choices": []' in p]
    assert len(usage_chunk) == 1
    meter = Meter(Api.OPENAI, "text/event-stream; charset=utf-8", strip=True)
    out = run(meter, split(b"".join(pieces), cuts))
    assert out == b"".join(p for p in pieces if p not in usage_chunk)
    assert (meter.usage, meter.stripped) == (Usage(*USAGE), 1)


@settings(max_examples=300, deadline=None)
@given(
    st.binary(max_size=600)
    | st.lists(
        st.sampled_from(
            [
                b"data: ",
                b"{",
                b"}",
                b"\r",
                b"\n",
                b'"usage"',
                b"[]",
                b"event:",
                b":",
                b'"choices":[]',
                b"x",
            ]
        ),
        max_size=80,
    ).map(b"".join),
    st.lists(st.integers(0, 10**6), max_size=20),
    st.sampled_from(list(Api)),
    st.sampled_from(["text/event-stream", "application/json"]),
    st.booleans(),
)
def test_any_bytes_never_crash_and_pass_unchanged(
    data: bytes, cuts: list[int], api: Api, ctype: str, strip: bool
) -> None:
    meter = Meter(api, ctype, strip)
    out = run(meter, split(data, cuts))
    if meter.stripped == 0:
        assert out == data
    assert meter.usage.input is None or meter.usage.input >= 0


@settings(max_examples=200, deadline=None)
@given(
    st.binary(max_size=400) | st.text(alphabet="ab:\r\n ", max_size=200).map(str.encode),
    st.lists(st.integers(0, 10**6), max_size=20),
    st.integers(1, 64),
)
def test_the_splitter_loses_and_adds_nothing(data: bytes, cuts: list[int], bound: int) -> None:
    splitter = Splitter(max_event=bound)
    events = [e for c in split(data, cuts) for e in splitter.feed(c)] + splitter.finish()
    assert b"".join(e.raw for e in events) == data


def test_events_and_their_data() -> None:
    splitter = Splitter()
    events = splitter.feed(b"event: a\ndata: 1\ndata:2\r\n\r") + splitter.feed(
        b"\n: comment\r\rdata: x"
    )
    assert [(e.name, e.data, e.raw) for e in events] == [
        (b"a", b"1\n2", b"event: a\ndata: 1\ndata:2\r\n\r\n"),
        (b"", None, b": comment\r\r"),
    ]
    assert [(e.data, e.whole) for e in splitter.finish()] == [(None, False)]


def test_an_answer_cut_off_before_its_usage_is_estimated() -> None:
    _, pieces = wire.anthropic_messages("m", "hello there", USAGE, True)
    meter = Meter(Api.ANTHROPIC, "text/event-stream")
    cut = b"".join(pieces[:3])  # message_start and some text: no message_delta
    run(meter, [cut])
    assert (meter.usage, meter.final) == (Usage(USAGE[0], 1), False)
    assert meter.settled(sent=400) == (USAGE[0], -(-len(cut) // 4), True)
    empty = Meter(Api.OPENAI, "text/event-stream", strip=True)
    run(empty, [b'data: {"choices": [{"delta": {}}]}\n\n'])
    assert empty.settled(sent=401) == (101, 9, True)
    json_cut = Meter(Api.OPENAI, "application/json")
    run(json_cut, [b'{"id": "x", "usage": {"prompt_to'])
    assert json_cut.settled(sent=8) == (2, 8, True)
