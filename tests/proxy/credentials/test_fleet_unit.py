"""`Fleet.refresh` in this process (the two-process test is test_fleet.py): a mint counted
by hand stands for the token endpoint, the node's memory for the store."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from sandbox_egress.proxy.credentials.base import CredentialError
from sandbox_egress.proxy.credentials.fleet import Fleet, Tokens
from sandbox_egress.proxy.state import StateUnavailable
from sandbox_egress.proxy.state.memory import MemoryState
from sandbox_egress.proxy.values.secret import Secret


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    running = asyncio.new_event_loop()
    thread = threading.Thread(target=running.run_forever, daemon=True)
    thread.start()
    yield running
    running.call_soon_threadsafe(running.stop)
    thread.join()
    running.close()


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_valid_shared_token_is_reused_and_an_expired_one_refreshed_once(loop) -> None:
    clock, spent = Clock(), []

    def mint(refresh: Secret | None) -> Tokens:
        spent.append(refresh.reveal() if refresh else None)
        n = len(spent)
        return Tokens(Secret(f"at-{n}"), clock.now + 60, Secret(f"rt-{n}") if n < 3 else None)

    fleet = Fleet(MemoryState(), loop, clock=clock)
    got = [fleet.refresh("mail", mint, 10).value.reveal() for _ in range(3)]
    clock.now += 55  # within refresh_before: refreshed with the shared refresh token
    got += [fleet.refresh("mail", mint, 10).value.reveal()]
    clock.now += 55
    got += [fleet.refresh("mail", mint, 10).value.reveal()]  # an answer without rotation
    clock.now += 55
    got += [fleet.refresh("mail", mint, 10).value.reveal()]
    assert got == ["at-1", "at-1", "at-1", "at-2", "at-3", "at-4"]
    assert spent == [None, "rt-1", "rt-2", "rt-2"]  # not rotated: the last one is kept


def test_a_replica_waiting_on_the_lock_takes_the_fresh_token_or_gives_up(loop) -> None:
    state, clock = MemoryState(), Clock()
    fleet = Fleet(state, loop, wait_s=0.2, clock=clock)
    assert state.lock_now("credential:mail", 30, "another replica")

    def mint(_refresh: Secret | None) -> Tokens:
        raise AssertionError("the lock is held elsewhere")

    with pytest.raises(CredentialError, match="another replica held the refresh over 0.2s"):
        fleet.refresh("mail", mint, 10)
    state.put_now("credential:mail", Tokens(Secret("at-9"), 2000.0, None).dump(), 60)
    assert fleet.refresh("mail", mint, 10).value.reveal() == "at-9"


def test_an_unreachable_store_fails_the_credential_closed(loop) -> None:
    class Down(MemoryState):
        async def lock(self, key: str, ttl_s: float) -> bool:
            raise StateUnavailable("ConnectionRefusedError")

    with pytest.raises(CredentialError) as caught:
        Fleet(Down(), loop).refresh("mail", lambda _r: Tokens(Secret("x"), None, None), 10)
    assert str(caught.value) == (
        "the shared state is unreachable (ConnectionRefusedError) and on_error is deny"
    )


def test_a_stored_value_that_is_not_tokens_is_ignored() -> None:
    assert [Tokens.load(raw) for raw in (None, "", "{", "[]", '{"access": 1}')] == [None] * 5
    kept = Tokens.load('{"access": "a", "expires_at": null, "refresh": ""}')
    assert kept is not None and (kept.expires_at, kept.refresh) == (None, None)


def test_a_token_shorter_lived_than_refresh_before_is_shared_for_half_its_life(loop) -> None:
    """Issue 48: a 3 s token with refresh_before 60 s (the default) was refreshed by every
    replica in turn, each spending the rotating refresh token and voiding the token the
    other had just minted. The shared token is now fresh as the cache reckons it (D201):
    for half of its life when it lives less than refresh_before (D409)."""
    clock, spent = Clock(), []

    def mint(refresh: Secret | None) -> Tokens:
        spent.append(refresh.reveal() if refresh else None)
        return Tokens(Secret(f"at-{len(spent)}"), clock.now + 3, Secret(f"rt-{len(spent)}"))

    store = MemoryState()  # the shared store; a Fleet per replica
    a, b = Fleet(store, loop, clock=clock), Fleet(store, loop, clock=clock)
    assert a.refresh("mail", mint, 60).value.reveal() == "at-1"
    clock.now += 1  # 1 s of its 3 s: fresh for the fleet (half its life is 1.5 s)
    assert b.refresh("mail", mint, 60).value.reveal() == "at-1"
    clock.now += 1  # 2 s: past half its life: refreshed, once
    assert b.refresh("mail", mint, 60).value.reveal() == "at-2"
    assert spent == [None, "rt-1"]
    kept = Tokens.load(a._on_loop(a.state.get("credential:mail")))
    assert kept is not None and kept.minted_at == clock.now
