"""An addon on the four per-request hooks, for the engine's hook hand-over tests
(test_inlinehooks, test_streamhooks, test_hooksinplace): each hook finishes at once or,
named in `waiting`, after a loop turn; it writes down the hooks it saw (`seen`) and their
requests' paths (`paths`), and marks each response with its request's path (`x-hooked`)."""

from __future__ import annotations

import asyncio
from typing import Any

from mitmproxy import http

HOOKS = ("requestheaders", "request", "responseheaders", "response")


class PerRequestHooks:
    """`answer` makes the `request` hook answer the client itself from the second request
    on; `kill` kills the flow at `responseheaders` from the second request on; `stream`
    streams the response body (as the product's response stage does)."""

    def __init__(
        self,
        waiting: tuple[str, ...] = (),
        answer: bool = False,
        kill: bool = False,
        stream: bool = False,
    ) -> None:
        self.seen: list[str] = []
        self.paths: list[str] = []
        self.answer, self.kill, self.stream = answer, kill, stream
        for name in HOOKS:
            setattr(self, name, self._waits(name) if name in waiting else self._at_once(name))

    def _at_once(self, name: str) -> Any:
        def hook(flow: http.HTTPFlow) -> None:
            self.seen.append(name)
            self.paths.append(flow.request.path)
            later = self.seen.count("requestheaders") > 1
            if name == "request" and self.answer and later:
                flow.response = http.Response.make(403, b"answered here")
            if name == "responseheaders" and flow.response is not None:
                flow.response.headers["x-hooked"] = flow.request.path
                flow.response.stream = self.stream  # streamed as the product streams it
                if self.kill and later:
                    flow.kill()

        return hook

    def _waits(self, name: str) -> Any:
        at_once = self._at_once(name)

        async def hook(flow: http.HTTPFlow) -> None:
            await asyncio.sleep(0)
            at_once(flow)

        return hook
