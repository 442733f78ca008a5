"""HTTPS exchanges of the minters and of `vault`: token endpoints, APIs, secret stores.

They trust what upstream requests trust (docs/configuration.md#credentials): the
system's bundle (which `SSL_CERT_FILE` / `SSL_CERT_DIR` replace), the public roots the
proxy verifies upstreams against (certifi), and `--upstream-ca`. Certificates and host
names are always verified.

Invariants:
* Blocking (called in a worker thread), each exchange bounded by its `timeout`; a
  redirect is never followed (a token would follow it) and is a failure; an answer
  larger than `MAX_ANSWER` is a failure.
* A `CredentialError` names the URL's host and path and the status, never a request
  field, a header or an answer's body (a token endpoint may echo what it was sent). A
  certificate that does not verify says so, with OpenSSL's reason, and names the option
  that adds a CA (`--upstream-ca`, issue 48).
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import certifi

from sandbox_egress.proxy.credentials.base import CredentialError

MAX_ANSWER = 1024 * 1024


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the 3xx then raises HTTPError: a failure


@dataclass(frozen=True)
class Https:
    """The proxy's upstream trust, for fetches: equal when the extra CA is the same."""

    upstream_ca: str | None = None

    @cached_property
    def context(self) -> ssl.SSLContext:
        context = ssl.create_default_context()  # the system bundle, or SSL_CERT_FILE
        context.load_verify_locations(cafile=certifi.where())
        if self.upstream_ca:
            context.load_verify_locations(cafile=self.upstream_ca)
        return context

    def exchange(
        self,
        method: str,
        url: str,
        timeout: float,
        *,
        form: dict[str, str] | None = None,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """The JSON answer of a 2xx exchange, else CredentialError (no value in it)."""
        parts = urllib.parse.urlsplit(url)
        named = f"{parts.hostname}{parts.path}"
        if parts.scheme != "https":
            raise CredentialError(f"{named}: only https:// is used for credentials")
        data: bytes | None = None
        sent = {"Accept": "application/json", "User-Agent": "egress-proxy", **(headers or {})}
        if form is not None:
            data = urllib.parse.urlencode(form).encode()
            sent["Content-Type"] = "application/x-www-form-urlencoded"
        elif body is not None:
            data = json.dumps(body).encode()
            sent["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, headers=sent, method=method)
        opener = urllib.request.build_opener(
            _NoRedirect, urllib.request.HTTPSHandler(context=self.context)
        )
        try:
            with opener.open(request, timeout=timeout) as answer:
                raw = answer.read(MAX_ANSWER + 1)
        except urllib.error.HTTPError as exc:
            raise CredentialError(f"{named} answered {exc.code}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise CredentialError(f"{named}: {_cause(reason)}") from None
        if len(raw) > MAX_ANSWER:
            raise CredentialError(f"{named}: the answer is larger than {MAX_ANSWER} bytes")
        try:
            return json.loads(raw)
        except ValueError:
            raise CredentialError(f"{named}: the answer is not JSON") from None


def _cause(reason: object) -> str:
    """A failed exchange's cause, in words an operator can act on (never a value)."""
    if isinstance(reason, ssl.SSLCertVerificationError):
        return (
            "the server's certificate does not verify (SSLCertVerificationError: "
            f"{reason.verify_message}); for a server of an internal CA, give its CA "
            "certificate: --upstream-ca FILE"
        )
    return type(reason).__name__
