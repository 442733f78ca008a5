"""One replica at a time refreshes a rotating refresh token (issue 34, D232-D234).

An OAuth2 server that rotates refresh tokens answers `invalid_grant` to a refresh token
already spent. Two replicas that refresh the same credential at once spend it twice, and
one of them breaks. With a shared `state:` (redis, or the node service of `--workers`),
the `oauth2` minter refreshes through `Fleet.refresh`:

1. take `lock(key, lease)` on `credential:<name>` (the credential's configured name,
   never its value); a replica that cannot take it waits (bounded, `wait_s`) and re-reads;
2. re-read the shared tokens: another replica may have refreshed already, and an access
   token still fresh is used as it is, with no refresh. Fresh is what the cache says
   (D201): until `refresh_before` before its expiry, or, for a token that lives less
   than `refresh_before`, for half of its life from when it was minted (`minted_at`,
   kept with it; D409). Without that, every replica refreshed a short-lived token in
   turn, each voiding the one the other had just minted;
3. refresh at the provider with the current (shared) refresh token;
4. write the new tokens to the store (`put`, kept `KEEP_S`);
5. unlock. A holder that dies lets the lock lapse after `lease_s`.

Invariants:
* The store holds the tokens (D233): it is a secret store. Nothing here logs a value;
  errors name the credential and the cause only.
* The store unreachable: `on_error: local` (the backend's fallback) refreshes in this
  process alone; `deny` fails the credential closed (`CredentialError`, the request gets
  `credential_unavailable`).
* Calls run on the event loop that owns the backend (`run_coroutine_threadsafe`): the
  minter's fetch runs in a worker thread, never on the loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from sandbox_egress.proxy.credentials.base import CredentialError, Fetched
from sandbox_egress.proxy.state import StateBackend, StateUnavailable
from sandbox_egress.proxy.values.secret import Secret

log = logging.getLogger("egress")
T = TypeVar("T")
KEEP_S = 90 * 86400.0  # the rotated refresh token must outlive any pause of the fleet
POLL_S = 0.05


@dataclass(frozen=True, slots=True)
class Tokens:
    """What a refresh gave: the access token, its expiry (wall clock), the refresh token,
    and when it was minted (wall clock; None: not known)."""

    access: Secret
    expires_at: float | None
    refresh: Secret | None
    minted_at: float | None = None

    def dump(self) -> str:
        refresh = self.refresh.reveal() if self.refresh is not None else None
        return json.dumps(
            {"access": self.access.reveal(), "expires_at": self.expires_at, "refresh": refresh,
             "minted_at": self.minted_at}
        )  # fmt: skip

    @staticmethod
    def load(raw: str | None) -> Tokens | None:
        try:
            kept = json.loads(raw) if raw else None
            if not isinstance(kept, dict) or not isinstance(kept.get("access"), str):
                return None
            expires, refresh = kept.get("expires_at"), kept.get("refresh")
            minted = kept.get("minted_at")
            return Tokens(
                Secret(kept["access"]),
                float(expires) if isinstance(expires, int | float) else None,
                Secret(refresh) if isinstance(refresh, str) and refresh else None,
                float(minted) if isinstance(minted, int | float) else None,
            )
        except ValueError:
            return None


class Fleet:
    """The shared refresh of every rotating credential of this process (one per backend)."""

    def __init__(
        self,
        state: StateBackend,
        loop: asyncio.AbstractEventLoop,
        *,
        wait_s: float = 30.0,
        lease_s: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.state = state
        self.loop = loop
        self.wait_s = wait_s
        self.lease_s = lease_s
        self._clock = clock

    def _on_loop(self, call: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(call, self.loop).result(self.wait_s + 5)

    def _read(self, key: str) -> Tokens | None:
        return Tokens.load(self._on_loop(self.state.get(key)))

    def refresh(
        self, name: str, mint: Callable[[Secret | None], Tokens], refresh_before: float
    ) -> Fetched:
        """The current access token of `name`: another replica's while valid for
        `refresh_before`, else one `mint(current refresh token)` under the fleet's lock."""
        key = f"credential:{name}"
        try:
            return self._refresh(key, mint, refresh_before)
        except StateUnavailable as exc:
            raise CredentialError(
                f"the shared state is unreachable ({exc}) and on_error is deny"
            ) from None

    def _refresh(
        self, key: str, mint: Callable[[Secret | None], Tokens], refresh_before: float
    ) -> Fetched:
        deadline = time.monotonic() + self.wait_s
        while not self._on_loop(self.state.lock(key, self.lease_s)):
            valid = self._valid(self._read(key), refresh_before)
            if valid is not None:
                return _fetched(valid)
            if time.monotonic() > deadline:
                raise CredentialError(f"another replica held the refresh over {self.wait_s:g}s")
            time.sleep(POLL_S)
        try:
            current = self._read(key)
            valid = self._valid(current, refresh_before)
            if valid is not None:
                return _fetched(valid)
            fresh = mint(current.refresh if current is not None else None)
            kept = fresh.refresh
            if kept is None and current is not None:  # not rotated: keep the last
                kept = current.refresh
            fresh = Tokens(fresh.access, fresh.expires_at, kept, self._clock())
            self._on_loop(self.state.put(key, fresh.dump(), KEEP_S))
            return _fetched(fresh)
        finally:
            try:
                self._on_loop(self.state.unlock(key))
            except StateUnavailable:
                log.warning("%s: the lock could not be released; it lapses on its own", key)

    def _valid(self, tokens: Tokens | None, refresh_before: float) -> Tokens | None:
        """`tokens` while their access token is fresh (the cache's rule, D201); None when
        absent or without a known expiry (refresh)."""
        if tokens is None or tokens.expires_at is None:
            return None
        fresh_until = tokens.expires_at - refresh_before
        if tokens.minted_at is not None:  # a short-lived token: half of its life
            half = tokens.minted_at + (tokens.expires_at - tokens.minted_at) / 2
            fresh_until = max(fresh_until, half)
        return tokens if self._clock() < min(fresh_until, tokens.expires_at) else None


def _fetched(tokens: Tokens) -> Fetched:
    return Fetched(tokens.access, tokens.expires_at)
