"""The credential cache (proxy/credentials/cache.py): single flight, freshness, expiry minus
refresh_before, max_stale, failure_ttl, values refused for CR/LF/NUL. A table-driven fake
source and an injected clock: the cache's own rules, no real fetch (the sources have
their own tests)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox_egress.proxy.credentials.base import (
    CacheSettings,
    CredentialError,
    CredentialUnavailable,
    Fetched,
)
from sandbox_egress.proxy.credentials.cache import Credentials, Outcome
from sandbox_egress.proxy.values.secret import Secret

SETTINGS = CacheSettings(ttl=100, refresh_before=30, max_stale=50, failure_ttl=10, timeout=5)


@dataclass
class Script:
    """A source answering from a list: a str is a value, an exception is raised."""

    answers: list[str | Exception | tuple[str, float]]
    settings: CacheSettings = SETTINGS
    calls: int = 0

    def fetch(self) -> Fetched:
        answer = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        if isinstance(answer, Exception):
            raise answer
        if isinstance(answer, tuple):
            return Fetched(Secret(answer[0]), expires_at=answer[1])
        return Fetched(Secret(answer))


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Seen:
    outcomes: list[tuple[str, Outcome]] = field(default_factory=list)

    def __call__(self, name: str, outcome: Outcome) -> None:
        self.outcomes.append((name, outcome))


async def _inline(fetch: Callable[[], Fetched]) -> Fetched:
    return fetch()


def cache(source: Script, clock: Clock, seen: Seen | None = None) -> Credentials:
    return Credentials({"c": source}, clock=clock, on_fetch=seen, run=_inline)


async def value(credentials: Credentials) -> str:
    return (await credentials.get("c")).value.reveal()


def test_twenty_concurrent_callers_share_one_fetch() -> None:
    source, gate = Script(["v1"]), asyncio.Event()

    async def gated(fetch: Callable[[], Fetched]) -> Fetched:
        await gate.wait()
        return fetch()

    async def main() -> list[str]:
        credentials = Credentials({"c": source}, clock=Clock(), run=gated)
        waiters = [asyncio.create_task(value(credentials)) for _ in range(20)]
        await asyncio.sleep(0)
        gate.set()
        return await asyncio.gather(*waiters)

    assert asyncio.run(main()) == ["v1"] * 20
    assert source.calls == 1


def test_fresh_for_ttl_then_fetched_again() -> None:
    source, clock = Script(["v1", "v2"]), Clock()
    credentials = cache(source, clock)
    assert asyncio.run(value(credentials)) == "v1"
    clock.now += 99
    assert asyncio.run(value(credentials)) == "v1"
    clock.now += 1
    assert asyncio.run(value(credentials)) == "v2"
    assert source.calls == 2


def test_an_expiring_value_is_renewed_refresh_before_its_expiry() -> None:
    clock = Clock()
    source = Script([("t1", clock.now + 3600), ("t2", clock.now + 7200)])
    credentials = cache(source, clock)
    assert asyncio.run(value(credentials)) == "t1"
    clock.now += 3600 - 30 - 1  # ttl (100) does not count: the expiry does
    assert asyncio.run(value(credentials)) == "t1"
    clock.now += 1
    assert asyncio.run(value(credentials)) == "t2"


def test_a_token_shorter_lived_than_refresh_before_is_used_for_half_its_life() -> None:
    clock = Clock()
    source = Script([("t1", clock.now + 20), ("t2", clock.now + 100)])
    credentials = cache(source, clock)
    assert asyncio.run(value(credentials)) == "t1"
    clock.now += 9
    assert asyncio.run(value(credentials)) == "t1"
    clock.now += 1
    assert asyncio.run(value(credentials)) == "t2"


def test_a_failed_refresh_serves_the_last_value_up_to_max_stale_then_fails_closed() -> None:
    source, clock, seen = Script(["v1", CredentialError("down")]), Clock(), Seen()
    credentials = cache(source, clock, seen)
    assert asyncio.run(value(credentials)) == "v1"
    clock.now += 100  # stale: a refresh is tried and fails
    assert asyncio.run(value(credentials)) == "v1"
    clock.now += 5  # within failure_ttl: no new fetch
    assert asyncio.run(value(credentials)) == "v1"
    assert source.calls == 2
    clock.now += 44  # 149 < 100 + max_stale
    assert asyncio.run(value(credentials)) == "v1"
    clock.now += 1
    with pytest.raises(CredentialUnavailable, match="down"):
        asyncio.run(value(credentials))
    assert seen.outcomes[:2] == [("c", Outcome.OK), ("c", Outcome.FAILED)]


def test_an_expired_token_is_never_served_stale() -> None:
    clock = Clock()
    source = Script([("t1", clock.now + 60), CredentialError("down")])
    credentials = cache(source, clock)
    assert asyncio.run(value(credentials)) == "t1"
    clock.now += 59  # stale (refresh_before) and the refresh fails: still valid, served
    assert asyncio.run(value(credentials)) == "t1"
    clock.now += 1  # expired: max_stale (50) would allow more, the expiry does not
    with pytest.raises(CredentialUnavailable):
        asyncio.run(value(credentials))


def test_a_failed_first_fetch_is_retried_after_failure_ttl() -> None:
    source, clock = Script([CredentialError("no"), "v1"]), Clock()
    credentials = cache(source, clock)
    with pytest.raises(CredentialUnavailable):
        asyncio.run(value(credentials))
    clock.now += 9.9
    with pytest.raises(CredentialUnavailable):
        asyncio.run(value(credentials))
    assert source.calls == 1
    clock.now += 0.1
    assert asyncio.run(value(credentials)) == "v1"


@pytest.mark.parametrize("bad", ["a\r\nX-Injected: 1", "line\n", "nul\0", "", "\r"], ids=repr)
def test_a_value_with_cr_lf_or_nul_or_empty_is_a_failure(bad: str) -> None:
    seen = Seen()
    credentials = cache(Script([bad]), Clock(), seen)
    with pytest.raises(CredentialUnavailable) as caught:
        asyncio.run(value(credentials))
    assert seen.outcomes == [("c", Outcome.INVALID)]
    assert bad.strip() not in str(caught.value) or not bad.strip()


def test_a_companion_with_lf_is_a_failure_too() -> None:
    @dataclass
    class Pair:
        settings: CacheSettings = SETTINGS

        def fetch(self) -> Fetched:
            return Fetched(Secret("AKIA"), extra={"secret_access_key": Secret("a\nb")})

    credentials = Credentials({"c": Pair()}, clock=Clock(), run=_inline)
    with pytest.raises(CredentialUnavailable):
        asyncio.run(value(credentials))


def test_a_fetch_past_its_timeout_fails_as_timeout() -> None:
    seen = Seen()

    async def never(fetch: Callable[[], Fetched]) -> Fetched:
        await asyncio.Event().wait()
        raise AssertionError

    slow = Script(["v"], settings=CacheSettings(timeout=0.01))
    credentials = Credentials({"c": slow}, clock=Clock(), on_fetch=seen, run=never)
    with pytest.raises(CredentialUnavailable, match="longer than"):
        asyncio.run(value(credentials))
    assert seen.outcomes == [("c", Outcome.TIMEOUT)]


def test_a_source_bug_fails_the_credential_without_its_message() -> None:
    credentials = cache(Script([RuntimeError("the-secret-value")]), Clock())
    with pytest.raises(CredentialUnavailable) as caught:
        asyncio.run(value(credentials))
    assert "the-secret-value" not in str(caught.value)


def test_an_unknown_name_is_unavailable() -> None:
    with pytest.raises(CredentialUnavailable):
        asyncio.run(cache(Script(["v"]), Clock()).get("other"))


def test_replace_keeps_the_value_of_an_unchanged_definition_only() -> None:
    clock = Clock()
    kept, changed = Script(["k1", "k2"]), Script(["c1", "c2"])
    credentials = Credentials(
        {"kept": kept, "changed": changed}, {"kept": 1, "changed": 1}, clock=clock, run=_inline
    )
    asyncio.run(credentials.get("kept"))
    asyncio.run(credentials.get("changed"))
    credentials.replace({"kept": kept, "changed": changed}, {"kept": 1, "changed": 2})
    assert asyncio.run(credentials.get("kept")).value.reveal() == "k1"
    assert asyncio.run(credentials.get("changed")).value.reveal() == "c2"
    credentials.replace({}, {})
    assert credentials.names() == ()


def test_the_values_never_show_in_a_repr() -> None:
    fetched = Fetched(Secret("s3cr3t-value"), extra={"k": Secret("other-s3cr3t")})
    assert "s3cr3t" not in repr(fetched)


STEPS = st.lists(
    st.tuples(
        st.floats(min_value=0, max_value=200, allow_nan=False),  # clock advance
        st.one_of(st.none(), st.floats(min_value=1, max_value=400)),  # None: the fetch fails
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(steps=STEPS)
def test_a_served_value_is_the_latest_fetched_and_never_expired(
    steps: list[tuple[float, float | None]],
) -> None:
    """Whatever the timing and failures: what `get` serves is the last value fetched, never
    past its expiry nor past max_stale; at most one fetch per call."""
    clock = Clock()
    fetched: list[tuple[str, float]] = []  # (value, expires_at)
    lifetimes = iter([life for _, life in steps])

    @dataclass
    class Timed:
        settings: CacheSettings = SETTINGS

        def fetch(self) -> Fetched:
            life = next(lifetimes, None)
            if life is None:
                raise CredentialError("down")
            value = f"v{len(fetched)}"
            fetched.append((value, clock.now + life))
            return Fetched(Secret(value), expires_at=clock.now + life)

    credentials = Credentials({"c": Timed()}, clock=clock, run=_inline)
    calls = 0
    for advance, _ in steps:
        clock.now += advance
        calls += 1
        try:
            served = asyncio.run(value(credentials))
        except CredentialUnavailable:
            continue
        assert fetched and served == fetched[-1][0]
        assert clock.now < fetched[-1][1]
    assert len(fetched) <= calls


def test_each_value_served_stale_is_reported_and_the_first_of_a_spell_is_marked() -> None:
    """Issue 48 (D403): the metric counts every stale serving, the log says it once per
    spell; a fresh value ends the spell."""
    source, clock = Script(["v1", CredentialError("down"), CredentialError("down"), "v2"]), Clock()
    stale: list[tuple[str, bool]] = []
    credentials = Credentials(
        {"c": source}, clock=clock, run=_inline, on_stale=lambda n, f: stale.append((n, f))
    )
    assert asyncio.run(value(credentials)) == "v1"
    assert stale == []  # fresh
    clock.now += 100  # the refresh fails: stale
    assert asyncio.run(value(credentials)) == "v1"
    clock.now += 5  # within failure_ttl: stale again, no fetch
    assert asyncio.run(value(credentials)) == "v1"
    assert stale == [("c", True), ("c", False)]
    clock.now += 10  # the next refresh fails too: the same spell
    assert asyncio.run(value(credentials)) == "v1"
    clock.now += 11  # it succeeds: fresh, the spell is over
    assert asyncio.run(value(credentials)) == "v2"
    assert stale == [("c", True), ("c", False), ("c", False)]
    clock.now += 100  # the next failure starts a new spell
    source.answers.append(CredentialError("down again"))
    assert asyncio.run(value(credentials)) == "v2"
    assert stale[-1] == ("c", True)
