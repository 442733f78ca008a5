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
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

from testbed import nsock, procs
from testbed.expect import assert_refused
from testbed.netns import UPSTREAM_IP, Topology
from testbed.testca import Pki
from tests.e2e.conftest import PrivateProxy

pytestmark = pytest.mark.netns

MOTO_PORT = 9446
ENDPOINT = f"https://{UPSTREAM_IP}:{MOTO_PORT}"
PLACEHOLDER = "AKIAEGRESSPLACEHOLDR"
AWS_CLIENT = Path(__file__).with_name("aws_client.py")

# Run in the upstream namespace: the agent's user, key and policy (unauthenticated), then
# proof that moto checks signatures (a wrong secret refused). Prints the key as JSON.
SETUP = r"""
import json, sys, boto3, botocore.exceptions
common = dict(region_name="us-east-1", endpoint_url=sys.argv[1], verify=sys.argv[2])
iam = boto3.client("iam", aws_access_key_id="AKIAADMINADMINADMIN0", aws_secret_access_key="x",
                   **common)
iam.create_user(UserName="agent")
key = iam.create_access_key(UserName="agent")["AccessKey"]
policy = {"Version": "2012-10-17",
          "Statement": [{"Effect": "Allow", "Action": ["s3:*", "sts:*"], "Resource": "*"}]}
iam.put_user_policy(UserName="agent", PolicyName="all", PolicyDocument=json.dumps(policy))
wrong = boto3.client("sts", aws_access_key_id=key["AccessKeyId"],
                     aws_secret_access_key="wrong-secret", **common)
try:
    wrong.get_caller_identity()
    refused = None
except botocore.exceptions.ClientError as exc:
    refused = exc.response["Error"]["Code"]
print(json.dumps({"id": key["AccessKeyId"], "secret": key["SecretAccessKey"],
                  "wrong_signature": refused}))
"""


@dataclass(frozen=True)
class Moto:
    key_id: str
    secret: str
    wrong_signature: str | None
    log: Path  # moto's (werkzeug's) access log: one line per request it received

    def requests(self) -> int:
        return sum('HTTP/1.1"' in line for line in self.log.read_text().splitlines())


@pytest.fixture(scope="module")
def moto(topology: Topology, pki: Pki, e2e_dir: Path) -> Iterator[Moto]:
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "3"}
    argv = topology.exec_prefix(topology.ns_upstream) + [
        str(Path(sys.executable).parent / "moto_server"), "-H", UPSTREAM_IP, "-p", str(MOTO_PORT),
        "-c", str(pki.server_cert), "-k", str(pki.server_key),
    ]  # fmt: skip
    child = procs.start("moto", argv, e2e_dir, env=env)

    def accepting() -> bool:
        try:
            nsock.connect(topology.ns_upstream, (UPSTREAM_IP, MOTO_PORT), timeout=1).close()
            return True
        except OSError:
            return False

    try:
        procs.wait_until("moto accepting", accepting, timeout=30, child=child)
        setup = subprocess.run(
            topology.exec_prefix(topology.ns_upstream)
            + [sys.executable, "-c", SETUP, ENDPOINT, str(pki.ca_cert)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert setup.returncode == 0, setup.stderr[-2000:]
        made = json.loads(setup.stdout)
        yield Moto(made["id"], made["secret"], made["wrong_signature"], child.stderr)
    finally:
        child.stop()


def _config(key_file: Path, secret_file: Path, buckets: str = "") -> str:
    return f"""\
credentials:
  aws-prod: {{aws: {{access_key_id: "${{file:{key_file}}}",
                    secret_access_key: "${{file:{secret_file}}}"}}}}
network:
  allowlist:
    - domain: {UPSTREAM_IP}
      ports: [{MOTO_PORT}]
      credential: {{name: aws-prod, as: sigv4, placeholder_access_key_id: {PLACEHOLDER},
                   services: [s3, sts], regions: [us-east-1]{buckets}}}
"""


def test_boto3_with_the_placeholder_key_gets_the_real_identity(
    moto: Moto, private_proxy: Callable[..., PrivateProxy], e2e_dir: Path
) -> None:
    assert moto.wrong_signature == "SignatureDoesNotMatch"  # moto checks every signature
    key_file, secret_file = e2e_dir / "aws-id", e2e_dir / "aws-key"
    key_file.write_text(moto.key_id + "\n")
    secret_file.write_text(moto.secret + "\n")
    proxy = private_proxy("sigv4", _config(key_file, secret_file)).view
    home = e2e_dir / "aws-home"
    home.mkdir(exist_ok=True)
    url = f"http://{proxy.proxy_host}:{proxy.proxy_port}"
    env = {
        "PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8",
        "HTTPS_PROXY": url, "https_proxy": url,
        "AWS_ENDPOINT_URL": ENDPOINT, "AWS_CA_BUNDLE": str(proxy.proxy_ca),
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": PLACEHOLDER, "AWS_SECRET_ACCESS_KEY": "fake-secret-of-the-sandbox",
    }  # fmt: skip
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
    leak = proxy.https(f"{UPSTREAM_IP}:{MOTO_PORT}", "/", [("X-Note", f"k={moto.secret}")])
    assert_refused(leak, "secret_elsewhere", host=UPSTREAM_IP)
    # ... in any spelling (issue 43): base64, and JSON-escaped (`\/`) in the target.
    spelled = base64.b64encode(moto.secret.encode()).decode()
    leak = proxy.https(f"{UPSTREAM_IP}:{MOTO_PORT}", "/", [("X-Note", spelled)])
    assert_refused(leak, "secret_elsewhere", host=UPSTREAM_IP)
    escaped = quote(json.dumps(moto.secret)[1:-1].replace("/", "\\/"), safe="")
    leak = proxy.https(f"{UPSTREAM_IP}:{MOTO_PORT}", f"/?q={escaped}")
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
    key_file, secret_file = e2e_dir / "aws-id", e2e_dir / "aws-key"
    key_file.write_text(moto.key_id + "\n")
    secret_file.write_text(moto.secret + "\n")
    config = _config(key_file, secret_file, ", buckets: [scoped-*]")
    proxy = private_proxy("sigv4-buckets", config).view
    home = e2e_dir / "aws-home"
    home.mkdir(exist_ok=True)
    url = f"http://{proxy.proxy_host}:{proxy.proxy_port}"
    env = {
        "PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8",
        "HTTPS_PROXY": url, "https_proxy": url,
        "AWS_ENDPOINT_URL": ENDPOINT, "AWS_CA_BUNDLE": str(proxy.proxy_ca),
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": PLACEHOLDER, "AWS_SECRET_ACCESS_KEY": "fake-secret-of-the-sandbox",
    }  # fmt: skip
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


def _signed_by_the_sandbox(payload_hash: str, scope: str = "us-east-1/s3") -> list[tuple[str, str]]:
    """What a SigV4 client holding the placeholder sends (its signature is worthless)."""
    return [
        ("X-Amz-Date", "20261204T000000Z"),
        ("X-Amz-Content-SHA256", payload_hash),
        ("Authorization", f"AWS4-HMAC-SHA256 Credential={PLACEHOLDER}/20261204/{scope}/"
                          f"aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date, "
                          f"Signature={'0' * 64}"),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("path", "headers", "reason"),
    [
        ("/agent-bucket/held.txt", _signed_by_the_sandbox(hashlib.sha256(b"other").hexdigest()),
         "bad_request"),
        ("/agent-bucket/held.txt", _signed_by_the_sandbox("STREAMING-AWS4-HMAC-SHA256-PAYLOAD"),
         "sigv4_unsupported"),
        ("/agent-bucket/held.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=00", [],
         "sigv4_unsupported"),
        ("/agent-bucket/held.txt",
         _signed_by_the_sandbox(hashlib.sha256(b"payload").hexdigest(), "us-east-1/iam"),
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
    key_file, secret_file = e2e_dir / "aws-id", e2e_dir / "aws-key"
    key_file.write_text(moto.key_id + "\n")
    secret_file.write_text(moto.secret + "\n")
    proxy = private_proxy("sigv4-refused", _config(key_file, secret_file)).view
    before = moto.requests()
    authority = f"{UPSTREAM_IP}:{MOTO_PORT}"
    response = proxy.https(authority, path, headers, method="PUT", body=b"payload")

    assert_refused(response, reason, host=UPSTREAM_IP)
    assert moto.requests() == before


def test_the_placeholder_key_sent_to_another_host_is_placeholder_elsewhere(
    moto: Moto, private_proxy: Callable[..., PrivateProxy], e2e_dir: Path
) -> None:
    """Issue 43: the placeholder access key id is a placeholder like any other
    (docs/decisions.md D362): a SigV4 request holding it, or a presigned URL naming it, sent to a host the
    binding is not on (here a name for moto's own address) is refused and reaches nothing."""
    key_file, secret_file = e2e_dir / "aws-id", e2e_dir / "aws-key"
    key_file.write_text(moto.key_id + "\n")
    secret_file.write_text(moto.secret + "\n")
    config = _config(key_file, secret_file) + "    - domain: other.allowed.test\n"
    proxy = private_proxy("sigv4-elsewhere", config).view
    before, authority = moto.requests(), f"other.allowed.test:{MOTO_PORT}"
    signed = proxy.https(authority, "/bucket/k", _signed_by_the_sandbox("x"))
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
    key_file, secret_file = e2e_dir / "aws-id", e2e_dir / "aws-key"
    key_file.write_text(moto.key_id + "\n")
    secret_file.write_text(moto.secret + "\n")
    proxy = private_proxy("sigv4-body", _config(key_file, secret_file)).view
    authority, empty = f"{UPSTREAM_IP}:{MOTO_PORT}", hashlib.sha256(b"").hexdigest()
    made = proxy.https(authority, "/body-bucket", _signed_by_the_sandbox(empty), method="PUT")
    assert made.status == 200, made.describe()  # the keys are fetched: the secret is known
    before = moto.requests()
    for body in (
        f"note={moto.secret}".encode(),
        json.dumps({"k": base64.b64encode(moto.secret.encode()).decode()}).encode(),
    ):
        put = proxy.https(
            authority,
            "/body-bucket/k",
            _signed_by_the_sandbox(hashlib.sha256(body).hexdigest()),
            method="PUT",
            body=body,
        )
        assert_refused(put, "secret_elsewhere", host=UPSTREAM_IP)
    assert moto.requests() == before


def test_a_declared_hash_matching_the_held_body_is_signed(
    moto: Moto, private_proxy: Callable[..., PrivateProxy], e2e_dir: Path
) -> None:
    key_file, secret_file = e2e_dir / "aws-id", e2e_dir / "aws-key"
    key_file.write_text(moto.key_id + "\n")
    secret_file.write_text(moto.secret + "\n")
    proxy = private_proxy("sigv4-held", _config(key_file, secret_file)).view
    authority = f"{UPSTREAM_IP}:{MOTO_PORT}"
    body = b"a body whose hash the sandbox declared"
    empty = hashlib.sha256(b"").hexdigest()
    made = proxy.https(authority, "/held-bucket", _signed_by_the_sandbox(empty), method="PUT")
    assert made.status == 200, made.describe()
    put = proxy.https(
        authority,
        "/held-bucket/k",
        _signed_by_the_sandbox(hashlib.sha256(body).hexdigest()),
        method="PUT",
        body=body,
    )
    assert put.status == 200, put.describe()  # held, verified, signed: moto accepted it
    got = proxy.https(authority, "/held-bucket/k", _signed_by_the_sandbox(empty))
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
    key_file, secret_file = e2e_dir / "aws-id", e2e_dir / "aws-key"
    key_file.write_text(moto.key_id + "\n")
    secret_file.write_text(moto.secret + "\n")
    git = '\n      git: {push: [{repo: acme/web, refs: ["refs/heads/agent/**"]}]}\n'
    proxy = private_proxy("sigv4-git", _config(key_file, secret_file).rstrip("\n") + git).view
    before = moto.requests()
    authority = f"{UPSTREAM_IP}:{MOTO_PORT}"
    line = f"{'0' * 40} {'b' * 40} {ref}\0report-status\n".encode()
    body = f"{len(line) + 4:04x}".encode() + line + b"0000"
    headers = [*_signed_by_the_sandbox(hashlib.sha256(body).hexdigest()),
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
