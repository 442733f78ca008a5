"""`x-amz-copy-source` names the bucket a copy reads from (D428): read as S3 reads it,
whatever the spelling, so a binding's `buckets:` judge it like the bucket written to."""

from __future__ import annotations

from urllib.parse import quote

from hypothesis import given
from hypothesis import strategies as st

from sandbox_egress.proxy.clauses.s3bucket import copy_source
from sandbox_egress.proxy.clauses.sigv4 import judge
from sandbox_egress.proxy.clauses.sigv4binding import SigV4Binding
from sandbox_egress.proxy.decision import Reason

BUCKETS = st.from_regex(r"[a-z0-9][a-z0-9.-]{1,40}[a-z0-9]", fullmatch=True)
KEYS = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=40)
BINDING = SigV4Binding("AKIAEGRESSPLACEHOLDR", frozenset({"s3"}), frozenset({"us-east-1"}),
                       frozenset({"scoped-*"}))  # fmt: skip
SIGNED = (
    (b"Authorization", b"AWS4-HMAC-SHA256 Credential=AKIAEGRESSPLACEHOLDR/20261204/us-east-1/s3/"
     b"aws4_request, SignedHeaders=host, Signature=" + b"0" * 64),
)  # fmt: skip


@given(BUCKETS, KEYS, st.booleans(), st.booleans())
def test_the_bucket_is_read_whatever_the_spelling(
    bucket: str, key: str, slash: bool, encoded: bool
) -> None:
    value = ("/" if slash else "") + f"{bucket}/{key}"
    spelled = quote(value, safe="" if encoded else "/")
    assert copy_source(spelled.encode()) == bucket


def test_a_copy_from_another_bucket_is_not_resigned() -> None:
    target = "/scoped-a/copy.txt"
    assert judge(BINDING, SIGNED, target, "s3.amazonaws.com") != Reason.SIGV4_SCOPE_DENIED
    for source in (b"private/k", b"/private/k", b"%2Fprivate%2Fk", b"", b"/",
                   b"arn:aws:s3:us-east-1:1:accesspoint/scoped-a/object/k"):  # fmt: skip
        fields = (*SIGNED, (b"x-amz-copy-source", source))
        assert judge(BINDING, fields, target, "s3.amazonaws.com") is Reason.SIGV4_SCOPE_DENIED
    twice = (*SIGNED, (b"x-amz-copy-source", b"scoped-b/k"), (b"X-Amz-Copy-Source", b"private/k"))
    assert judge(BINDING, twice, target, "s3.amazonaws.com") is Reason.SIGV4_SCOPE_DENIED
    fine = (*SIGNED, (b"x-amz-copy-source", b"scoped-b/k"))
    assert judge(BINDING, fine, target, "s3.amazonaws.com") != Reason.SIGV4_SCOPE_DENIED
