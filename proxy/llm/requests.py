"""Which model a request asks for and how many tokens it may produce (issue 46).

`classify(clause, method, path)` says whether a request is a generation call of the
entry's API, reading what the head alone tells (the gemini model is in the path);
`judge_body(clause, call, body)` reads the held body: the model allowed by a `models` glob,
priced when a cost budget needs it, the output limit lowered to `max_output_tokens` (or
set when absent), and — for an openai stream — the final usage chunk asked for. The body
is rewritten (compact JSON) only when something changed.

Invariants (fail closed):
* A body that is not one JSON object (UTF-8, no duplicate key at any depth, no NaN), or
  that names no model, is `llm_bad_request`: the upstream must read what was judged.
* An output limit that is not a whole number is `llm_bad_request`; one above the cap is
  lowered; an absent one is set.
* The path is compared after percent-decoding and collapsing repeated slashes, so a
  spelling an upstream reads as an endpoint is judged as one.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from sandbox_egress.proxy.decision import Reason
from sandbox_egress.proxy.llm import Api, Endpoint
from sandbox_egress.proxy.llm.config import LlmClause

PATHS: dict[Api, dict[str, Endpoint]] = {
    Api.OPENAI: {
        "/v1/chat/completions": Endpoint.CHAT,
        "/v1/completions": Endpoint.COMPLETIONS,
        "/v1/responses": Endpoint.RESPONSES,
        "/v1/embeddings": Endpoint.EMBEDDINGS,
    },
    Api.ANTHROPIC: {"/v1/messages": Endpoint.MESSAGES},
    Api.GEMINI: {},
}
_GEMINI = re.compile(
    r"^/(?:v1|v1beta|v1alpha)/models/([^/:]+):(generateContent|streamGenerateContent)$"
)
# the body's output limits by endpoint; the first is the one set when none is given
LIMITS: dict[Endpoint, tuple[str, ...]] = {
    Endpoint.CHAT: ("max_completion_tokens", "max_tokens"),
    Endpoint.COMPLETIONS: ("max_tokens",),
    Endpoint.RESPONSES: ("max_output_tokens",),
    Endpoint.EMBEDDINGS: (),
    Endpoint.MESSAGES: ("max_tokens",),
}


@dataclass(frozen=True, slots=True)
class Call:
    """A generation request, as far as its head tells."""

    endpoint: Endpoint
    model: str | None = None  # from the path (gemini); else read from the body


@dataclass(frozen=True, slots=True)
class Judged:
    """The body's judgement: a refusal, or the model, its glob and the body to send."""

    reason: Reason | None
    model: str = ""
    glob: str = ""
    body: bytes | None = None  # the rewritten body; None: send it unchanged
    stream: bool = False
    strip_usage: bool = False  # the proxy asked for openai's usage chunk: remove it


class _Duplicate(ValueError):
    pass


def canonical_path(path: str) -> str:
    path = unquote(path.split("?", 1)[0].split("#", 1)[0], errors="strict")
    return re.sub(r"/{2,}", "/", path).rstrip("/") or "/"


def classify(clause: LlmClause, method: str, path: str) -> Call | None:
    """The generation call a request is, or None (other paths follow the entry's rules)."""
    if method.upper() != "POST":
        return None
    try:
        where = canonical_path(path)
    except UnicodeDecodeError:
        where = path
    if clause.api is Api.GEMINI:
        match = _GEMINI.match(where)
        if match is None:
            return None
        kind = Endpoint.GENERATE if match[2] == "generateContent" else Endpoint.STREAM_GENERATE
        return Call(kind, match[1])
    endpoint = PATHS[clause.api].get(where)
    return None if endpoint is None else Call(endpoint)


def model_verdict(clause: LlmClause, model: str) -> tuple[Reason | None, str]:
    """(refusal or None, the matching glob) of a model name."""
    glob = clause.glob_of(model)
    if glob is None:
        return Reason.LLM_MODEL_DENIED, ""
    if clause.cost is not None and clause.price_of(model) is None:
        return Reason.LLM_MODEL_UNPRICED, glob
    return None, glob


def judge_body(clause: LlmClause, call: Call, body: bytes) -> Judged:
    try:
        document = json.loads(body.decode("utf-8"), object_pairs_hook=_pairs, parse_constant=_nan)
    except (ValueError, RecursionError):
        return Judged(Reason.LLM_BAD_REQUEST)
    if not isinstance(document, dict):
        return Judged(Reason.LLM_BAD_REQUEST)
    model = call.model if call.model is not None else document.get("model")
    if not isinstance(model, str) or not model:
        return Judged(Reason.LLM_BAD_REQUEST)
    refused, glob = model_verdict(clause, model)
    if refused is not None:
        return Judged(refused, model, glob)
    changed = _cap(clause.max_output_tokens, call.endpoint, document)
    if changed is None:
        return Judged(Reason.LLM_BAD_REQUEST, model, glob)
    stream = document.get("stream") is True or call.endpoint is Endpoint.STREAM_GENERATE
    strip = False
    if stream and call.endpoint in (Endpoint.CHAT, Endpoint.COMPLETIONS):
        options = document.get("stream_options")
        if options is not None and not isinstance(options, dict):
            return Judged(Reason.LLM_BAD_REQUEST, model, glob)
        if (options or {}).get("include_usage") is not True:
            document["stream_options"] = {**(options or {}), "include_usage": True}
            strip = changed = True
    rewritten = _dump(document) if changed else None
    return Judged(None, model, glob, rewritten, stream, strip)


def _cap(cap: int | None, endpoint: Endpoint, document: dict[str, Any]) -> bool | None:
    """Lower or set the output limit: changed, or None when a limit is not a number."""
    if endpoint in (Endpoint.GENERATE, Endpoint.STREAM_GENERATE):
        name = "generation_config" if "generation_config" in document else "generationConfig"
        field = "max_output_tokens" if name == "generation_config" else "maxOutputTokens"
        config = document.get(name)
        if config is None:
            config = {}
        if not isinstance(config, dict):
            return None
        changed = _limit(cap, config, (field,))
        if changed:
            document[name] = config
        return changed
    return _limit(cap, document, LIMITS[endpoint])


def _limit(cap: int | None, holder: dict[str, Any], names: tuple[str, ...]) -> bool | None:
    given = [n for n in names if holder.get(n) is not None]
    for name in given:
        value = holder[name]
        if not isinstance(value, int) or isinstance(value, bool):
            return None
    if cap is None or not names:
        return False
    changed = False
    for name in given:
        if holder[name] > cap:
            holder[name], changed = cap, True
    if not given:
        holder[names[0]], changed = cap, True
    return changed


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        raise _Duplicate("duplicate key")
    return found


def _nan(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _dump(document: dict[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()
