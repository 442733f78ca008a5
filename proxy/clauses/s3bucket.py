"""Which S3 bucket a request addresses, and whether a `sigv4` binding's `buckets:` name it
(docs/configuration.md#sigv4-re-signing-as-sigv4, D343).

S3 reads the bucket from the host first (virtual-hosted style: `<bucket>.s3.<region>.
amazonaws.com`, `<bucket>.s3-<region>...`, `<bucket>.s3.dualstack...`: the labels before
the last `s3` or `s3-*` label are the bucket, so a bucket named `s3-data` or `my.s3.x` is
read whole), else from the first segment of the path (path style:
`s3.<region>.amazonaws.com/<bucket>/<key>`), percent-decoded as S3 decodes it. A server
of its own (MinIO, moto) is read path style unless its host has an `s3` label: its
virtual-hosted names are not told apart (docs/configuration.md says so).

A request also reads the bucket its `x-amz-copy-source` names (`copy_source`, D428):
a binding that names buckets re-signs a copy only when both are named.

Invariants: pure; a request whose bucket cannot be told (no `s3` label and an empty first
segment: `ListBuckets`, `//key`) addresses no bucket, so a binding that names buckets
refuses it; bucket globs match case-sensitively (`fnmatchcase`, `*` and `?` only).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from fnmatch import fnmatchcase
from urllib.parse import unquote

# What a `buckets:` glob may hold: S3 bucket name characters, `*` and `?`.
BUCKET_GLOB = re.compile(r"^[a-z0-9.*?-]{1,255}$")


def s3_bucket(host: str, target: str) -> str | None:
    """The bucket `target` (origin-form) at `host` addresses, or None when none."""
    labels = host.lower().rstrip(".").split(".")
    for index in range(len(labels) - 1, 0, -1):
        if labels[index] == "s3" or labels[index].startswith("s3-"):
            return ".".join(labels[:index])  # virtual-hosted style
    path = target.partition("?")[0]
    if not path.startswith("/"):
        return None
    first = unquote(path[1:].partition("/")[0])
    return first or None


def copy_source(value: bytes) -> str | None:
    """The bucket an `x-amz-copy-source` header (CopyObject, UploadPartCopy) reads from:
    `bucket/key` or `/bucket/key`, percent-decoded as S3 decodes it (D428). An access
    point or Outposts ARN yields its `arn:...` prefix, which no bucket glob matches."""
    text = unquote(value.decode("latin-1").strip())
    return text.lstrip("/").partition("/")[0] or None


def named(bucket: str | None, globs: Iterable[str]) -> bool:
    """Whether `bucket` is one of `globs` (None, no bucket: never)."""
    return bucket is not None and any(fnmatchcase(bucket, glob) for glob in globs)
