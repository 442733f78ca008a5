"""What one clause's adapter is: the mitmproxy side of a row of `proxy.clauses.CLAUSES`,
a row of `addons.clauses.ADAPTERS` with the same name.

The request stage (`addons.request`) decides once, then walks the adapters in table
order at each step of a request: `admit` before the request is applied (budgets),
`write` once it is applied (credentials fetched, signatures), `hold` (a body read
before it goes on), `judge` (the held body, in the `request` hook) and `answer` (the
response's stream); the response stage walks `finish` once the flow is done (a model
API call charged, issue 46), before the audit line, which carries `FlowState.audit`.
A step a clause has nothing to do at is the base class's: nothing.

Invariants: an adapter refuses by returning a refusal (`Decision`), never by raising;
an exception is the core's fail-closed refusal (`addons.failclosed`). Its state for one
request is `FlowState.parts[clause]` and nothing else on the flow but what it names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from mitmproxy import http
from mitmproxy.net.http.http1.read import expected_http_body_size

from sandbox_egress.addons.shared import FlowState, Shared
from sandbox_egress.proxy.decision import Decision
from sandbox_egress.proxy.limits import STREAM_BODIES_OVER
from sandbox_egress.proxy.stages import RequestAnswer

Stream = Callable[[bytes], Iterable[bytes] | bytes]
# mitmproxy's own buffering bound: a held body never switches to streaming behind a judge.
HELD_BODY_LIMIT = 1024 * 1024
if STREAM_BODIES_OVER != "1m":  # the bound above is mitmproxy's, written as bytes
    raise ImportError("addons.clauses.base: HELD_BODY_LIMIT must follow STREAM_BODIES_OVER")


def holdable(request: http.Request, limit: int = HELD_BODY_LIMIT) -> bool:
    """A body a clause may read whole before it goes on (MCP's, a model API's): announced,
    at most `limit` (at most mitmproxy's buffering bound, so it never switches to
    streaming, D212, D463), not compressed."""
    if "content-encoding" in request.headers or "content-length" not in request.headers:
        return False
    try:
        size = expected_http_body_size(request)
    except ValueError:
        return False
    return size is not None and size <= limit


@dataclass
class Turn:
    """One request's walk through the adapters."""

    shared: Shared
    flow: http.HTTPFlow
    state: FlowState
    answer: RequestAnswer
    body: int | None = 0  # the body's announced size: 0 without one, None unknown
    held: bool = False  # an adapter holds the whole body: later ones judge it in `request`
    reserved: int = 0  # body bytes an admission already spent (the upload meter's start)
    retry_after_s: int | None = None  # a refusal's Retry-After, when an admission says
    # The core's end of a body judged while it streams (a git push's command list): the
    # judge's decision counted, then the body streams on (True) or is refused (False).
    late: Callable[[Callable[[Decision], Decision]], bool] | None = None

    @classmethod
    def later(cls, shared: Shared, flow: http.HTTPFlow, state: FlowState) -> Turn:
        """A turn after `requestheaders` (a held body, an answer): its decision as it stands."""
        return cls(shared, flow, state, RequestAnswer(state.decision, state.host))


class Adapter:
    """A clause's adapter: each step does nothing unless the clause overrides it."""

    clause = ""

    async def admit(self, turn: Turn) -> Decision | None:
        """Before the request is applied: a refusal, or None."""
        return None

    async def write(self, turn: Turn) -> Decision | None:
        """Once the request is applied (re-targeted, transforms written): a refusal or None."""
        return None

    def hold(self, turn: Turn) -> Decision | bool:
        """Whether the body is held for `judge` (True), or a refusal."""
        return False

    def holds(self, turn: Turn) -> bool:
        """In the `request` hook: whether this adapter still holds the body."""
        return False

    def judge(self, turn: Turn, decided: Decision) -> Decision:
        """The held body, read whole: `decided` (the request's decision), or a refusal."""
        return decided

    def answer(self, turn: Turn, stream: Stream) -> Stream:
        """The response's stream function, wrapped when the clause reads answers."""
        return stream

    def finish(self, turn: Turn) -> None:
        """The flow is done (answered, refused or failed), before its audit line: settle
        what is owed, add audit fields (`FlowState.audit`)."""
        return None
