"""Model APIs judged and metered (issue 46): the pure core of the `llm:`
clause. No mitmproxy here; `addons.clauses.llm` applies it to flows.

Modules:
* `config`   — the `llm:` mapping parsed into an immutable `LlmClause` (models, output
  cap, token and cost budgets, prices), and `unpriced` for `check`;
* `requests` — which endpoint a request is, its model, and the judgement of its body:
  the model allowed, the output limit capped, the body rewritten (`judge_request`);
* `usage`    — `Usage` (tokens each way) read from a JSON answer, and the estimate of an
  answer cut off before its usage;
* `sse`      — a Server-Sent Events splitter fed chunk by chunk, bounded;
* `streams`  — the usage meter of an answer: bytes in, the same bytes out (less the
  usage chunk the proxy asked for), usage read on the side;
* `prices`   — the cost of a usage in nano-USD.

Invariants: every reader takes arbitrary bytes and never raises; a stream is never held
whole (at most one event, bounded); nothing here reads time or does I/O.
"""

from __future__ import annotations

from enum import StrEnum


class Api(StrEnum):
    """The wire format an entry's model API speaks."""

    OPENAI = "openai"
    ANTHROPIC = "anthropic"
    GEMINI = "gemini"


class Endpoint(StrEnum):
    """A generation endpoint the proxy knows (issue 46); anything else is not judged."""

    CHAT = "chat"  # openai /v1/chat/completions
    COMPLETIONS = "completions"  # openai /v1/completions
    RESPONSES = "responses"  # openai /v1/responses
    EMBEDDINGS = "embeddings"  # openai /v1/embeddings
    MESSAGES = "messages"  # anthropic /v1/messages
    GENERATE = "generate"  # gemini models/{model}:generateContent
    STREAM_GENERATE = "stream_generate"  # gemini models/{model}:streamGenerateContent
