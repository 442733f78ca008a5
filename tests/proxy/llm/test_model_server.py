"""The test model server (testbed/model_server.py) speaks what the official `openai` and
`anthropic` SDKs read, streamed and not, with the usage a test chooses — checked directly
on loopback, so that an end-to-end failure through the proxy is the proxy's."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import anthropic
import openai
import pytest

from testbed import procs


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    where = tmp_path_factory.mktemp("model")
    ready = where / "ready"
    port = 18000 + (hash(str(where)) % 1000)
    argv = [sys.executable, "-m", "testbed.model_server", "--log", str(where / "log"),
            "--ready", str(ready), "--listen", f"127.0.0.1:{port}"]  # fmt: skip
    child = procs.start("model-server", argv, where)
    try:
        procs.wait_until("model server ready", ready.exists, timeout=15, child=child)
        yield f"http://127.0.0.1:{port}"
    finally:
        child.stop()


USAGE = {"X-Test-Usage": "321,45"}


def test_openai_chat_and_responses(server: str) -> None:
    client = openai.OpenAI(base_url=f"{server}/v1", api_key="sk-test", default_headers=USAGE)
    said = client.chat.completions.create(
        model="gpt-5-mini", messages=[{"role": "user", "content": "hi"}]
    )
    assert said.usage is not None and (said.usage.prompt_tokens, said.usage.completion_tokens) == (
        321,
        45,
    )
    chunks = list(
        client.chat.completions.create(
            model="gpt-5-mini",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert (
        "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).strip()
        == "the quick brown fox jumps"
    )
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 45
    response = client.responses.create(model="gpt-5-mini", input="hi")
    assert response.usage is not None and response.usage.output_tokens == 45
    with client.responses.stream(model="gpt-5-mini", input="hi") as events:
        final = events.get_final_response()
    assert final.usage is not None and final.usage.input_tokens == 321


def test_anthropic_messages(server: str) -> None:
    client = anthropic.Anthropic(base_url=server, api_key="sk-ant-test", default_headers=USAGE)
    said = client.messages.create(
        model="claude-x", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
    )
    assert (said.usage.input_tokens, said.usage.output_tokens) == (321, 45)
    with client.messages.stream(
        model="claude-x", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
    ) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text.strip() == "the quick brown fox jumps"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (321, 45)
