"""SigV4 re-signing end to end (issue 32): boto3 holding only the placeholder key, through
the real proxy, against moto's server checking every signature.

moto's server runs in the upstream namespace behind TLS (the test PKI) with
`INITIAL_NO_AUTH_ACTION_COUNT=3`: the three IAM calls that create the agent's user, key
and policy go unauthenticated (straight to moto, from the upstream namespace), then every
request must carry a valid SigV4 signature of a known key (checked first: a wrong secret
is refused `SignatureDoesNotMatch`). The proxy holds the real keys in files; boto3 runs as
the sandbox would, with default settings and `AKIAEGRESSPLACEHOLDR` plus a fake secret:
`put_object` (boto3's default aws-chunked body with a trailing checksum, an unsigned
streaming payload), `get_object` returning the bytes, `sts.get_caller_identity` returning
the agent's identity, and a request signed for another region refused
`sigv4_scope_denied` with nothing reaching moto.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import pytest

from testbed.expect import assert_refused
from testbed.moto import (
    AUTHORITY,
    MOTO_PORT,
    PLACEHOLDER,
    Moto,
    boto3_env,
    signed_by_the_sandbox,
)
from testbed.netns import UPSTREAM_IP
from tests.e2e.conftest import PrivateProxy

pytestmark = pytest.mark.netns

AWS_CLIENT = Path(__file__).with_name("aws_client.py")


def test_boto3_with_the_placeholder_key_gets_the_real_identity(
    moto: Moto, private_proxy: Callable[..., PrivateProxy], e2e_dir: Path
) -> None:
    assert moto.wrong_signature == "SignatureDoesNotMatch"  # moto checks every signature
    proxy = private_proxy("sigv4", moto.config(e2e_dir)).view
    env = boto3_env(proxy, e2e_dir / "aws-home", PLACEHOLDER, "fake-secret-of-the-sandbox")
    body = "bytes the agent uploads " * 40
    before = moto.requests()
    ran = subprocess.run(
        [sys.executable, str(AWS_CLIENT), "agent-bucket", body],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    out = json.loads(ran.stdout)
    assert out["create_bucket"] == {"ok": True}
    assert out["put_object"] == {"ok": True}
    assert out["payload"] == ["STREAMING-UNSIGNED-PAYLOAD-TRAILER"]  # boto3's default
    assert out["get_object"] == {"ok": body}
    assert out["identity"] == {"ok": "arn:aws:iam::123456789012:user/agent"}
    assert out["wrong_region"]["status"] == 403
    assert out["wrong_region"]["denied"] == "sigv4_scope_denied"
    # create, put, get, identity reached moto; the wrong-region request did not
    assert moto.requests() - before == 4
    # The keys were fetched: the sandbox sending the real secret anywhere is refused.
    leak = proxy.https(AUTHORITY, "/", [("X-Note", f"k={moto.secret}")])
    assert_refused(leak, "secret_elsewhere", host=UPSTREAM_IP)
    # ... in any spelling (issue 43): base64, and JSON-escaped (`\/`) in the target.
    spelled = base64.b64encode(moto.secret.encode()).decode()
    leak = proxy.https(AUTHORITY, "/", [("X-Note", spelled)])
    assert_refused(leak, "secret_elsewhere", host=UPSTREAM_IP)
    escaped = quote(json.dumps(moto.secret)[1:-1].replace("/", "\\/"), safe="")
    leak = proxy.https(AUTHORITY, f"/?q={escaped}")
    assert_refused(leak, "secret_elsewhere", host=UPSTREAM_IP)
    assert moto.requests() - before == 4
    wrote = [proxy.proxy_stdout, proxy.proxy_stderr, proxy.audit_log.path]
    for text in [ran.stdout, ran.stderr, *(p.read_text() for p in wrote)]:
        assert moto.secret not in text  # never in what the sandbox reads, nor in any log
    audited = [r for r in proxy.audit_log.all() if r["method"] == "PUT"]
    assert audited and all(r["injected"] == ["Authorization"] for r in audited)


def test_a_binding_naming_buckets_resigns_only_for_them(
    moto: Moto, private_proxy: Callable[..., PrivateProxy], e2e_dir: Path
) -> None:
    """Issue 43: an s3 binding re-signed for any bucket. With `buckets:` boto3's calls to
    its own bucket work; to another (path style, as boto3 addresses an IP endpoint) and
    `ListBuckets` (no bucket) are `sigv4_scope_denied`, and none of them reaches moto."""
    config = moto.config(e2e_dir, ", buckets: [scoped-*]")
    proxy = private_proxy("sigv4-buckets", config).view
    env = boto3_env(proxy, e2e_dir / "aws-home", PLACEHOLDER, "fake-secret-of-the-sandbox")
    body = "scoped bytes " * 10
    before = moto.requests()
    ran = subprocess.run(
        [sys.executable, str(AWS_CLIENT), "scoped-bucket", body, "someone-elses-bucket"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    out = json.loads(ran.stdout)
    assert out["create_bucket"] == {"ok": True}
    assert out["put_object"] == {"ok": True}
    assert out["get_object"] == {"ok": body}
    assert out["identity"] == {"ok": "arn:aws:iam::123456789012:user/agent"}  # sts: unaffected
    for call in ("other_list", "other_get", "list_buckets"):
        assert (out[call]["status"], out[call]["denied"]) == (403, "sigv4_scope_denied"), call
    # create, put, get, identity reached moto; the wrong region and the three others did not
    assert moto.requests() - before == 4
    denied = [r for r in proxy.audit_log.all() if r["reason"] == "sigv4_scope_denied"]
    assert len(denied) == 4


@pytest.mark.parametrize(
    ("path", "headers", "reason"),
    [
        ("/agent-bucket/held.txt", signed_by_the_sandbox(hashlib.sha256(b"other").hexdigest()),
         "bad_request"),
        ("/agent-bucket/held.txt", signed_by_the_sandbox("STREAMING-AWS4-HMAC-SHA256-PAYLOAD"),
         "sigv4_unsupported"),
        ("/agent-bucket/held.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=00", [],
         "sigv4_unsupported"),
        ("/agent-bucket/held.txt",
         signed_by_the_sandbox(hashlib.sha256(b"payload").hexdigest(), "us-east-1/iam"),
         "sigv4_scope_denied"),
    ],
    ids=["declared hash differs from the body", "chunk-signed payload", "presigned URL",
         "a service not bound"],
)  # fmt: skip
def test_what_cannot_be_resigned_never_reaches_moto(
    moto: Moto,
    private_proxy: Callable[..., PrivateProxy],
    e2e_dir: Path,
    path: str,
    headers: list[tuple[str, str]],
    reason: str,
) -> None:
    proxy = private_proxy("sigv4-refused", moto.config(e2e_dir)).view
    before = moto.requests()
    authority = AUTHORITY
    response = proxy.https(authority, path, headers, method="PUT", body=b"payload")

    assert_refused(response, reason, host=UPSTREAM_IP)
    assert moto.requests() == before


def test_the_placeholder_key_sent_to_another_host_is_placeholder_elsewhere(
    moto: Moto, private_proxy: Callable[..., PrivateProxy], e2e_dir: Path
) -> None:
    """Issue 43: the placeholder access key id is a placeholder like any other
    (docs/decisions.md D362): a SigV4 request holding it, or a presigned URL naming it, sent to a host the
    binding is not on (here a name for moto's own address) is refused and reaches nothing."""
    config = moto.config(e2e_dir) + "    - domain: other.allowed.test\n"
    proxy = private_proxy("sigv4-elsewhere", config).view
    before, authority = moto.requests(), f"other.allowed.test:{MOTO_PORT}"
    signed = proxy.https(authority, "/bucket/k", signed_by_the_sandbox("x"))
    presigned = proxy.https(authority, f"/k?X-Amz-Credential={PLACEHOLDER}%2F20261204")

    assert_refused(signed, "placeholder_elsewhere", host="other.allowed.test")
    assert_refused(presigned, "placeholder_elsewhere", host="other.allowed.test")
    assert moto.requests() == before


def test_a_held_body_holding_the_fetched_secret_is_secret_elsewhere(
    moto: Moto, private_proxy: Callable[..., PrivateProxy], e2e_dir: Path
) -> None:
    """Issue 43: a body the proxy reads (here a SigV4 body it holds to hash) is searched
    like the headers: the real secret in it, in any spelling, is refused and reaches
    nothing."""
    proxy = private_proxy("sigv4-body", moto.config(e2e_dir)).view
    authority, empty = AUTHORITY, hashlib.sha256(b"").hexdigest()
    made = proxy.https(authority, "/body-bucket", signed_by_the_sandbox(empty), method="PUT")
    assert made.status == 200, made.describe()  # the keys are fetched: the secret is known
    before = moto.requests()
    for body in (
        f"note={moto.secret}".encode(),
        json.dumps({"k": base64.b64encode(moto.secret.encode()).decode()}).encode(),
    ):
        put = proxy.https(
            authority,
            "/body-bucket/k",
            signed_by_the_sandbox(hashlib.sha256(body).hexdigest()),
            method="PUT",
            body=body,
        )
        assert_refused(put, "secret_elsewhere", host=UPSTREAM_IP)
    assert moto.requests() == before


def test_a_declared_hash_matching_the_held_body_is_signed(
    moto: Moto, private_proxy: Callable[..., PrivateProxy], e2e_dir: Path
) -> None:
    proxy = private_proxy("sigv4-held", moto.config(e2e_dir)).view
    authority = AUTHORITY
    body = b"a body whose hash the sandbox declared"
    empty = hashlib.sha256(b"").hexdigest()
    made = proxy.https(authority, "/held-bucket", signed_by_the_sandbox(empty), method="PUT")
    assert made.status == 200, made.describe()
    put = proxy.https(
        authority,
        "/held-bucket/k",
        signed_by_the_sandbox(hashlib.sha256(body).hexdigest()),
        method="PUT",
        body=body,
    )
    assert put.status == 200, put.describe()  # held, verified, signed: moto accepted it
    got = proxy.https(authority, "/held-bucket/k", signed_by_the_sandbox(empty))
    assert (got.status, got.body) == (200, body)


@pytest.mark.parametrize("ref", ["refs/heads/main", "refs/heads/agent/fix"])
def test_a_push_whose_body_sigv4_holds_is_judged_by_git_push(
    moto: Moto, private_proxy: Callable[..., PrivateProxy], e2e_dir: Path, ref: str
) -> None:
    """Issue 45: an entry with `git.push` and an `as: sigv4` credential (CodeCommit's
    shape). A receive-pack whose body SigV4 holds to hash was signed and sent unjudged
    (the push gate was never reached); its command list is now read from the held body:
    a ref outside `git.push` is refused, nothing reaching the upstream, and an allowed
    one is signed and sent whole."""
    git = '\n      git: {push: [{repo: acme/web, refs: ["refs/heads/agent/**"]}]}\n'
    proxy = private_proxy("sigv4-git", moto.config(e2e_dir).rstrip("\n") + git).view
    before = moto.requests()
    authority = AUTHORITY
    line = f"{'0' * 40} {'b' * 40} {ref}\0report-status\n".encode()
    body = f"{len(line) + 4:04x}".encode() + line + b"0000"
    headers = [*signed_by_the_sandbox(hashlib.sha256(body).hexdigest()),
               ("Content-Type", "application/x-git-receive-pack-request")]  # fmt: skip
    pushed = proxy.https(
        authority, "/acme/web.git/git-receive-pack", headers, method="POST", body=body
    )

    if ref == "refs/heads/main":
        assert pushed.header("X-Egress-Denied") == "git_push_denied", pushed.describe()
        assert f"ng {ref}".encode() in pushed.body
        assert moto.requests() == before
    else:  # signed and sent: moto, which has no git, answers it (its 500, not the proxy's)
        assert pushed.header("X-Egress-Denied") is None, pushed.describe()
        server = pushed.header("Server") or ""
        assert (pushed.status, server.split("/")[0]) == (500, "Werkzeug"), pushed.describe()
