"""Checks shared by the client tests: what nginx logged, what the client printed."""

from __future__ import annotations

from typing import Any, Protocol

from testbed.nginx import Nginx


class Observed(Protocol):
    """What the checks read: the nginx upstream and the secret the proxy injects."""

    @property
    def nginx(self) -> Nginx: ...

    @property
    def secret(self) -> str: ...


def assert_injected_once(clients: Observed, mark: int, uri: str) -> dict[str, Any]:
    """Exactly one request reached nginx since `mark`, for `uri`, with the proxy's
    credentials (nginx answers 400 to a second Authorization, so 200 means one)."""
    entries = clients.nginx.since(mark)
    assert [e["uri"] for e in entries] == [uri], entries
    entry = entries[0]
    assert entry["status"] == 200, entry
    assert entry["auth"] == f"Bearer {clients.secret}"
    assert entry["api_key"] == clients.secret
    return entry


def assert_no_secret(clients: Observed, *outputs: str) -> None:
    for output in outputs:
        assert clients.secret not in output


def assert_every_request_injected(clients: Observed, mark: int, uris: list[str]) -> None:
    """The tool's requests, all answered, each carrying the proxy's credentials only."""
    entries = clients.nginx.since(mark)
    assert [e["uri"] for e in entries if e["status"] == 200] == uris, entries
    for entry in entries:
        assert entry["auth"] == f"Bearer {clients.secret}", entry
        assert entry["api_key"] == clients.secret, entry
