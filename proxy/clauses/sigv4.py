"""SigV4 re-signing (docs/configuration.md#sigv4-re-signing-as-sigv4; D206-D209): the
sandbox signs with a placeholder access key id and a worthless secret, the proxy checks the
signature's scope and signs the request again with the real keys and its own clock.

Two pure steps, no mitmproxy:

* `judge` (the request stage, before budgets): the request's SigV4 `Authorization`
  against the entry's `SigV4Binding`: a `Signing` to do later, or the refusal:
  `credential_required` (no signature, another scheme, a garbled one, another access key
  id, a second `Authorization`), `sigv4_unsupported` (SigV4A, chunk-signed streaming
  payloads, presigned URLs, a payload hash it cannot read), `sigv4_scope_denied` (a
  service or region the binding does not name, or an S3 bucket outside its `buckets:`,
  D343).
* `sign` (last, once the keys are fetched and, for a payload without a declared hash,
  the body held): the header fields to send, with `Authorization`, `X-Amz-Date` and
  `X-Amz-Security-Token` written. The algorithm is AWS's, computed the way botocore's
  `SigV4Auth`/`S3SigV4Auth` compute it (tests/proxy/test_sigv4.py compares the two).

Invariants: nothing here logs; no error message or returned reason carries a key; the
signed header list is the proxy's (every field it sends but botocore's unsigned ones), so
a client cannot leave a field it sends outside the signature; the date is the proxy's.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from urllib.parse import quote, unquote_to_bytes

from sandbox_egress.proxy.clauses.base import Head, Ruling
from sandbox_egress.proxy.clauses.s3bucket import copy_source, named, s3_bucket
from sandbox_egress.proxy.clauses.sigv4binding import SigV4Binding
from sandbox_egress.proxy.decision import Decision, Reason
from sandbox_egress.proxy.values.secret import Secret

Fields = tuple[tuple[bytes, bytes], ...]

ALGORITHM = "AWS4-HMAC-SHA256"
UNSIGNED = "UNSIGNED-PAYLOAD"
STREAMING_TRAILER = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
# The payload hashes kept as they are: the body streams, nothing to verify.
STREAMED = frozenset({UNSIGNED, STREAMING_TRAILER})
# botocore's SIGNED_HEADERS_BLACKLIST: hop-by-hop and tracing fields a hop may change.
UNSIGNED_FIELDS = frozenset(
    {
        "baggage",
        "connection",
        "expect",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "traceparent",
        "tracestate",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "user-agent",
        "x-amzn-trace-id",
    }
)
# Written by `sign`: whatever the sandbox sent under these names is replaced.
WRITTEN = frozenset({b"authorization", b"x-amz-date", b"x-amz-security-token"})

_HEX64 = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"[a-z0-9-]{1,64}")  # a region or a service in a credential scope
_DATE = re.compile(r"[0-9]{8}")
_PRESIGNED = re.compile(r"(?:^|&)x-amz-(?:signature|credential|algorithm)=", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Signing:
    """A request the proxy re-signs: its scope, and its declared payload hash (None:
    none declared, so the body is held and hashed before signing)."""

    region: str
    service: str
    payload: str | None


@dataclass(frozen=True, slots=True)
class AwsKeys:
    access_key_id: str
    secret_access_key: Secret
    session_token: Secret | None = None


@dataclass(frozen=True, slots=True)
class Held:
    """A request whose body is held and hashed before it is signed (addons/clauses/sigv4.py)."""

    signing: Signing
    keys: AwsKeys


def head(ask: Head) -> Ruling:
    """The head rule: a request its entry re-signs must carry the placeholder's
    signature, in a scope the binding allows; the part is how it is signed
    (`addons.clauses.sigv4`). Before budgets and any lookup."""
    signing = judge_request(ask.decision, ask.fields, ask.located.path, ask.host)
    if isinstance(signing, Reason):
        return Ruling(Decision.deny(signing, ask.decision.entry))
    return Ruling(ask.decision, signing)


def judge_request(
    decision: Decision, fields: Fields, target: str, host: str
) -> Signing | Reason | None:
    """The SigV4 stage of a request the policy decided: None when its entry signs nothing
    (or nothing is injected: a refusal, a `would_deny`)."""
    entry = decision.entry
    binding = entry.sigv4 if entry is not None and decision.injects else None
    return None if binding is None else judge(binding, fields, target, host)


def judge(binding: SigV4Binding, fields: Fields, target: str, host: str = "") -> Signing | Reason:
    """Whether the proxy re-signs this request to `host` (the decided one), and in which
    scope; else the refusal."""
    query = target.partition("?")[2]
    if query and _PRESIGNED.search(query):
        return Reason.SIGV4_UNSUPPORTED  # a presigned URL: the signature is in the target
    authorizations = [v for n, v in fields if n.lower() == b"authorization"]
    if len(authorizations) != 1:
        return Reason.CREDENTIAL_REQUIRED  # none, or a second one beside the placeholder's
    parsed = parse_authorization(authorizations[0])
    if isinstance(parsed, Reason):
        return parsed
    access_key_id, _date, region, service = parsed
    if access_key_id != binding.placeholder_access_key_id:
        return Reason.CREDENTIAL_REQUIRED  # the sandbox's own key: never re-signed, never sent
    payloads = [v for n, v in fields if n.lower() == b"x-amz-content-sha256"]
    if len(payloads) > 1:
        return Reason.SIGV4_UNSUPPORTED
    payload = payloads[0].decode("latin-1").strip() if payloads else None
    if payload is not None and payload not in STREAMED and not _HEX64.fullmatch(payload):
        return Reason.SIGV4_UNSUPPORTED  # chunk-signed streaming, or unreadable
    if service not in binding.services or region not in binding.regions:
        return Reason.SIGV4_SCOPE_DENIED
    buckets = binding.buckets if service == "s3" else None
    if buckets is not None and not named(s3_bucket(host, target), buckets):
        return Reason.SIGV4_SCOPE_DENIED  # a bucket the binding does not name (D343)
    copied = [copy_source(v) for n, v in fields if n.lower() == b"x-amz-copy-source"]
    if buckets is not None and not all(named(bucket, buckets) for bucket in copied):
        return Reason.SIGV4_SCOPE_DENIED  # copied from a bucket it does not name (D428)
    return Signing(region, service, payload)


def parse_authorization(value: bytes) -> tuple[str, str, str, str] | Reason:
    """(access key id, date, region, service) of a SigV4 `Authorization` value."""
    try:
        text = value.decode("ascii").strip()
    except UnicodeDecodeError:
        return Reason.CREDENTIAL_REQUIRED
    scheme, _, rest = text.partition(" ")
    if scheme.upper().startswith("AWS4-ECDSA"):
        return Reason.SIGV4_UNSUPPORTED  # SigV4A: signed for a region set, with ECDSA
    if scheme != ALGORITHM:
        return Reason.CREDENTIAL_REQUIRED  # not a SigV4 signature: not the placeholder's
    parts: dict[str, str] = {}
    for item in rest.split(","):
        key, equals, content = item.strip().partition("=")
        if not equals or key in parts:
            return Reason.CREDENTIAL_REQUIRED
        parts[key] = content.strip()
    if set(parts) != {"Credential", "SignedHeaders", "Signature"}:
        return Reason.CREDENTIAL_REQUIRED
    scope = parts["Credential"].split("/")
    if len(scope) != 5 or scope[4] != "aws4_request" or not _DATE.fullmatch(scope[1]):
        return Reason.CREDENTIAL_REQUIRED
    if not (_NAME.fullmatch(scope[2]) and _NAME.fullmatch(scope[3])):
        return Reason.CREDENTIAL_REQUIRED
    return scope[0], scope[1], scope[2], scope[3]


# -- signing --------------------------------------------------------------------------------


def sign(
    signing: Signing,
    keys: AwsKeys,
    method: str,
    target: str,
    fields: Fields,
    host: str,
    now: datetime,
    payload_hash: str | None = None,
) -> Fields:
    """`fields` to send, signed for `method` `target` (origin-form) at `host` and time `now`.

    `payload_hash` is the held body's SHA-256 (hex) when the request declared none.
    """
    payload = signing.payload if signing.payload is not None else payload_hash
    if payload is None:
        raise ValueError("a payload hash is needed: declared, or of the held body")
    stamp = now.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    sent = [(n, v) for n, v in fields if n.lower() not in WRITTEN]
    sent.append((b"X-Amz-Date", stamp.encode()))
    if keys.session_token is not None:
        sent.append((b"X-Amz-Security-Token", keys.session_token.reveal().encode()))
    if not any(n.lower() == b"host" for n, _ in sent):
        signed = [("host", host), *_signed(sent)]
    else:
        signed = _signed(sent)
    names = sorted(dict.fromkeys(n for n, _ in signed))
    canonical = "\n".join(
        (
            method.upper(),
            canonical_uri(target.partition("?")[0], signing.service),
            canonical_query(target.partition("?")[2]),
            canonical_headers(signed) + "\n",
            ";".join(names),
            payload,
        )
    )
    scope = f"{stamp[:8]}/{signing.region}/{signing.service}/aws4_request"
    to_sign = "\n".join(
        (ALGORITHM, stamp, scope, hashlib.sha256(canonical.encode("utf-8")).hexdigest())
    )
    key = signing_key(keys.secret_access_key.reveal(), stamp[:8], signing.region, signing.service)
    signature = hmac.new(key, to_sign.encode("utf-8"), hashlib.sha256).hexdigest()
    authorization = (
        f"{ALGORITHM} Credential={keys.access_key_id}/{scope}, "
        f"SignedHeaders={';'.join(names)}, Signature={signature}"
    )
    return (*sent, (b"Authorization", authorization.encode()))


def _signed(fields: Sequence[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    return [
        (name, v.decode("latin-1"))
        for n, v in fields
        if (name := n.decode("latin-1").lower().strip()) not in UNSIGNED_FIELDS
    ]


def canonical_headers(signed: Sequence[tuple[str, str]]) -> str:
    """`name:value` lines, sorted by name; the values of one name joined by `,` in order,
    each trimmed and its runs of spaces collapsed."""
    joined: dict[str, list[str]] = {}
    for name, value in signed:
        joined.setdefault(name, []).append(" ".join(value.split()))
    return "\n".join(f"{name}:{','.join(joined[name])}" for name in sorted(joined))


def canonical_uri(path: str, service: str) -> str:
    """S3 signs the path as sent; every other service its dot-segments removed and each
    segment encoded once more (botocore's `normalize_url_path` and `quote`)."""
    if service == "s3":
        return path or "/"
    return quote(_normalized(path), safe="/~")


def _normalized(path: str) -> str:
    if not path:
        return "/"
    out: list[str] = []
    for segment in path.split("/"):
        if segment == "..":
            if out:
                out.pop()
        elif segment and segment != ".":
            out.append(segment)
    text = "/" + "/".join(out)
    if path.endswith("/") and text != "/":
        text += "/"
    return text


def canonical_query(query: str) -> str:
    """Parameters sorted by encoded name then value, each encoded as AWS does (RFC 3986
    unreserved kept): a query a client already encoded that way is unchanged."""
    if not query:
        return ""
    pairs = []
    for param in query.split("&"):
        name, _, value = param.partition("=")
        pairs.append((_encoded(name), _encoded(value)))
    return "&".join(f"{name}={value}" for name, value in sorted(pairs))


def _encoded(text: str) -> str:
    return quote(unquote_to_bytes(text), safe="-_.~")


@lru_cache(maxsize=64)
def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    """The day's key for a scope (four HMACs; cached, as the scope changes once a day)."""
    key = hmac.new(f"AWS4{secret}".encode(), date.encode(), hashlib.sha256).digest()
    for part in (region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def payload_hash(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()
