"""`buckets:` on a `sigv4` binding (issue 43, D343): the proxy re-signs an S3
request only for the buckets the operator names, virtual-hosted or path style; any other
bucket, or a request that names none (`ListBuckets`), is `sigv4_scope_denied`. Other
services of the binding are unaffected."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox_egress.proxy.clauses.s3bucket import s3_bucket
from sandbox_egress.proxy.clauses.sigv4 import Signing, judge
from sandbox_egress.proxy.clauses.sigv4binding import SigV4Binding
from sandbox_egress.proxy.config.loader import ConfigError, parse
from sandbox_egress.proxy.decision import Reason

PLACEHOLDER = "AKIAEGRESSPLACEHOLDR"
BINDING = SigV4Binding(
    PLACEHOLDER,
    frozenset({"s3", "sts"}),
    frozenset({"us-east-1"}),
    frozenset({"agent-bucket", "logs-*"}),
)


def auth(service: str = "s3") -> tuple[tuple[bytes, bytes], ...]:
    value = (
        f"AWS4-HMAC-SHA256 Credential={PLACEHOLDER}/20261204/us-east-1/{service}/aws4_request, "
        f"SignedHeaders=host;x-amz-date, Signature={'ab' * 32}"
    )
    return ((b"Authorization", value.encode()),)


DENIED = Reason.SIGV4_SCOPE_DENIED
CASES = [
    # (id, host, target, service, expected: a Signing's service or the refusal)
    ("path-style-named", "s3.us-east-1.amazonaws.com", "/agent-bucket/k.txt", "s3", "s3"),
    ("path-style-glob", "s3.amazonaws.com", "/logs-2026/k", "s3", "s3"),
    ("path-style-bucket-alone", "s3.amazonaws.com", "/agent-bucket", "s3", "s3"),
    ("path-style-bucket-query", "s3.amazonaws.com", "/agent-bucket?list-type=2", "s3", "s3"),
    ("path-style-other", "s3.us-east-1.amazonaws.com", "/other-bucket/k.txt", "s3", DENIED),
    ("path-style-percent-encoded-other", "s3.amazonaws.com", "/%6Fther-bucket/k", "s3", DENIED),
    ("path-style-percent-encoded-named", "s3.amazonaws.com", "/%61gent-bucket/k", "s3", "s3"),
    ("path-style-prefix-only", "s3.amazonaws.com", "/agent-bucket-2/k", "s3", DENIED),
    ("path-style-case", "s3.amazonaws.com", "/Agent-Bucket/k", "s3", DENIED),
    ("list-buckets", "s3.amazonaws.com", "/", "s3", DENIED),
    ("empty-first-segment", "s3.amazonaws.com", "//agent-bucket/k", "s3", DENIED),
    ("an-ip-endpoint", "198.18.1.2", "/agent-bucket/k", "s3", "s3"),
    ("virtual-hosted-named", "agent-bucket.s3.us-east-1.amazonaws.com", "/k", "s3", "s3"),
    ("virtual-hosted-legacy", "agent-bucket.s3.amazonaws.com", "/k", "s3", "s3"),
    ("virtual-hosted-dash-region", "agent-bucket.s3-us-west-2.amazonaws.com", "/k", "s3", "s3"),
    ("virtual-hosted-dualstack", "logs-a.s3.dualstack.us-east-1.amazonaws.com", "/", "s3", "s3"),
    ("virtual-hosted-other", "other-bucket.s3.us-east-1.amazonaws.com", "/k", "s3", DENIED),
    ("virtual-hosted-other-path-names-ours", "other-bucket.s3.amazonaws.com",
     "/agent-bucket/k", "s3", DENIED),
    ("virtual-hosted-dotted", "agent.bucket.s3.amazonaws.com", "/k", "s3", DENIED),
    ("virtual-hosted-bucket-like-an-endpoint", "s3-data.s3.amazonaws.com", "/agent-bucket/k",
     "s3", DENIED),
    ("virtual-hosted-bucket-with-an-s3-label", "logs-x.s3.s3.us-east-1.amazonaws.com", "/", "s3",
     "s3"),
    ("another-service-unaffected", "sts.amazonaws.com", "/", "sts", "sts"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("host", "target", "service", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_a_binding_naming_buckets_resigns_only_for_them(
    host: str, target: str, service: str, expected: object
) -> None:
    judged = judge(BINDING, auth(service), target, host)
    if isinstance(expected, Reason):
        assert judged is expected
    else:
        assert judged == Signing("us-east-1", service, None)


def test_a_binding_without_buckets_resigns_for_any() -> None:
    anyone = SigV4Binding(PLACEHOLDER, frozenset({"s3"}), frozenset({"us-east-1"}))
    assert isinstance(judge(anyone, auth(), "/other-bucket/k", "s3.amazonaws.com"), Signing)
    assert isinstance(judge(anyone, auth(), "/", "s3.amazonaws.com"), Signing)


NAME = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=3, max_size=20)


@settings(max_examples=300, deadline=None)
@given(
    bucket=NAME,
    key=st.text(alphabet="abc/._-%~", max_size=20),
    region=st.sampled_from(["", "us-east-1.", "eu-west-1."]),
)
def test_either_style_names_the_same_bucket(bucket: str, key: str, region: str) -> None:
    virtual = s3_bucket(f"{bucket}.s3.{region}amazonaws.com", f"/{key}")
    path = s3_bucket(f"s3.{region}amazonaws.com", f"/{bucket}/{key}")
    assert virtual == path == bucket


_CONFIG: dict[str, Any] = {
    "credentials": {"aws-prod": {"aws": {"access_key_id": "AKIAREAL", "secret_access_key": "s"}}},
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
                    "buckets": ["agent-bucket", "logs-*"],
                },
            }
        ]
    },
}


def test_buckets_are_read_from_the_binding() -> None:
    entry = parse(_CONFIG, "env.yaml", {}).allowlist[0]
    assert entry.sigv4 is not None
    assert entry.sigv4.buckets == {"agent-bucket", "logs-*"}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"buckets": []}, "a non-empty list of bucket names or globs (a-z 0-9 . - * ?)"),
        ({"buckets": ["Agent_Bucket"]}, "a non-empty list of bucket names or globs"),
        ({"buckets": ["[ab]*"]}, "a non-empty list of bucket names or globs"),
        ({"buckets": "agent-bucket"}, "a non-empty list of bucket names or globs"),
        ({"services": ["sts"]}, "buckets: needs s3 among the services"),
    ],
)
def test_bad_buckets_are_a_configuration_error(change: dict[str, Any], message: str) -> None:
    config = copy.deepcopy(_CONFIG)
    config["network"]["allowlist"][0]["credential"].update(change)
    with pytest.raises(ConfigError) as raised:
        parse(config, "env.yaml", {})
    assert [(p.location, p.message[: len(message)]) for p in raised.value.problems] == [
        ("network.allowlist[0].credential.buckets", message)
    ]
