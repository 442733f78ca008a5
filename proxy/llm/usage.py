"""Tokens each way, as a model API reports them, and the estimate when it did not.

`from_object(api, obj)` reads the usage a JSON value carries in any of the shapes the
three formats use: openai chat/completions/embeddings (`usage.prompt_tokens`,
`completion_tokens`), the responses API (`usage.input_tokens`, `output_tokens`, also
inside `response`), anthropic (`usage.input_tokens` plus its cache counts,
`output_tokens`) and gemini (`usageMetadata.promptTokenCount`, `candidatesTokenCount` plus
`thoughtsTokenCount`). `merge` keeps the largest count seen each way, so the running
counts of a stream (anthropic's `message_delta`) end at the final figure.

Invariants: readers accept any value and never raise; a count is a non-negative int
(anything else is not a count); an estimate is a token per 4 bytes (rounded up).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sandbox_egress.proxy.llm import Api

BYTES_PER_TOKEN = 4


@dataclass(frozen=True, slots=True)
class Usage:
    input: int | None = None
    output: int | None = None

    @property
    def complete(self) -> bool:
        return self.input is not None and self.output is not None

    def merge(self, other: Usage) -> Usage:
        return Usage(_larger(self.input, other.input), _larger(self.output, other.output))

    def settled(self, sent: int, received: int) -> tuple[int, int, bool]:
        """(input, output, estimated): the counts, a side not reported estimated from the
        bytes of the request body (`sent`) or of the answer (`received`)."""
        estimated = not self.complete
        given_in = self.input if self.input is not None else estimate(sent)
        given_out = self.output if self.output is not None else estimate(received)
        return given_in, given_out, estimated


def estimate(size: int) -> int:
    return -(-max(0, size) // BYTES_PER_TOKEN)


def _larger(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else max(a, b)


def _count(holder: Any, *names: str) -> int | None:
    """The sum of the named counts present in `holder` (None when none is a count)."""
    if not isinstance(holder, dict):
        return None
    found = [holder.get(n) for n in names]
    counts = [c for c in found if isinstance(c, int) and not isinstance(c, bool) and c >= 0]
    return sum(counts) if counts else None


def from_object(api: Api, value: Any) -> Usage:
    """The usage a decoded JSON value carries (an answer, or one event of a stream)."""
    if not isinstance(value, dict):
        return Usage()
    if api is Api.GEMINI:
        meta = value.get("usageMetadata")
        return Usage(
            _count(meta, "promptTokenCount", "toolUsePromptTokenCount"),
            _count(meta, "candidatesTokenCount", "thoughtsTokenCount"),
        )
    found = Usage()
    for holder in (value, value.get("message"), value.get("response")):
        if isinstance(holder, dict) and isinstance(holder.get("usage"), dict):
            found = found.merge(_usage(holder["usage"]))
    return found


def _usage(usage: dict[str, Any]) -> Usage:
    given_in = _count(usage, "prompt_tokens")
    if given_in is None:
        given_in = _count(
            usage, "input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"
        )
    given_out = _count(usage, "completion_tokens")
    if given_out is None:
        given_out = _count(usage, "output_tokens")
    if given_out is None and given_in is not None and "total_tokens" in usage:
        given_out = 0  # embeddings: nothing generated
    return Usage(given_in, given_out)
