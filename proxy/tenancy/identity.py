"""Which sandbox a client connection belongs to: proxy credentials or address
(docs/configuration.md#sandboxes).

`identify` is pure: the node's methods (`sandboxes.identify`) are tried in a fixed way.
* `proxy_auth`: `Proxy-Authorization: Basic base64(<id>:<token>)`, as a client sends it
  for `HTTPS_PROXY=http://<id>:<token>@proxy:port`. A credential that is present decides
  alone: a wrong one is `AUTH_REQUIRED` (407) even when the address would identify.
* `source_address`: the client address in some sandbox file's `addresses`.
* otherwise `AUTH_REQUIRED` when credentials could have been sent (regular mode with
  `proxy_auth`), else `UNKNOWN` (403 `unknown_sandbox`).

Invariants: the token is compared in constant time (`hmac.compare_digest`, also against
a stand-in when the id is unknown, so timing does not tell which ids exist); neither the
header nor the token ever leaves this module in a result, a log line or an exception.
"""

from __future__ import annotations

import binascii
import hmac
from dataclasses import dataclass
from enum import Enum

from sandbox_egress.proxy.hosts import IPAddress
from sandbox_egress.proxy.tenancy.sandboxes import Identify
from sandbox_egress.proxy.tenancy.tenants import Tenancy

REALM = "egress-proxy"
PROXY_AUTHENTICATE = f'Basic realm="{REALM}"'
_STAND_IN = b"\0" * 32


class Failure(Enum):
    AUTH_REQUIRED = "auth_required"  # 407 with Proxy-Authenticate, nothing else
    UNKNOWN = "unknown_sandbox"  # 403 unknown_sandbox


@dataclass(frozen=True, slots=True)
class Identity:
    sandbox: str | None = None
    failure: Failure | None = None


def credentials(header: str) -> tuple[str, bytes] | None:
    """(id, token) of a `Basic` Proxy-Authorization value, or None when it is not one."""
    scheme, _, encoded = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = binascii.a2b_base64(encoded.strip().encode("ascii"), strict_mode=True)
    except (binascii.Error, UnicodeEncodeError):
        return None
    user, colon, token = decoded.partition(b":")
    if not colon:
        return None
    try:
        return user.decode("utf-8"), token
    except UnicodeDecodeError:
        return None


def identify(
    tenancy: Tenancy, authorization: str | None, address: IPAddress | None, transparent: bool
) -> Identity:
    methods = tenancy.section.identify
    by_credentials = Identify.PROXY_AUTH in methods and not transparent
    if by_credentials and authorization is not None:
        return _by_credentials(tenancy, authorization)
    if Identify.SOURCE_ADDRESS in methods and address is not None:
        claimant = tenancy.claimant(address)
        if claimant is not None:
            return Identity(claimant)
    return Identity(failure=Failure.AUTH_REQUIRED if by_credentials else Failure.UNKNOWN)


def _by_credentials(tenancy: Tenancy, authorization: str) -> Identity:
    refused = Identity(failure=Failure.AUTH_REQUIRED)
    given = credentials(authorization)
    if given is None:
        return refused
    sandbox, token = given
    expected = tenancy.token(sandbox)
    known = expected.reveal().encode("utf-8") if expected is not None else _STAND_IN
    same = hmac.compare_digest(known, token)
    return Identity(sandbox) if same and expected is not None else refused
