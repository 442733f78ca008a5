"""`oauth2`: an access token minted at a token endpoint (RFC 6749), with the
`client_credentials` grant or the `refresh_token` grant (docs/configuration.md#credentials).

    graph: {oauth2: {grant: client_credentials, token_url: "https://login.example.com/token",
                     client_id: "${GRAPH_ID}", client_secret: "${file:/run/secrets/graph}",
                     scopes: [api]}}
    mail:  {oauth2: {grant: refresh_token, token_url: ..., client_id: ..., client_secret: ...,
                     refresh_token: "${file:/run/secrets/mail-refresh}",
                     state_file: /var/lib/egress/mail.json}}

The client authenticates with HTTP Basic (RFC 6749 §2.3.1, which every server must
support), or in the form body with `client_auth: body`. The token's lifetime is the
answer's `expires_in`; without one the block's `ttl` applies.

Invariants:
* One refresh at a time per `state_file`, in this process.
* A refresh token the server rotates (a new `refresh_token` in the answer) is written to
  `state_file` before the access token is used: a temporary file in the same directory,
  mode 0600, fsynced, renamed over the old one. A fetch reads the state file first and
  falls back to the configured `refresh_token` only when there is none.
* With a shared `state:` (`shared(name, fleet)`), one replica of the fleet refreshes at a
  time and the rotated tokens live in the store (`proxy.credentials.fleet`, D232); the
  state file is still written, as this node's copy.
* Nothing the server answers is shown in an error: only its status (`proxy.credentials.https`).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandbox_egress.proxy.credentials.base import CacheSettings, CredentialError, Fetched
from sandbox_egress.proxy.credentials.block import Block, Report
from sandbox_egress.proxy.credentials.https import Https
from sandbox_egress.proxy.values.secret import Secret

if TYPE_CHECKING:
    from sandbox_egress.proxy.credentials.fleet import Fleet, Tokens

GRANTS = ("client_credentials", "refresh_token")
# One refresh at a time per state file: a fetch the cache gave up on (its timeout) may
# still be running in its thread, and two refreshes would spend one refresh token twice.
_STATE_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class OAuth2:
    grant: str
    token_url: str
    client_id: Secret
    client_secret: Secret | None
    settings: CacheSettings
    scopes: tuple[str, ...] = ()
    audience: str = ""
    client_auth: str = "basic"
    refresh_token: Secret | None = None
    state_file: str = ""
    https: Https = field(default_factory=Https)
    name: str = ""
    fleet: Fleet | None = None

    def source(self, https: Https) -> OAuth2:
        return replace(self, https=https)

    def shared(self, name: str, fleet: Fleet) -> OAuth2:
        """This credential refreshed by one replica at a time (a rotating refresh token)."""
        return replace(self, name=name, fleet=fleet) if self.grant == "refresh_token" else self

    def fetch(self) -> Fetched:
        if self.grant != "refresh_token":
            return self._fetch()
        with _LOCKS_LOCK:
            lock = _STATE_LOCKS.setdefault(self.state_file, threading.Lock())
        with lock:
            if self.fleet is not None:
                return self.fleet.refresh(self.name, self._mint, self.settings.refresh_before)
            return self._fetch()

    def _fetch(self) -> Fetched:
        minted = self._mint(None)
        return Fetched(minted.access, minted.expires_at)

    def _mint(self, refresh: Secret | None) -> Tokens:
        """One exchange at the token endpoint; `refresh` is the fleet's current refresh
        token (None: this node's state file, then the configured one)."""
        from sandbox_egress.proxy.credentials.fleet import Tokens

        form = {"grant_type": self.grant}
        if self.scopes:
            form["scope"] = " ".join(self.scopes)
        if self.audience:
            form["audience"] = self.audience
        if self.grant == "refresh_token":
            form["refresh_token"] = refresh.reveal() if refresh else self._refresh_token()
        headers: dict[str, str] = {}
        client_id = self.client_id.reveal()
        secret = self.client_secret.reveal() if self.client_secret is not None else ""
        if self.client_auth == "body" or self.client_secret is None:
            form["client_id"] = client_id
            if secret:
                form["client_secret"] = secret
        else:
            pair = f"{urllib.parse.quote(client_id, safe='')}:{urllib.parse.quote(secret, safe='')}"
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        started = time.time()
        answer = self.https.exchange(
            "POST", self.token_url, self.settings.timeout, form=form, headers=headers
        )
        if not isinstance(answer, dict) or not isinstance(answer.get("access_token"), str):
            raise CredentialError(f"{_named(self.token_url)}: the answer has no access_token")
        rotated = answer.get("refresh_token")
        kept = None
        if self.grant == "refresh_token" and isinstance(rotated, str) and rotated:
            save_state(self.state_file, {"refresh_token": rotated})
            kept = Secret(rotated)
        lifetime = answer.get("expires_in")
        expires = None
        if isinstance(lifetime, int | float) and not isinstance(lifetime, bool) and lifetime > 0:
            expires = started + float(lifetime)
        return Tokens(Secret(answer["access_token"]), expires, kept)

    def _refresh_token(self) -> str:
        state = load_state(self.state_file)
        token = state.get("refresh_token") if isinstance(state, dict) else None
        if isinstance(token, str) and token:
            return token
        if self.refresh_token is None:
            raise CredentialError(f"{self.state_file} holds no refresh_token")
        return self.refresh_token.reveal()


def _named(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.hostname}{parts.path}"


def load_state(path: str) -> Any:
    """The state file's JSON; {} when there is none yet."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise CredentialError(f"cannot read {path}: {type(exc).__name__}") from None


def save_state(path: str, state: dict[str, str]) -> None:
    """Replace the state file atomically (same directory, 0600, fsynced, renamed)."""
    target = Path(path)
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump(state, out)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        directory = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    except OSError as exc:
        raise CredentialError(f"cannot write {path}: {exc.strerror}") from None


def parse(raw: Any, where: str, report: Report, environ: Mapping[str, str] | None) -> OAuth2 | None:
    block = Block.of(raw, where, report, environ)
    if block is None:
        return None
    grant = block.string("grant")
    if grant and grant not in GRANTS:
        block.refuse("grant", f"must be one of: {', '.join(GRANTS)}")
    token_url = block.https_url("token_url")
    client_id = block.secret("client_id")
    client_secret = block.secret("client_secret", required=False)
    scopes = block.strings("scopes")
    audience = block.string("audience", required=False)
    client_auth = block.string("client_auth", required=False, default="basic")
    if client_auth not in ("basic", "body"):
        block.refuse("client_auth", "must be basic or body")
    refresh_token = block.secret("refresh_token", required=False)
    state_file = block.absolute_path("state_file", required=grant == "refresh_token")
    if grant == "client_credentials" and (refresh_token is not None or state_file):
        block.refuse("grant", "refresh_token and state_file go with grant: refresh_token")
    settings = block.settings()
    block.unknown()
    if not block.ok or client_id is None:
        return None
    return OAuth2(
        grant,
        token_url,
        client_id,
        client_secret,
        settings,
        scopes,
        audience,
        client_auth,
        refresh_token,
        state_file,
    )
