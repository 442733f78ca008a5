"""Requests judged (proxy.llm.requests): endpoints, models, output caps, the body rewritten."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox_egress.proxy.decision import Reason
from sandbox_egress.proxy.llm import Api, Endpoint
from sandbox_egress.proxy.llm.config import Allowance, LlmClause, Price
from sandbox_egress.proxy.llm.requests import LIMITS, Call, classify, judge_body

OPENAI = LlmClause(Api.OPENAI, ("gpt-5-mini", "gpt-4.1*"), 100)
ANTHROPIC = LlmClause(Api.ANTHROPIC, ("claude-*",), 100)
GEMINI = LlmClause(Api.GEMINI, ("gemini-2.5-*",), 100)


@pytest.mark.parametrize(
    ("clause", "method", "path", "call"),
    [
        (OPENAI, "POST", "/v1/chat/completions", Call(Endpoint.CHAT)),
        (OPENAI, "post", "/v1/chat/completions?x=1", Call(Endpoint.CHAT)),
        (OPENAI, "POST", "//v1/chat//completions/", Call(Endpoint.CHAT)),
        (OPENAI, "POST", "/v1/chat/%63ompletions", Call(Endpoint.CHAT)),
        (OPENAI, "POST", "/v1/completions", Call(Endpoint.COMPLETIONS)),
        (OPENAI, "POST", "/v1/responses", Call(Endpoint.RESPONSES)),
        (OPENAI, "POST", "/v1/embeddings", Call(Endpoint.EMBEDDINGS)),
        (OPENAI, "GET", "/v1/chat/completions", None),
        (OPENAI, "POST", "/v1/files", None),
        (OPENAI, "GET", "/v1/models", None),
        (ANTHROPIC, "POST", "/v1/messages", Call(Endpoint.MESSAGES)),
        (ANTHROPIC, "POST", "/v1/messages/count_tokens", None),
        (ANTHROPIC, "POST", "/v1/chat/completions", None),
        (
            GEMINI,
            "POST",
            "/v1beta/models/gemini-2.5-pro:generateContent",
            Call(Endpoint.GENERATE, "gemini-2.5-pro"),
        ),
        (
            GEMINI,
            "POST",
            "/v1/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
            Call(Endpoint.STREAM_GENERATE, "gemini-2.5-pro"),
        ),
        (
            GEMINI,
            "POST",
            "/v1beta/models/gemini-2.5-pro%3AgenerateContent",
            Call(Endpoint.GENERATE, "gemini-2.5-pro"),
        ),
        (GEMINI, "POST", "/v1beta/models/gemini-2.5-pro:countTokens", None),
    ],
)
def test_classify(clause: LlmClause, method: str, path: str, call: Call | None) -> None:
    assert classify(clause, method, path) == call


def body(**fields: Any) -> bytes:
    return json.dumps(fields).encode()


def sent(judged_body: bytes | None) -> Any:
    assert judged_body is not None
    return json.loads(judged_body)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"not json",
        b"[1]",
        b'{"model": 5}',
        b'{"messages": []}',
        b'{"model": ""}',
        b'{"model":"gpt-5-mini","model":"o3"}',
        b'{"model":"gpt-5-mini","x":NaN}',
        b"\xff\xfe",
        b'{"model":"gpt-5-mini","max_tokens":"many"}',
        b'{"model":"gpt-5-mini","max_tokens":1.5}',
        b'{"model":"gpt-5-mini","stream":true,"stream_options":"yes"}',
    ],
)
def test_bad_requests(raw: bytes) -> None:
    assert judge_body(OPENAI, Call(Endpoint.CHAT), raw).reason is Reason.LLM_BAD_REQUEST


def test_model_denied_and_unpriced() -> None:
    assert (
        judge_body(OPENAI, Call(Endpoint.CHAT), body(model="o3")).reason is Reason.LLM_MODEL_DENIED
    )
    priced = LlmClause(
        Api.OPENAI, None, None, cost=Allowance(10**9, 3600), prices=(Price("gpt-5*", 1, 1),)
    )
    judged = judge_body(priced, Call(Endpoint.CHAT), body(model="gpt-4o"))
    assert (judged.reason, judged.glob) == (Reason.LLM_MODEL_UNPRICED, "*")
    assert judge_body(priced, Call(Endpoint.CHAT), body(model="gpt-5-mini")).reason is None
    refused = judge_body(GEMINI, Call(Endpoint.GENERATE, "gemini-1.5-pro"), body(contents=[]))
    assert refused.reason is Reason.LLM_MODEL_DENIED


def test_chat_caps_both_limits_and_sets_one_when_absent() -> None:
    judged = judge_body(
        OPENAI,
        Call(Endpoint.CHAT),
        body(model="gpt-4.1-mini", max_tokens=5000, max_completion_tokens=50),
    )
    assert (judged.reason, judged.glob) == (None, "gpt-4.1*")
    assert sent(judged.body) == {
        "model": "gpt-4.1-mini",
        "max_tokens": 100,
        "max_completion_tokens": 50,
    }
    absent = judge_body(OPENAI, Call(Endpoint.CHAT), body(model="gpt-5-mini", max_tokens=None))
    assert sent(absent.body) == {
        "model": "gpt-5-mini",
        "max_tokens": None,
        "max_completion_tokens": 100,
    }


def test_a_body_within_the_cap_is_sent_unchanged() -> None:
    raw = b'{ "model" : "gpt-5-mini", "max_completion_tokens": 100 }'
    assert judge_body(OPENAI, Call(Endpoint.CHAT), raw).body is None
    uncapped = LlmClause(Api.OPENAI)
    assert judge_body(uncapped, Call(Endpoint.CHAT), b'{"model":"x"}').body is None


@pytest.mark.parametrize(
    ("clause", "call", "fields", "expected"),
    [
        (
            OPENAI,
            Call(Endpoint.COMPLETIONS),
            {"model": "gpt-5-mini"},
            {"model": "gpt-5-mini", "max_tokens": 100},
        ),
        (
            OPENAI,
            Call(Endpoint.RESPONSES),
            {"model": "gpt-5-mini", "max_output_tokens": 101},
            {"model": "gpt-5-mini", "max_output_tokens": 100},
        ),
        (
            ANTHROPIC,
            Call(Endpoint.MESSAGES),
            {"model": "claude-x", "max_tokens": 4096},
            {"model": "claude-x", "max_tokens": 100},
        ),
        (
            GEMINI,
            Call(Endpoint.GENERATE, "gemini-2.5-pro"),
            {"contents": []},
            {"contents": [], "generationConfig": {"maxOutputTokens": 100}},
        ),
        (
            GEMINI,
            Call(Endpoint.GENERATE, "gemini-2.5-pro"),
            {"generationConfig": {"temperature": 1, "maxOutputTokens": 900}},
            {"generationConfig": {"temperature": 1, "maxOutputTokens": 100}},
        ),
        (
            GEMINI,
            Call(Endpoint.GENERATE, "gemini-2.5-pro"),
            {"generation_config": {"max_output_tokens": 900}},
            {"generation_config": {"max_output_tokens": 100}},
        ),
    ],
)
def test_output_limits(
    clause: LlmClause, call: Call, fields: dict[str, Any], expected: dict[str, Any]
) -> None:
    judged = judge_body(clause, call, body(**fields))
    assert judged.reason is None
    assert sent(judged.body) == expected


def test_embeddings_have_no_output_limit() -> None:
    judged = judge_body(OPENAI, Call(Endpoint.EMBEDDINGS), body(model="gpt-5-mini", input="x"))
    assert (judged.reason, judged.body) == (None, None)


def test_openai_streams_ask_for_usage_and_say_so() -> None:
    judged = judge_body(
        OPENAI, Call(Endpoint.CHAT), body(model="gpt-5-mini", max_tokens=1, stream=True)
    )
    assert (judged.stream, judged.strip_usage) == (True, True)
    assert sent(judged.body)["stream_options"] == {"include_usage": True}
    asked = judge_body(
        OPENAI,
        Call(Endpoint.CHAT),
        body(model="gpt-5-mini", max_tokens=1, stream=True, stream_options={"include_usage": True}),
    )
    assert (asked.stream, asked.strip_usage, asked.body) == (True, False, None)
    kept = judge_body(
        OPENAI,
        Call(Endpoint.CHAT),
        body(
            model="gpt-5-mini",
            max_tokens=1,
            stream=True,
            stream_options={"include_obfuscation": False},
        ),
    )
    assert sent(kept.body)["stream_options"] == {
        "include_obfuscation": False,
        "include_usage": True,
    }
    anthropic = judge_body(
        ANTHROPIC, Call(Endpoint.MESSAGES), body(model="claude-x", max_tokens=1, stream=True)
    )
    assert (anthropic.stream, anthropic.strip_usage, anthropic.body) == (True, False, None)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
bodies = st.binary(max_size=200) | st.fixed_dictionaries(
    {"model": st.sampled_from(["gpt-5-mini", "gpt-4.1-x", "o3", 5, None])},
    optional={
        "max_tokens": json_values,
        "max_completion_tokens": json_values,
        "stream": json_values,
        "stream_options": json_values,
        "generationConfig": json_values,
    },
).map(lambda d: json.dumps(d).encode())


@settings(max_examples=300, deadline=None)
@given(
    bodies,
    st.sampled_from([*Endpoint]),
    st.text(alphabet="/v1abchtmpsoneirgC:%2F?", max_size=40),
)
def test_any_body_and_path_is_judged_without_raising(
    raw: bytes, endpoint: Endpoint, path: str
) -> None:
    for clause in (OPENAI, ANTHROPIC, GEMINI):
        classify(clause, "POST", path)
        judged = judge_body(clause, Call(endpoint, "gemini-2.5-pro"), raw)
        if judged.reason is None and judged.body is not None:
            sent = json.loads(judged.body)
            if endpoint in (Endpoint.GENERATE, Endpoint.STREAM_GENERATE):
                config = sent.get("generationConfig") or sent.get("generation_config") or {}
                limits = [config.get("maxOutputTokens"), config.get("max_output_tokens")]
            else:
                limits = [sent.get(name) for name in LIMITS[endpoint]]
            assert all(v is None or v <= 100 for v in limits)
