"""The credential cache: every credential fetched on first use, once at a time, kept until
it must be renewed (docs/configuration.md#credentials).

`Credentials.get(name)` is what a request awaits. Per credential (a `_Slot`):

* fresh (`now < fresh_until`): the cached value, no fetch;
* a fetch in flight: every caller awaits that one fetch (single flight);
* otherwise one fetch starts, in a worker thread (`asyncio.to_thread`) bounded by the
  source's `timeout`. Success: the value is fresh for `ttl`, or, when the source gives an
  expiry, until `expires_at - refresh_before` (a token living less than `refresh_before`
  is used for half of what is left of it, D201). Failure: the last value is served until
  `stale_until` (`max_stale` past its freshness, never past its expiry), after which the
  credential fails closed; no new fetch starts for `failure_ttl`. Each value served
  stale is reported (`on_stale(name, first)`, `first` once per stale spell: the metric
  counts each, the log says it once, D403).

Invariants:
* A value holding CR, LF or NUL, or an empty one, is a failed fetch: it would become a
  header value (framing) or an empty credential.
* Nothing here logs or raises with a value: failures carry the source's message
  (`CredentialError`), which names paths, statuses and exit codes only.
* `replace` keeps the slot (value, in-flight fetch) of every credential whose definition
  is unchanged: a reload does not re-mint.
* The clock is injected (`clock`, wall time: expiries are wall time).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sandbox_egress.proxy.credentials.base import (
    CredentialError,
    CredentialUnavailable,
    Fetched,
    Source,
)
from sandbox_egress.proxy.values.spellings import alternation, compiled

logger = logging.getLogger("egress")

_FRAMING = "\r\n\0"
MIN_HELD_LENGTH = 6  # as proxy.config's redactions: shorter values would refuse by chance


class Outcome(StrEnum):
    """A fetch's outcome: the `outcome` label of `egress_credential_fetches_total`."""

    OK = "ok"
    FAILED = "failed"  # the source raised CredentialError (or any exception)
    TIMEOUT = "timeout"
    INVALID = "invalid"  # empty, or holding CR, LF or NUL


Clock = Callable[[], float]
OnFetch = Callable[[str, Outcome], None]  # (credential name, outcome)
OnStale = Callable[[str, bool], None]  # (credential name, first of this stale spell)
Run = Callable[[Callable[[], Fetched]], Awaitable[Fetched]]


@dataclass(eq=False)
class _Slot:
    source: Source
    key: Any  # what decides "unchanged" on a reload: the credential's definition
    value: Fetched | None = None
    fresh_until: float = 0.0
    stale_until: float = 0.0
    retry_at: float = 0.0  # no new fetch before this, after a failure
    problem: str = "not fetched yet"  # why the last fetch failed: names no value
    stale: bool = False  # the value has been served stale since its last fetch
    inflight: asyncio.Task[None] | None = None


def _thread(fetch: Callable[[], Fetched]) -> Awaitable[Fetched]:
    return asyncio.to_thread(fetch)


class Credentials:
    """The cache of every configured credential, by name."""

    def __init__(
        self,
        sources: Mapping[str, Source],
        keys: Mapping[str, Any] | None = None,
        *,
        clock: Clock = time.time,
        on_fetch: OnFetch | None = None,
        run: Run = _thread,
        on_stale: OnStale | None = None,
    ) -> None:
        self._clock = clock
        self._on_fetch = on_fetch
        self._on_stale = on_stale
        self._run = run
        self._slots: dict[str, _Slot] = {}
        self._held: Any = None  # an RE2 expression (`proxy.spellings.compiled`)
        self.replace(sources, keys)

    def held(self) -> Any:
        """Every value the cache holds (and its companions, 6 bytes or more), in every
        spelling: found in a request the sandbox sent, it is `secret_elsewhere` (D208,
        D360). None when none."""
        return self._held

    def _values_changed(self) -> None:
        found = {
            text.encode()
            for slot in self._slots.values()
            if slot.value is not None
            for secret in (slot.value.value, *slot.value.extra.values())
            if len(text := secret.reveal()) >= MIN_HELD_LENGTH
        }
        # Every spelling of each (proxy.spellings, D360), as the configuration's values are.
        self._held = compiled(alternation(found)) if found else None

    def names(self) -> tuple[str, ...]:
        return tuple(self._slots)

    def problem(self, name: str) -> str:
        """Why the credential's last fetch failed (names no value), for the operator."""
        slot = self._slots.get(name)
        return "not configured" if slot is None else slot.problem

    def replace(self, sources: Mapping[str, Source], keys: Mapping[str, Any] | None = None) -> None:
        """Take a reloaded configuration's sources; an unchanged definition keeps its slot.

        `keys[name]` is what is compared (default: the source itself)."""
        slots: dict[str, _Slot] = {}
        for name, source in sources.items():
            key = source if keys is None else keys[name]
            old = self._slots.get(name)
            slots[name] = old if old is not None and old.key == key else _Slot(source, key)
        self._slots = slots
        self._values_changed()

    async def get(self, name: str) -> Fetched:
        """The credential's current value, or CredentialUnavailable (naming no value)."""
        slot = self._slots.get(name)
        if slot is None:
            raise CredentialUnavailable(f"credential {name!r} is not configured")
        now = self._clock()
        if slot.value is not None and now < slot.fresh_until:
            return slot.value
        if slot.inflight is None and now >= slot.retry_at:
            slot.inflight = asyncio.get_running_loop().create_task(
                self._refresh(name, slot), name=f"credential {name}"
            )
        if slot.inflight is not None:
            await asyncio.shield(slot.inflight)
        return self._served(name, slot)

    def _served(self, name: str, slot: _Slot) -> Fetched:
        now = self._clock()
        if slot.value is not None and now < max(slot.fresh_until, slot.stale_until):
            if now >= slot.fresh_until:  # past its freshness: the last value, stale
                first, slot.stale = not slot.stale, True
                if self._on_stale is not None:
                    self._on_stale(name, first)
            return slot.value
        raise CredentialUnavailable(f"credential {name!r} is unavailable: {slot.problem}")

    async def _refresh(self, name: str, slot: _Slot) -> None:
        """One fetch; its outcome updates the slot (the slot's in-flight task)."""
        try:
            fetched, outcome = await self._fetch(slot)
            now = self._clock()
            if fetched is None:
                slot.retry_at = now + slot.source.settings.failure_ttl
            else:
                slot.value = fetched
                self._values_changed()
                slot.fresh_until, slot.stale_until = _lifetime(slot.source, fetched, now)
                slot.retry_at, slot.stale = 0.0, False
            if self._on_fetch is not None:
                self._on_fetch(name, outcome)
        finally:
            slot.inflight = None

    async def _fetch(self, slot: _Slot) -> tuple[Fetched | None, Outcome]:
        settings = slot.source.settings
        try:
            async with asyncio.timeout(settings.timeout):
                fetched = await self._run(slot.source.fetch)
        except TimeoutError:
            slot.problem = f"the fetch took longer than {settings.timeout:g} s"
            return None, Outcome.TIMEOUT
        except CredentialError as exc:
            slot.problem = str(exc)
            return None, Outcome.FAILED
        except Exception as exc:  # noqa: BLE001 - a source's bug fails this credential only
            slot.problem = f"the fetch failed ({type(exc).__name__})"
            logger.warning("credential fetch raised %s", type(exc).__name__)
            return None, Outcome.FAILED
        if not usable(fetched):
            slot.problem = "the value is empty or holds CR, LF or NUL"
            return None, Outcome.INVALID
        return fetched, Outcome.OK


def usable(fetched: Fetched) -> bool:
    """Whether every value of `fetched` is non-empty and free of CR, LF and NUL."""
    for secret in (fetched.value, *fetched.extra.values()):
        text = secret.reveal()
        if not text or any(c in text for c in _FRAMING):
            return False
    return True


def _lifetime(source: Source, fetched: Fetched, now: float) -> tuple[float, float]:
    """(fresh_until, stale_until) of a value fetched at `now` (D201)."""
    settings = source.settings
    expires = fetched.expires_at
    if expires is None:
        fresh = now + settings.ttl
        return fresh, fresh + settings.max_stale
    fresh = max(expires - settings.refresh_before, now + (expires - now) / 2)
    return fresh, min(fresh + settings.max_stale, expires)
