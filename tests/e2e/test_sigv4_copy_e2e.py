"""End to end, `buckets:` and the buckets a request reads from (D428): the real proxy,
moto's server checking every signature (the `moto` fixture, testbed.moto).

A binding naming `scoped-*` re-signed a `CopyObject` into its own bucket whose
`x-amz-copy-source` named another: the proxy's keys copied a bucket it was told not to
touch into one the sandbox reads. A copy source is a bucket the request addresses too.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from testbed.expect import assert_refused
from testbed.moto import AUTHORITY, ENDPOINT, Moto, signed_by_the_sandbox
from testbed.netns import UPSTREAM_IP, Topology
from testbed.testca import Pki
from tests.e2e.conftest import PrivateProxy

pytestmark = pytest.mark.netns

PRIVATE = b"bytes of a bucket the binding does not name"

# Run in the upstream namespace with the real keys: a bucket no sandbox may read.
PLANT = r"""
import sys, boto3
s3 = boto3.client("s3", region_name="us-east-1", endpoint_url=sys.argv[1], verify=sys.argv[2],
                  aws_access_key_id=sys.argv[3], aws_secret_access_key=sys.argv[4])
s3.create_bucket(Bucket="private-bucket")
s3.put_object(Bucket="private-bucket", Key="secret.txt", Body=sys.argv[5].encode())
"""

EMPTY = hashlib.sha256(b"").hexdigest()


@pytest.mark.parametrize(
    "source",
    [
        "private-bucket/secret.txt",
        "/private-bucket/secret.txt",
        "private-bucket/secret.txt?versionId=null",
        "%2Fprivate-bucket%2Fsecret.txt",
        "arn:aws:s3:us-east-1:123456789012:accesspoint/ap/object/secret.txt",
    ],
)
def test_a_copy_from_a_bucket_not_named_is_refused(
    moto: Moto,
    private_proxy: Callable[..., PrivateProxy],
    e2e_dir: Path,
    topology: Topology,
    pki: Pki,
    source: str,
) -> None:
    planted = subprocess.run(
        topology.exec_prefix(topology.ns_upstream)
        + [sys.executable, "-c", PLANT, ENDPOINT, str(pki.ca_cert), moto.key_id, moto.secret,
           PRIVATE.decode()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert planted.returncode == 0 or "BucketAlreadyOwnedByYou" in planted.stderr, planted.stderr
    proxy = private_proxy("sigv4-copy", moto.config(e2e_dir, ", buckets: [scoped-*]"))
    view = proxy.view
    made = view.https(AUTHORITY, "/scoped-copy", signed_by_the_sandbox(EMPTY), method="PUT")
    assert made.status == 200, made.describe()
    before = moto.requests()
    copy = [*signed_by_the_sandbox(EMPTY), ("x-amz-copy-source", source)]
    refused = view.https(AUTHORITY, "/scoped-copy/stolen.txt", copy, method="PUT")
    assert_refused(refused, "sigv4_scope_denied", host=UPSTREAM_IP)
    assert moto.requests() == before  # nothing reached moto
    got = view.https(AUTHORITY, "/scoped-copy/stolen.txt", signed_by_the_sandbox(EMPTY))
    assert got.status == 404 and PRIVATE not in got.body


def test_a_copy_between_named_buckets_is_resigned(
    moto: Moto,
    private_proxy: Callable[..., PrivateProxy],
    e2e_dir: Path,
) -> None:
    view = private_proxy("sigv4-copy-ok", moto.config(e2e_dir, ", buckets: [scoped-*]")).view
    body = b"the agent's own bytes"
    assert (
        view.https(AUTHORITY, "/scoped-a", signed_by_the_sandbox(EMPTY), method="PUT").status == 200
    )
    put = view.https(
        AUTHORITY, "/scoped-a/own.txt",
        signed_by_the_sandbox(hashlib.sha256(body).hexdigest()), method="PUT", body=body,
    )  # fmt: skip
    assert put.status == 200, put.describe()
    copy = [*signed_by_the_sandbox(EMPTY), ("x-amz-copy-source", "/scoped-a/own.txt")]
    copied = view.https(AUTHORITY, "/scoped-a/copy.txt", copy, method="PUT")
    assert copied.status == 200, copied.describe()
    got = view.https(AUTHORITY, "/scoped-a/copy.txt", signed_by_the_sandbox(EMPTY))
    assert (got.status, got.body) == (200, body)
