"""What the three model APIs answer, as bytes: the test model server's answers
(testbed/model_server.py) and the streams the usage meter's tests feed
(tests/proxy/llm/test_streams.py). Shapes follow the public API references of OpenAI
(chat completions, completions, responses, embeddings), Anthropic (messages) and Gemini
(generateContent, streamGenerateContent with and without `alt=sse`).

`answer(kind, model, text, usage, stream, include_usage)` returns (content type, the
body's pieces). A stream's pieces are its events; `usage` is (input, output) tokens.
Standard library only.
"""

from __future__ import annotations

import json
from typing import Any

SSE = "text/event-stream"
JSON = "application/json"


def _sse(data: Any, name: str = "") -> bytes:
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def _words(text: str) -> list[str]:
    return [w + " " for w in text.split(" ")] or [""]


def openai_chat(
    model: str, text: str, usage: tuple[int, int], stream: bool, include_usage: bool
) -> tuple[str, list[bytes]]:
    counts = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
    if not stream:
        message = {"role": "assistant", "content": text, "refusal": None}
        body = {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "created": 1,
            "model": model,
            "choices": [
                {"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}
            ],
            "usage": counts,
        }
        return JSON, [json.dumps(body).encode()]
    base = {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1, "model": model}
    extra = {"usage": None} if include_usage else {}
    pieces = [
        _sse(
            {
                **base,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": ""},
                        "finish_reason": None,
                    }
                ],
                **extra,
            }
        )
    ]
    for word in _words(text):
        pieces.append(
            _sse(
                {
                    **base,
                    "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}],
                    **extra,
                }
            )
        )
    pieces.append(
        _sse({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], **extra})
    )
    if include_usage:
        pieces.append(_sse({**base, "choices": [], "usage": counts}))
    pieces.append(b"data: [DONE]\n\n")
    return SSE, pieces


def openai_responses(
    model: str, text: str, usage: tuple[int, int], stream: bool
) -> tuple[str, list[bytes]]:
    counts = {"input_tokens": usage[0], "output_tokens": usage[1], "total_tokens": sum(usage)}
    item = {
        "id": "msg_test",
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    done = {
        "id": "resp_test",
        "object": "response",
        "created_at": 1,
        "status": "completed",
        "model": model,
        "output": [item],
        "usage": counts,
    }
    if not stream:
        return JSON, [json.dumps(done).encode()]
    started = {**done, "status": "in_progress", "output": [], "usage": None}
    pieces = [
        _sse(
            {"type": "response.created", "sequence_number": 0, "response": started},
            "response.created",
        )
    ]
    empty = {**item, "status": "in_progress", "content": []}
    added = {"type": "response.output_item.added", "sequence_number": 0, "output_index": 0}
    pieces.append(_sse({**added, "item": empty}, "response.output_item.added"))
    part = {"type": "output_text", "text": "", "annotations": []}
    opened = {"type": "response.content_part.added", "sequence_number": 0, "item_id": "msg_test"}
    opened |= {"output_index": 0, "content_index": 0, "part": part}
    pieces.append(_sse(opened, "response.content_part.added"))
    for n, word in enumerate(_words(text)):
        delta = {
            "type": "response.output_text.delta",
            "sequence_number": n + 1,
            "item_id": "msg_test",
            "output_index": 0,
            "content_index": 0,
            "delta": word,
        }
        pieces.append(_sse(delta, "response.output_text.delta"))
    pieces.append(
        _sse(
            {"type": "response.completed", "sequence_number": 999, "response": done},
            "response.completed",
        )
    )
    return SSE, pieces


def anthropic_messages(
    model: str, text: str, usage: tuple[int, int], stream: bool
) -> tuple[str, list[bytes]]:
    message = {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
    }
    if not stream:
        return JSON, [json.dumps(message).encode()]
    start = {
        **message,
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": usage[0], "output_tokens": 1},
    }
    pieces = [
        _sse({"type": "message_start", "message": start}, "message_start"),
        _sse(
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
            "content_block_start",
        ),
    ]
    for word in _words(text):
        delta = {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": word},
        }
        pieces.append(_sse(delta, "content_block_delta"))
    pieces += [
        _sse({"type": "content_block_stop", "index": 0}, "content_block_stop"),
        _sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": usage[1]},
            },
            "message_delta",
        ),
        _sse({"type": "message_stop"}, "message_stop"),
    ]
    return SSE, pieces


def gemini(
    model: str, text: str, usage: tuple[int, int], stream: bool, sse: bool
) -> tuple[str, list[bytes]]:
    meta = {
        "promptTokenCount": usage[0],
        "candidatesTokenCount": usage[1],
        "totalTokenCount": sum(usage),
    }

    def part(words: str, last: bool) -> dict[str, Any]:
        candidate: dict[str, Any] = {
            "content": {"role": "model", "parts": [{"text": words}]},
            "index": 0,
        }
        if last:
            candidate["finishReason"] = "STOP"
        return {
            "candidates": [candidate],
            "modelVersion": model,
            "usageMetadata": meta
            if last
            else {"promptTokenCount": usage[0], "totalTokenCount": usage[0]},
        }

    if not stream:
        return JSON, [json.dumps(part(text, True)).encode()]
    words = _words(text)
    items = [part(w, n == len(words) - 1) for n, w in enumerate(words)]
    if sse:
        return SSE, [f"data: {json.dumps(i)}\r\n\r\n".encode() for i in items]
    pieces = [b"[" + json.dumps(items[0]).encode()] + [
        b",\r\n" + json.dumps(i).encode() for i in items[1:]
    ]
    return JSON, [*pieces, b"]"]


def embeddings(model: str, usage: tuple[int, int]) -> tuple[str, list[bytes]]:
    body = {
        "object": "list",
        "data": [{"object": "embedding", "index": 0, "embedding": [0.0, 1.0]}],
        "model": model,
        "usage": {"prompt_tokens": usage[0], "total_tokens": usage[0]},
    }
    return JSON, [json.dumps(body).encode()]
