"""The egress proxy's approvals, as the bridge speaks to them (issue 47, D502-D503).

Two doors, both defined by the proxy (docs/configuration.md, its approvals section):

* ``ask_ahead`` — from inside the sandbox, through the sandbox's own proxy setting:
  ``POST http://egress.invalid/v1/access-requests {host, port, reason}``. The proxy
  itself answers it and names the sandbox from the caller's identity, so the bridge
  never has to know (or be trusted to say) which sandbox it is in. The answer is also
  the policy view the bridge needs (D502): 202 — the proxy would hold this destination
  and now holds an approval for it (``Held``); 400 ``not_holdable`` (allowed, or refused
  whoever approves), 404 (approvals off), 429 (over ``max_pending``) or any failure —
  nothing to ask (``None``): the call goes on and meets the proxy as without a bridge.
* ``allow_once`` — the admin API on the metrics address, with the bearer token: ``POST
  /approvals/{id} {"decision": "allow", "scope": "once"}``; when that approval already
  timed out while the user read the prompt (409), ``POST /approvals`` grants the same
  sandbox, host and port ``once`` ahead. An approval another approver already denied
  stays denied (the user's yes does not overrule an operator's no).

Invariants: standard library only (``allow_once`` runs in the lean grant step, D504);
every call has one deadline; failures come back as values, never exceptions; the token
never reaches a message.
"""

from __future__ import annotations

import base64
import http.client
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

RESERVED_HOST = "egress.invalid"
ASK_PATH = "/v1/access-requests"
TIMEOUT = 2.0  # seconds per call: at most 4 destinations ask, well inside a hook's timeout
CAP = 64 * 1024  # bytes of any answer read


@dataclass(frozen=True)
class Held:
    """A pending approval the proxy made for this sandbox's destination."""

    approval: str


@dataclass(frozen=True)
class Granted:
    """What ``allow_once`` did: ``how`` is ``decided`` (the pending approval allowed),
    ``ahead`` (a grant made ahead after a timeout), or ``refused`` (with ``why``)."""

    how: str
    why: str = ""

    @property
    def ok(self) -> bool:
        return self.how in ("decided", "ahead")


def _proxy(environ: Mapping[str, str]) -> tuple[str, int, dict[str, str]] | None:
    """The sandbox's HTTP proxy (``http_proxy``, else ``https_proxy``, either case) with
    its ``Proxy-Authorization`` header; None when there is none."""
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"):
        value = environ.get(name, "").strip()
        if not value:
            continue
        parts = urlsplit(value if "://" in value else f"http://{value}")
        try:
            port = parts.port or 80
        except ValueError:
            return None
        if parts.scheme.lower() != "http" or not parts.hostname:
            return None
        headers: dict[str, str] = {}
        if parts.username is not None:
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
            headers["Proxy-Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        return parts.hostname, port, headers
    return None


def _call(
    host: str, port: int, method: str, target: str, body: Any, headers: Mapping[str, str]
) -> tuple[int, Any]:
    """One request; (status, parsed JSON or None). Raises OSError/HTTPException."""
    data = json.dumps(body).encode() if body is not None else None
    conn = http.client.HTTPConnection(host, port, timeout=TIMEOUT)
    try:
        sent = {"Content-Type": "application/json", "Connection": "close", **headers}
        conn.request(method, target, body=data, headers=sent)
        response = conn.getresponse()
        raw = response.read(CAP)
    finally:
        conn.close()
    try:
        return response.status, json.loads(raw) if raw else None
    except ValueError:
        return response.status, None


def ask_ahead(host: str, port: int, reason: str, environ: Mapping[str, str]) -> Held | None:
    """A pending approval for (this sandbox, host:port), or None: nothing to ask."""
    proxy = _proxy(environ)
    if proxy is None:
        return None
    proxy_host, proxy_port, headers = proxy
    body = {"host": host, "port": port, "reason": reason[:200]}
    try:
        status, answer = _call(
            proxy_host, proxy_port, "POST", f"http://{RESERVED_HOST}{ASK_PATH}", body,
            {**headers, "Host": RESERVED_HOST},
        )  # fmt: skip
    except (OSError, http.client.HTTPException):
        return None
    if status == 202 and isinstance(answer, dict) and isinstance(answer.get("id"), str):
        return Held(answer["id"])
    return None


def _admin(admin: str) -> tuple[str, int] | None:
    parts = urlsplit(admin if "://" in admin else f"http://{admin}")
    try:
        port = parts.port or 80
    except ValueError:
        return None
    return (parts.hostname, port) if parts.scheme == "http" and parts.hostname else None


def allow_once(admin: str, token: str, approval: str, reason: str) -> Granted:
    """The user's yes: ``approval`` allowed ``once`` (or granted ahead if it timed out)."""
    where = _admin(admin)
    if where is None:
        return Granted("refused", "the admin address is not http://HOST:PORT")
    auth = {"Authorization": f"Bearer {token}"}
    body = {"decision": "allow", "scope": "once", "reason": reason[:200]}
    try:
        status, _ = _call(*where, "POST", f"/approvals/{approval}", body, auth)
        if status == 200:
            return Granted("decided")
        if status != 409:
            return Granted("refused", f"the admin API answered {status}")
        status, listing = _call(*where, "GET", "/approvals", None, auth)
        found = [
            a for a in (listing or {}).get("approvals", [])
            if isinstance(a, dict) and a.get("id") == approval
        ] if status == 200 and isinstance(listing, dict) else []  # fmt: skip
        if not found or found[0].get("state") != "timed_out":
            state = found[0].get("state") if found else "unknown"
            return Granted("refused", f"the approval is already {state}")
        ahead = {k: found[0].get(k) for k in ("sandbox", "host", "port")}
        status, _ = _call(*where, "POST", "/approvals", {**ahead, **body}, auth)
    except (OSError, http.client.HTTPException) as exc:
        return Granted("refused", f"the admin API cannot be reached ({type(exc).__name__})")
    return Granted("ahead") if status == 200 else Granted("refused", f"answered {status}")
