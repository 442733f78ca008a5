"""boto3 as an agent runs it, holding only the placeholder key (tests/e2e/test_sigv4_e2e.py).

Default settings throughout: the endpoint (`AWS_ENDPOINT_URL`), the proxy (`HTTPS_PROXY`),
the CA (`AWS_CA_BUNDLE`), the region and the placeholder keys come from the environment
the test builds. A third argument names a bucket the binding must refuse. Prints one
JSON object: what each call returned, or its error code,
HTTP status and `X-Egress-Denied`.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import boto3
import botocore.exceptions


def _call(fn: Any, **kwargs: Any) -> dict[str, Any]:
    try:
        return {"ok": fn(**kwargs)}
    except botocore.exceptions.ClientError as exc:
        meta = exc.response.get("ResponseMetadata", {})
        return {
            "error": exc.response.get("Error", {}).get("Code"),
            "status": meta.get("HTTPStatusCode"),
            "denied": meta.get("HTTPHeaders", {}).get("x-egress-denied"),
        }


def main(argv: list[str]) -> int:
    bucket, body = argv[1], argv[2].encode()
    s3, sts = boto3.client("s3"), boto3.client("sts")
    out: dict[str, Any] = {"payload": []}

    def seen(request: Any, **_: Any) -> None:  # what boto3 declared for each S3 body
        out["payload"].append(request.headers.get("x-amz-content-sha256", b"").decode())

    s3.meta.events.register("before-send.s3.PutObject", seen)
    out["create_bucket"] = _call(lambda **k: bool(s3.create_bucket(**k)), Bucket=bucket)
    out["put_object"] = _call(lambda **k: bool(s3.put_object(**k)), Bucket=bucket, Key="k.txt",
                              Body=body)  # fmt: skip
    got = _call(s3.get_object, Bucket=bucket, Key="k.txt")
    out["get_object"] = {"ok": got["ok"]["Body"].read().decode()} if "ok" in got else got
    who = _call(sts.get_caller_identity)
    out["identity"] = {"ok": who["ok"]["Arn"]} if "ok" in who else who
    west = boto3.client("s3", region_name="eu-west-1")
    # Signed for another region: refused before anything reaches the upstream. A GET: a
    # refused upload of unknown length would close the connection instead (D25).
    out["wrong_region"] = _call(lambda **k: bool(west.list_objects_v2(**k)), Bucket=bucket)
    if len(argv) > 3:  # a bucket the binding does not name (`buckets:`, D343): GETs only
        other = argv[3]
        out["other_list"] = _call(lambda **k: bool(s3.list_objects_v2(**k)), Bucket=other)
        out["other_get"] = _call(lambda **k: bool(s3.get_object(**k)), Bucket=other, Key="k.txt")
        out["list_buckets"] = _call(lambda: bool(s3.list_buckets()))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
