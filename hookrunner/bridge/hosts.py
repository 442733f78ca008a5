"""The destinations a Claude Code tool input names (issue 47, D501).

``destinations(tool, tool_input)`` reads the hosts a call would reach through the egress
proxy: WebFetch's ``url``, and every ``http(s)://`` / ``ws(s)://`` URL written in a Bash
``command``. Each is a ``Destination`` of the host spelled exactly as the proxy spells it
(``handlerhost``: UTS 46, A-labels, the WHATWG IPv4 reading) and the port the client
would use (the URL's, else the scheme's default).

This is the bridge's *friendly* reading, not a control: what it misses (a host built
from variables, a client with its own syntax) simply reaches the proxy, which holds it
for its own approvers or refuses it. What it reads can only ever lead to an ``ask`` the
user answers, never to an allow.

Invariants: pure (no I/O); at most ``MAX_DESTINATIONS`` per call, in order of first
appearance, each once; a URL whose host the proxy would refuse to read is skipped.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from sandbox_egress.hookrunner.handlerhost import HostError, handler_host

MAX_DESTINATIONS = 4  # one prompt names them all; more is a command nobody reads
MAX_TEXT = 64 * 1024  # what is read of a command for URLs
DEFAULT_PORTS = {"http": 80, "ws": 80, "https": 443, "wss": 443}
# A URL as a shell word carries it: up to whitespace, a quote, or a shell operator.
_URL = re.compile(r"(?i)\b(https?|wss?)://[^\s'\"`<>|;&(){}\\]+")


@dataclass(frozen=True, order=True)
class Destination:
    """A host and port as the egress proxy judges them."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def destination(url: str) -> Destination | None:
    """The destination of one URL, None when it names none the proxy would read."""
    try:
        parts = urlsplit(url.strip())
        scheme = parts.scheme.lower()
        if scheme not in DEFAULT_PORTS or not parts.netloc:
            return None
        port = parts.port or DEFAULT_PORTS[scheme]
        host = handler_host(parts)
    except (ValueError, HostError):
        return None
    if not host or not 0 < port < 65536:
        return None
    return Destination(host, port)


def destinations(tool: str, tool_input: Mapping[str, Any]) -> tuple[Destination, ...]:
    """The destinations of a Claude Code tool call (``WebFetch``, ``Bash``); others: none."""
    if tool == "WebFetch":
        url = tool_input.get("url")
        found = destination(url) if isinstance(url, str) else None
        return (found,) if found is not None else ()
    if tool == "Bash":
        command = tool_input.get("command")
        if not isinstance(command, str):
            return ()
        seen: list[Destination] = []
        for match in _URL.finditer(command[:MAX_TEXT]):
            found = destination(match.group(0))
            if found is not None and found not in seen:
                seen.append(found)
                if len(seen) == MAX_DESTINATIONS:
                    break
        return tuple(seen)
    return ()
