"""The one small interface every credential source and minter keeps
(docs/configuration.md#credentials).

A `Source` is built once from its configuration block (`proxy.credentials.table.KINDS`)
and asked, off the event loop, for a `Fetched` value; `proxy.credentials.cache` decides
when to ask (lazily, once in flight, cached for `CacheSettings`).

The error tree, all of it:

    CredentialError          a source could not give a value (its message names the
     |                       source and the cause: a path, a status, an exit code; never
     |                       a value, never a response body)
     +- CredentialUnavailable  the cache has no value to serve (first fetch failed, or the
                               last value is older than `max_stale`): the request is
                               refused 502 `credential_unavailable`

Invariants:
* A value lives only inside a `Secret` (`proxy.values.secret`): its repr and str show `***`.
* `fetch` blocks (a file, a child process, an HTTPS call) and is only ever called in a
  worker thread, with the settings' `timeout` as its own deadline.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from sandbox_egress.proxy.values.secret import Secret

DEFAULT_REFRESH_BEFORE_S = 300.0  # 5 min: a minted token is renewed this long before expiry
DEFAULT_MAX_STALE_S = 3600.0  # 1 h: a failed refresh serves the last value this long
DEFAULT_FAILURE_TTL_S = 60.0  # a failed first fetch is retried after this long
DEFAULT_TIMEOUT_S = 10.0  # one fetch (a command, an HTTPS exchange) gets this long
# A source without an expiry and without a `ttl` is fetched once per ... this long:
DEFAULT_TTL_S = 300.0

_EMPTY: Mapping[str, Secret] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Fetched:
    """One value a source gave: the credential, when it stops being valid, its companions.

    `expires_at` is wall-clock time (`time.time()`), None when the source does not say;
    `extra` holds the companions some credentials come with (aws: `secret_access_key`,
    `session_token`; `value` is then the access key id). Never printed.
    """

    value: Secret
    expires_at: float | None = None
    extra: Mapping[str, Secret] = field(default=_EMPTY, repr=False)


@dataclass(frozen=True, slots=True)
class CacheSettings:
    """How long a value is kept and how a failure is served, in seconds."""

    ttl: float = DEFAULT_TTL_S
    refresh_before: float = DEFAULT_REFRESH_BEFORE_S
    max_stale: float = DEFAULT_MAX_STALE_S
    failure_ttl: float = DEFAULT_FAILURE_TTL_S
    timeout: float = DEFAULT_TIMEOUT_S


class CredentialError(Exception):
    """A source could not give a value. The message never contains a value."""


class CredentialUnavailable(CredentialError):
    """No value to serve for a credential: the request is refused `credential_unavailable`."""


class Source(Protocol):
    """A credential source or minter, ready to fetch."""

    @property
    def settings(self) -> CacheSettings: ...

    def fetch(self) -> Fetched:
        """The current value. Blocking; called in a worker thread. Raises CredentialError."""
        ...
