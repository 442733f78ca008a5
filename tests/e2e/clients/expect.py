"""Checks shared by the client tests: what nginx logged, what the client printed."""

from __future__ import annotations

from typing import Any

from tests.e2e.clients.conftest import Clients


def assert_injected_once(clients: Clients, mark: int, uri: str) -> dict[str, Any]:
    """Exactly one request reached nginx since `mark`, for `uri`, with the proxy's
    credentials (nginx answers 400 to a second Authorization, so 200 means one)."""
    entries = clients.nginx.since(mark)
    assert [e["uri"] for e in entries] == [uri], entries
    entry = entries[0]
    assert entry["status"] == 200, entry
    assert entry["auth"] == f"Bearer {clients.secret}"
    assert entry["api_key"] == clients.secret
    return entry


def assert_no_secret(clients: Clients, *outputs: str) -> None:
    for output in outputs:
        assert clients.secret not in output
