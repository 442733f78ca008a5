"""The pure SigV4 core (proxy/clauses/sigv4.py): `sign` against botocore's own signatures, `judge`
on a table of named requests, and generated Authorization values that must never be
re-signed unless they carry the placeholder in a well-formed SigV4 scope.

botocore is the reference: each row builds a request the way boto3 does, signs it with
`SigV4Auth`/`S3SigV4Auth` and the real keys at a fixed time, then replaces its
Authorization with the sandbox's (placeholder key, worthless signature); the proxy's
`sign` with the real keys at the same time must write botocore's Authorization exactly.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from botocore import auth as botocore_auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox_egress.proxy.clauses.sigv4 import (
    EMPTY_SHA256,
    AwsKeys,
    Signing,
    judge,
    payload_hash,
    sign,
)
from sandbox_egress.proxy.clauses.sigv4binding import SigV4Binding
from sandbox_egress.proxy.decision import Reason
from sandbox_egress.proxy.values.secret import Secret

PLACEHOLDER = "AKIAEGRESSPLACEHOLDR"
REAL_ID = "AKIAREALREALREAL0001"
REAL_SECRET = "real/secret+key0123456789abcdefghijklmn"
TOKEN = "FwoGZXIvYXdzEXAMPLEsessiontoken//////////"
NOW = datetime.datetime(2026, 12, 4, 16, 30, 5, tzinfo=datetime.UTC)
BINDING = SigV4Binding(PLACEHOLDER, frozenset({"s3", "sts"}), frozenset({"us-east-1"}))


@dataclass(frozen=True)
class Case:
    name: str
    method: str
    url: str
    service: str
    region: str = "us-east-1"
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    context: dict[str, object] = field(default_factory=dict)
    token: str | None = None
    extra: tuple[tuple[str, str], ...] = ()  # fields added after signing (duplicates)


CASES = [
    Case("s3 get, empty body hashed", "GET", "https://bkt.s3.amazonaws.com/a/key.txt", "s3"),
    Case(
        "s3 key with encoded characters and a query",
        "GET",
        "https://bkt.s3.amazonaws.com/dir/a%20b%2Bc~d?versionId=3%2F4&list-type=2&prefix=",
        "s3",
    ),
    Case(
        "s3 put, unsigned payload",
        "PUT",
        "https://bkt.s3.amazonaws.com/obj",
        "s3",
        headers={"Content-Type": "text/plain", "Content-MD5": "XrY7u+Ae7tCTyyK7j1rNww=="},
        body=b"hello world",
        context={"payload_signing_enabled": False},
    ),
    Case(
        "s3 put, streaming unsigned payload with a trailer (boto3's default)",
        "PUT",
        "https://bkt.s3.us-east-1.amazonaws.com/obj",
        "s3",
        headers={
            "Content-Encoding": "aws-chunked",
            "X-Amz-Trailer": "x-amz-checksum-crc32",
            "X-Amz-Decoded-Content-Length": "11",
            "Transfer-Encoding": "chunked",
            "Expect": "100-continue",
            "User-Agent": "Boto3/1.40 md/Botocore#1.40",
        },
        body=b"b\r\nhello world\r\n0\r\nx-amz-checksum-crc32:DUoRhQ==\r\n\r\n",
        context={"checksum": {"request_algorithm": {"in": "trailer", "name": "crc32"}}},
    ),
    Case(
        "s3 put, signed payload and a session token",
        "PUT",
        "https://bkt.s3.amazonaws.com/obj",
        "s3",
        body=b"payload bytes",
        token=TOKEN,
    ),
    Case(
        "sts query api, no declared payload hash",
        "POST",
        "https://sts.us-east-1.amazonaws.com/",
        "sts",
        headers={"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"},
        body=b"Action=GetCallerIdentity&Version=2011-06-15",
    ),
    Case(
        "non-s3 path: dot segments removed, segments encoded twice",
        "GET",
        "https://sts.us-east-1.amazonaws.com/a/./b/../c%20d/",
        "sts",
    ),
    Case(
        "values trimmed, runs of spaces collapsed, names in odd case",
        "GET",
        "https://bkt.s3.amazonaws.com/k",
        "s3",
        headers={"X-Amz-Meta-Note": "  two   spaces  here ", "x-AMZ-meta-Other": "v"},
    ),
    Case(
        "a name sent twice: values joined in order",
        "GET",
        "https://bkt.s3.amazonaws.com/k",
        "s3",
        extra=(("X-Amz-Meta-Twice", "first"), ("X-Amz-Meta-Twice", "second")),
    ),
]


def _botocore(case: Case, monkeypatch: pytest.MonkeyPatch) -> AWSRequest:
    """The request as boto3 would send it with the real keys at NOW."""
    monkeypatch.setattr(botocore_auth, "get_current_datetime", lambda: NOW.replace(tzinfo=None))
    request = AWSRequest(method=case.method, url=case.url, headers=case.headers, data=case.body)
    for name, value in case.extra:
        request.headers.add_header(name, value)
    request.context.update(case.context)
    signer: Callable[..., botocore_auth.SigV4Auth] = (
        botocore_auth.S3SigV4Auth if case.service == "s3" else botocore_auth.SigV4Auth
    )
    signer(Credentials(REAL_ID, REAL_SECRET, case.token), case.service, case.region).add_auth(
        request
    )
    return request


def _sandbox_fields(request: AWSRequest) -> tuple[tuple[bytes, bytes], ...]:
    """What the sandbox sends: botocore's request with the placeholder's worthless signature
    (an older date too: the proxy writes its own)."""
    fields = []
    for name, value in request.headers.raw_items():
        if name.lower() == "authorization":
            value = value.replace(REAL_ID, PLACEHOLDER).replace("20261204", "20261203")
            value = value[: -len("0" * 64)] + "0" * 64
        elif name.lower() == "x-amz-date":
            value = "20261203T000000Z"
        elif name.lower() == "x-amz-security-token":
            continue  # the sandbox holds no token
        fields.append((name.encode(), value.encode()))
    return tuple(fields)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_sign_writes_botocores_signature(case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    reference = _botocore(case, monkeypatch)
    sent = _sandbox_fields(reference)
    split = reference.url.split("/", 3)
    host, target = split[2], "/" + (split[3] if len(split) > 3 else "")
    signing = judge(BINDING, sent, target)
    assert isinstance(signing, Signing), signing
    assert (signing.service, signing.region) == (case.service, case.region)
    declared = "x-amz-content-sha256" in {n.lower() for n in reference.headers}
    assert (signing.payload is None) is not declared
    keys = AwsKeys(REAL_ID, Secret(REAL_SECRET), Secret(case.token) if case.token else None)
    body_hash = None if declared else payload_hash(case.body)
    out = sign(signing, keys, case.method, target, sent, host, NOW, body_hash)
    written = {n.decode().lower(): v.decode() for n, v in out}
    assert written["authorization"] == reference.headers["Authorization"]
    assert written["x-amz-date"] == "20261204T163005Z"
    assert written.get("x-amz-security-token") == case.token
    assert [n.lower() for n, _ in out].count(b"authorization") == 1


def test_sign_needs_a_payload_hash() -> None:
    signing = Signing("us-east-1", "sts", None)
    with pytest.raises(ValueError):
        sign(signing, AwsKeys(REAL_ID, Secret(REAL_SECRET)), "GET", "/", (), "h", NOW)


def _auth(akid: str = PLACEHOLDER, scope: str = "20261204/us-east-1/s3/aws4_request") -> bytes:
    return (
        f"AWS4-HMAC-SHA256 Credential={akid}/{scope}, "
        f"SignedHeaders=host;x-amz-date, Signature={'ab' * 32}"
    ).encode()


JUDGED = [
    ("the placeholder's signature", [(b"Authorization", _auth())], "/k", "s3"),
    ("no Authorization at all", [], "/k", Reason.CREDENTIAL_REQUIRED),
    ("the sandbox's own key", [(b"Authorization", _auth("AKIAOWNKEY0000000000"))], "/k",
     Reason.CREDENTIAL_REQUIRED),
    ("a second Authorization beside the placeholder's",
     [(b"Authorization", _auth()), (b"authorization", b"Bearer own")], "/k",
     Reason.CREDENTIAL_REQUIRED),
    ("a bearer token", [(b"Authorization", b"Bearer AKIAEGRESSPLACEHOLDR")], "/k",
     Reason.CREDENTIAL_REQUIRED),
    ("SigV4A", [(b"Authorization", b"AWS4-ECDSA-P256-SHA256 Credential=" + PLACEHOLDER.encode()
                 + b"/20261204/s3/aws4_request, SignedHeaders=host, Signature=00")], "/k",
     Reason.SIGV4_UNSUPPORTED),
    ("a chunk-signed streaming payload",
     [(b"Authorization", _auth()),
      (b"x-amz-content-sha256", b"STREAMING-AWS4-HMAC-SHA256-PAYLOAD")], "/k",
     Reason.SIGV4_UNSUPPORTED),
    ("an unreadable payload hash", [(b"Authorization", _auth()),
                                    (b"X-Amz-Content-SHA256", b"E3B0")], "/k",
     Reason.SIGV4_UNSUPPORTED),
    ("two payload hashes", [(b"Authorization", _auth()),
                            (b"x-amz-content-sha256", EMPTY_SHA256.encode()),
                            (b"x-amz-content-sha256", b"UNSIGNED-PAYLOAD")], "/k",
     Reason.SIGV4_UNSUPPORTED),
    ("a presigned URL", [], "/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=x",
     Reason.SIGV4_UNSUPPORTED),
    ("a presigned URL beside a header signature", [(b"Authorization", _auth())],
     "/k?a=1&x-amz-signature=00", Reason.SIGV4_UNSUPPORTED),
    ("a service the binding does not name",
     [(b"Authorization", _auth(scope="20261204/us-east-1/iam/aws4_request"))], "/",
     Reason.SIGV4_SCOPE_DENIED),
    ("a region the binding does not name",
     [(b"Authorization", _auth(scope="20261204/eu-west-1/s3/aws4_request"))], "/",
     Reason.SIGV4_SCOPE_DENIED),
    ("a scope of four parts",
     [(b"Authorization", _auth(scope="20261204/us-east-1/s3"))], "/",
     Reason.CREDENTIAL_REQUIRED),
    ("a scope not ending aws4_request",
     [(b"Authorization", _auth(scope="20261204/us-east-1/s3/aws5_request"))], "/",
     Reason.CREDENTIAL_REQUIRED),
    ("a scheme in lower case", [(b"Authorization", _auth().lower())], "/",
     Reason.CREDENTIAL_REQUIRED),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "fields", "target", "expected"), JUDGED, ids=[j[0] for j in JUDGED]
)
def test_judge(name: str, fields: list[tuple[bytes, bytes]], target: str, expected: object) -> None:
    judged = judge(BINDING, tuple(fields), target)
    if isinstance(expected, Reason):
        assert judged is expected
    else:
        assert isinstance(judged, Signing) and judged.service == expected


_AUTH_TEXT = st.text(
    alphabet=st.sampled_from("AWS4-HMAC-SHA256 Credential=/,;=SignedHeaders Signature aws4_request"
                             "AKIAEGRESSPLACEHOLDR20261204us-east-1s3\t\r\n\x00é"),
    max_size=200,
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(value=st.one_of(_AUTH_TEXT.map(str.encode), st.binary(max_size=200)))
def test_garbled_authorization_is_never_resigned(value: bytes) -> None:
    """Whatever the value, the proxy re-signs only a well-formed placeholder scope it admits."""
    judged = judge(BINDING, ((b"Authorization", value),), "/")
    if isinstance(judged, Signing):
        assert value.startswith(b"AWS4-HMAC-SHA256 ") or value.strip().startswith(
            b"AWS4-HMAC-SHA256 "
        )
        assert b"Credential=" + PLACEHOLDER.encode() + b"/" in value
        assert judged.service in BINDING.services and judged.region in BINDING.regions
    else:
        assert judged in {
            Reason.CREDENTIAL_REQUIRED,
            Reason.SIGV4_UNSUPPORTED,
            Reason.SIGV4_SCOPE_DENIED,
        }


@settings(max_examples=200, deadline=None)
@given(
    names=st.lists(
        st.sampled_from(["Authorization", "AUTHORIZATION", "authorization", "AuThOrIzAtIoN"]),
        min_size=2,
        max_size=4,
    )
)
def test_any_second_authorization_in_any_case_is_refused(names: list[str]) -> None:
    fields = tuple((n.encode(), _auth()) for n in names)
    assert judge(BINDING, fields, "/") is Reason.CREDENTIAL_REQUIRED


@settings(max_examples=200, deadline=None)
@given(
    fields=st.lists(
        st.tuples(
            st.sampled_from([b"X-Amz-Date", b"x-amz-date", b"X-Amz-Security-Token", b"Host",
                             b"X-Amz-Meta-A", b"x-amz-meta-a", b"authorization"]),
            st.binary(min_size=0, max_size=20).filter(lambda b: b"\n" not in b),
        ),
        max_size=6,
    )
)  # fmt: skip
def test_sign_writes_one_date_one_authorization_whatever_was_sent(
    fields: list[tuple[bytes, bytes]],
) -> None:
    signing = Signing("us-east-1", "s3", EMPTY_SHA256)
    out = sign(signing, AwsKeys(REAL_ID, Secret(REAL_SECRET)), "GET", "/", tuple(fields), "h", NOW)
    lowered = [n.lower() for n, _ in out]
    assert lowered.count(b"authorization") == 1
    assert lowered.count(b"x-amz-date") == 1
    assert b"x-amz-security-token" not in lowered  # no session token: none sent
    assert dict((n.lower(), v) for n, v in out)[b"x-amz-date"] == b"20261204T163005Z"


# -- the request stage: scope judged after rules, before anything goes upstream ----------

_CONFIG = {
    "credentials": {
        "aws-prod": {"aws": {"access_key_id": REAL_ID, "secret_access_key": "${AWS_SECRET}"}}
    },
    "network": {
        "allowlist": [
            {
                "domain": "*.amazonaws.test",
                "credential": {
                    "name": "aws-prod",
                    "as": "sigv4",
                    "placeholder_access_key_id": PLACEHOLDER,
                    "services": ["s3", "sts"],
                    "regions": ["us-east-1"],
                },
                "deny": [{"methods": ["DELETE"]}],
            }
        ]
    },
}


def _decide(method: str, *fields: tuple[bytes, bytes]) -> Any:
    import asyncio

    from sandbox_egress.proxy.config.loader import parse
    from sandbox_egress.proxy.hosts import canonical_host
    from sandbox_egress.proxy.policy import Policy
    from sandbox_egress.proxy.stages import ConnectionFacts, RequestAsk, decide_request
    from sandbox_egress.proxy.targets import RequestNames

    policy = Policy(parse(_CONFIG, "env.yaml", {"AWS_SECRET": REAL_SECRET}))

    async def resolve(name: str, port: int) -> list[Any]:
        return [canonical_host("93.184.216.34").ip]

    host = "bkt.s3.amazonaws.test"
    names = RequestNames(False, host, 443, host, None, True, None, method=method, path="/k")
    ask = RequestAsk(method.encode(), ((b"Host", host.encode()), *fields), names, True)
    return asyncio.run(decide_request(policy, resolve, ConnectionFacts(), ask))


def test_the_stage_hands_a_placeholder_signature_to_the_signer() -> None:
    answer = _decide("GET", (b"Authorization", _auth()))
    assert answer.decision.allowed and answer.sigv4 == Signing("us-east-1", "s3", None)


@pytest.mark.parametrize(
    ("method", "auth", "reason"),
    [
        ("GET", _auth(scope="20261204/eu-west-1/s3/aws4_request"), Reason.SIGV4_SCOPE_DENIED),
        ("GET", _auth("AKIAOWNKEY0000000000"), Reason.CREDENTIAL_REQUIRED),
        ("DELETE", _auth(scope="20261204/eu-west-1/s3/aws4_request"), Reason.RULE_DENIED),
    ],
    ids=["scope", "own key", "rules judged first"],
)
def test_the_stage_refuses_before_any_lookup(method: str, auth: bytes, reason: Reason) -> None:
    answer = _decide(method, (b"Authorization", auth))
    assert (answer.decision.reason, answer.pin, answer.sigv4) == (reason, None, None)


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"placeholder_access_key_id": "short"}, "placeholder_access_key_id"),
        ({"services": []}, "services"),
        ({"regions": ["US EAST"]}, "regions"),
        ({"signed": True}, "signed"),
    ],
)
def test_a_bad_sigv4_binding_is_a_configuration_error(change: dict[str, Any], where: str) -> None:
    import copy

    from sandbox_egress.proxy.config.loader import ConfigError, parse

    config = copy.deepcopy(_CONFIG)
    config["network"]["allowlist"][0]["credential"].update(change)  # type: ignore[index]
    with pytest.raises(ConfigError) as raised:
        parse(config, "env.yaml", {"AWS_SECRET": REAL_SECRET})
    assert f"credential.{where}" in str(raised.value)
    assert REAL_SECRET not in str(raised.value)
