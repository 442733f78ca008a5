"""moto's S3/STS/IAM server in the upstream namespace, and what a SigV4 test needs beside it.

moto's server runs behind TLS (the test PKI) with `INITIAL_NO_AUTH_ACTION_COUNT=3`:
the three IAM calls that create the agent's user, key and policy go unauthenticated
(straight to moto, from the upstream namespace), then every request must carry a valid
SigV4 signature of a known key (a wrong secret is refused `SignatureDoesNotMatch`,
recorded as `Moto.wrong_signature`). The proxy under test holds the real keys in files
(`Moto.config`); a client holds only `PLACEHOLDER` (`boto3_env`, `signed_by_the_sandbox`).

Invariants: `start_moto` stops the server by its pid when the block ends; the key files
are written under the directory the caller names, never elsewhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from testbed import nsock, procs
from testbed.harness import Harness
from testbed.netns import UPSTREAM_IP, Topology
from testbed.testca import Pki

MOTO_PORT = 9446
ENDPOINT = f"https://{UPSTREAM_IP}:{MOTO_PORT}"
AUTHORITY = f"{UPSTREAM_IP}:{MOTO_PORT}"
PLACEHOLDER = "AKIAEGRESSPLACEHOLDR"

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

    def config(self, directory: Path, buckets: str = "", prefix: str = "aws") -> str:
        """A proxy configuration binding the real keys (written to two files under
        `directory`) to moto's address as `sigv4` for s3 and sts in us-east-1;
        `buckets` is appended to the binding (`, buckets: [...]`)."""
        key_file, secret_file = directory / f"{prefix}-id", directory / f"{prefix}-key"
        key_file.write_text(self.key_id + "\n")
        secret_file.write_text(self.secret + "\n")
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


@contextlib.contextmanager
def start_moto(topology: Topology, pki: Pki, directory: Path) -> Iterator[Moto]:
    """moto's server on `ENDPOINT`, the agent's user made; stopped when the block ends."""
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "3"}
    argv = topology.exec_prefix(topology.ns_upstream) + [
        str(Path(sys.executable).parent / "moto_server"), "-H", UPSTREAM_IP, "-p", str(MOTO_PORT),
        "-c", str(pki.server_cert), "-k", str(pki.server_key),
    ]  # fmt: skip
    child = procs.start("moto", argv, directory, env=env)

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
        if setup.returncode != 0:
            raise RuntimeError(f"moto's set-up failed: {setup.stderr[-2000:]}")
        made = json.loads(setup.stdout)
        yield Moto(made["id"], made["secret"], made["wrong_signature"], child.stderr)
    finally:
        child.stop()


def boto3_env(view: Harness, home: Path, key_id: str, secret: str, **extra: str) -> dict[str, str]:
    """The environment of a boto3 client in the sandbox: through `view`'s proxy (its CA
    trusted), moto as the endpoint, `key_id`/`secret` as its keys, `home` its own."""
    home.mkdir(exist_ok=True)
    url = f"http://{view.proxy_host}:{view.proxy_port}"
    return {
        "PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8",
        "HTTPS_PROXY": url, "https_proxy": url,
        "AWS_ENDPOINT_URL": ENDPOINT, "AWS_CA_BUNDLE": str(view.proxy_ca),
        "AWS_DEFAULT_REGION": "us-east-1", **extra,
        "AWS_ACCESS_KEY_ID": key_id, "AWS_SECRET_ACCESS_KEY": secret,
    }  # fmt: skip


def signed_by_the_sandbox(payload_hash: str, scope: str = "us-east-1/s3") -> list[tuple[str, str]]:
    """What a SigV4 client holding the placeholder sends (its signature is worthless)."""
    return [
        ("X-Amz-Date", "20261204T000000Z"),
        ("X-Amz-Content-SHA256", payload_hash),
        ("Authorization", f"AWS4-HMAC-SHA256 Credential={PLACEHOLDER}/20261204/{scope}/"
                          f"aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date, "
                          f"Signature={'0' * 64}"),
    ]  # fmt: skip
