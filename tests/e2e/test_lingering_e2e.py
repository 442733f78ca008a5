"""End to end, a refusal answered before the request's body was read reaches the client
(docs/configuration.md#lingering-close, D350-D351; issues 43 and 48).

The proxy answers a refused request whose body is large or of unknown length at once,
then reads and drops what the client still sends (up to `LINGER_BYTES` and
`LINGER_S`) before it closes, so the client's TCP stack does not reset the answer
away. Real clients: boto3 (`put_object` with a key the binding does not own, its
default aws-chunked body) against moto as in test_sigv4_e2e.py, the MCP SDK's HTTP
client with a body over `max_body`, curl uploading over HTTP/1.1 (sized, chunked, with
and without `Expect: 100-continue`) and HTTP/2, and a raw client over plain HTTP.
Each must show the status, `X-Egress-Denied` and the JSON reason; nothing reaches an
upstream.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx2
import pytest

from testbed.expect import Observed
from testbed.moto import MOTO_PORT, PLACEHOLDER, Moto, boto3_env
from tests.e2e.conftest import PrivateProxy, relaying

pytestmark = pytest.mark.netns


@pytest.fixture
def private_proxy(
    private_proxy: Callable[..., PrivateProxy], body_relay: bool
) -> Callable[..., PrivateProxy]:
    """Every proxy of this module's tests, with the body relay off and on (issue 49)."""
    return relaying(private_proxy, body_relay)


MIB = 1024 * 1024
CONFIG = """\
network:
  allowlist:
    - domain: api.allowed.test            # only reads: an upload is refused rule_mismatch
      rules:
        - methods: [GET]
    - domain: x.wild.test                 # the echo upstream as an MCP server
      mcp:
        endpoint: ["/mcp"]
        tools: [search_repositories]
        max_body: 4KiB
    - domain: plain.allowed.test          # no rule admits a POST, over plain HTTP too
      allow_plaintext: true
      rules:
        - methods: [GET]
    - domain: 198.18.1.0/24
"""

BOTO3_PUT = r"""
import json, sys, boto3, botocore.exceptions
s3 = boto3.client("s3")
try:
    s3.put_object(Bucket="agent-bucket", Key="big.bin", Body=b"b" * int(sys.argv[1]))
    print(json.dumps({"ok": True}))
except botocore.exceptions.ClientError as exc:
    meta = exc.response["ResponseMetadata"]
    print(json.dumps({"status": meta["HTTPStatusCode"],
                      "denied": meta["HTTPHeaders"].get("x-egress-denied"),
                      "code": exc.response.get("Error", {}).get("Code")}))
except Exception as exc:
    print(json.dumps({"exception": type(exc).__name__, "text": str(exc)[:300]}))
"""


@pytest.fixture
def proxy(private_proxy: Callable[..., PrivateProxy]) -> PrivateProxy:
    return private_proxy("linger", CONFIG)


@pytest.mark.parametrize("size", [200 * 1024, 3 * MIB], ids=["200KiB", "3MiB"])
def test_boto3_put_object_with_a_key_the_binding_does_not_own_shows_the_reason(
    moto: Moto, private_proxy: Callable[..., PrivateProxy], e2e_dir: Path, size: int
) -> None:
    """Failed before: `SSLError: EOF occurred in violation of protocol` (issue 43)."""
    proxy = private_proxy("linger-sigv4", moto.config(e2e_dir, prefix="linger-aws")).view
    # not the placeholder: a key of the sandbox's own, which the binding does not own
    env = boto3_env(
        proxy, e2e_dir / "linger-aws-home", "AKIASANDBOXOWNKEY000", "own-secret",
        AWS_MAX_ATTEMPTS="1",
    )  # fmt: skip
    assert env["AWS_ACCESS_KEY_ID"] != PLACEHOLDER
    before = moto.requests()
    ran = subprocess.run(
        [sys.executable, "-c", BOTO3_PUT, str(size)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    out = json.loads(ran.stdout)
    assert out == {"status": 403, "denied": "credential_required", "code": "403"}, out
    assert moto.requests() == before
    line = proxy.audit_log.wait_for(0, lambda a: a["method"] == "PUT")
    assert (line["decision"], line["reason"], line["status"]) == (
        "deny",
        "credential_required",
        403,
    )
    assert line["port"] == MOTO_PORT


def _mcp_body(size: int) -> bytes:
    call = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "search_repositories", "arguments": {"q": "q" * size}},
    }
    return json.dumps(call).encode()


@pytest.mark.parametrize("size", [100 * 1024, 2 * MIB], ids=["100KiB", "2MiB"])
def test_an_mcp_post_over_max_body_gets_its_400(
    proxy: PrivateProxy, obs: Observed, size: int
) -> None:
    """The MCP SDK's HTTP client (httpx) posting a body over `max_body`: failed before with
    a closed connection (`RemoteProtocolError`/`ReadError`) instead of the 400."""
    view = proxy.view
    tls = ssl.create_default_context(cafile=str(view.proxy_ca))
    proxy_url = f"http://{view.proxy_host}:{view.proxy_port}"
    with httpx2.Client(verify=tls, proxy=proxy_url, trust_env=False, timeout=30) as client:
        answer = client.post(
            "https://x.wild.test/mcp",
            content=_mcp_body(size),
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
    assert answer.status_code == 400, answer.text[:300]
    assert answer.headers.get_list("x-egress-denied") == ["mcp_bad_request"]
    error = answer.json()
    assert error["jsonrpc"] == "2.0" and error["error"]["data"]["reason"] == "mcp_bad_request"
    obs.assert_nothing_reached()
    line = view.audit_log.wait_for(0, lambda a: a["method"] == "POST")
    assert (line["decision"], line["reason"], line["status"]) == ("deny", "mcp_bad_request", 400)


def _curl(view: PrivateProxy, *args: str) -> tuple[int, int, dict[str, str], bytes]:
    """curl through the proxy; (exit code, status, headers, body)."""
    v = view.view
    ran = subprocess.run(
        ["curl", "-sS", "--max-time", "60", "--proxy", f"http://{v.proxy_host}:{v.proxy_port}",
         "--cacert", str(v.proxy_ca), "-D", "-", *args],
        capture_output=True, timeout=90,
    )  # fmt: skip
    out = ran.stdout
    heads = out.split(b"\r\n\r\n")
    # the last head before the body (a 100 Continue comes first when sent)
    index = max(i for i, h in enumerate(heads[:-1]) if h.startswith(b"HTTP/"))
    head, body = heads[index], b"\r\n\r\n".join(heads[index + 1 :])
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    assert ran.returncode == 0, (ran.returncode, ran.stderr.decode()[-500:], head)
    return ran.returncode, int(status_line.split()[1]), headers, body


@pytest.mark.parametrize(
    ("version", "extra"),
    [
        ("--http1.1", ("-H", "Expect:")),
        ("--http1.1", ("-H", "Expect:", "-H", "Transfer-Encoding: chunked")),
        ("--http1.1", ()),  # curl asks `Expect: 100-continue` for a large body
        ("--http2", ()),
    ],
    ids=["http1-sized", "http1-chunked", "http1-expect-100", "http2"],
)
def test_curl_uploading_a_large_refused_body_reads_the_refusal(
    proxy: PrivateProxy, obs: Observed, tmp_path: Path, version: str, extra: tuple[str, ...]
) -> None:
    upload = tmp_path / "upload.bin"
    upload.write_bytes(b"u" * (8 * MIB))
    _code, status, headers, body = _curl(
        proxy, version, *extra, "--data-binary", f"@{upload}",
        "https://api.allowed.test/upload",
    )  # fmt: skip
    assert status == 403, (status, headers, body[:300])
    assert headers["x-egress-denied"] == "rule_mismatch"
    assert json.loads(body)["reason"] == "rule_mismatch"
    # curl offers h2 and http/1.1: the upstream's handshake settles the ALPN first (D19),
    # and no request follows it.
    assert obs.requests() == [] and obs.traps() == []
    if version == "--http1.1":
        obs.assert_nothing_reached()
    line = proxy.view.audit_log.wait_for(0, lambda a: a["method"] == "POST")
    assert (line["decision"], line["reason"], line["status"]) == ("deny", "rule_mismatch", 403)


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_raw_client_sending_its_whole_body_over_plain_http_reads_the_refusal(
    proxy: PrivateProxy, obs: Observed, framing: str
) -> None:
    """Sends every byte before reading, as Python's http.client does."""
    size = 4 * MIB
    view = proxy.view
    target = "http://plain.allowed.test/upload"
    if framing == "chunked":
        framed = [("Transfer-Encoding", "chunked")]
        body = b"".join(b"%x\r\n%s\r\n" % (MIB, b"p" * MIB) for _ in range(size // MIB))
        body += b"0\r\n\r\n"
    else:
        framed, body = [("Content-Length", str(size))], b"p" * size
    with socket.create_connection((view.proxy_host, view.proxy_port), timeout=30) as sock:
        head = f"POST {target} HTTP/1.1\r\nHost: plain.allowed.test\r\n"
        head += "".join(f"{n}: {v}\r\n" for n, v in framed) + "\r\n"
        sock.sendall(head.encode() + body)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    head_text, _, rest = received.partition(b"\r\n\r\n")
    assert head_text.startswith(b"HTTP/1.1 403 "), received[:300]
    assert b"\r\nX-Egress-Denied: rule_mismatch" in head_text
    assert json.loads(rest)["reason"] == "rule_mismatch"
    obs.assert_nothing_reached()
    line = view.audit_log.wait_for(0, lambda a: a["method"] == "POST")
    assert (line["decision"], line["reason"], line["status"]) == ("deny", "rule_mismatch", 403)


def _post_head(view: PrivateProxy, size: int) -> bytes:
    target = "http://plain.allowed.test/upload"
    return (
        f"POST {target} HTTP/1.1\r\nHost: plain.allowed.test\r\nContent-Length: {size}\r\n\r\n"
    ).encode()


def test_a_body_past_the_linger_bound_is_cut(proxy: PrivateProxy, obs: Observed) -> None:
    """The proxy reads at most `LINGER_BYTES` (16 MiB) of a refused body: a client that goes
    on sending is cut (D351)."""
    size = 256 * MIB
    view = proxy.view
    sent = 0
    with socket.create_connection((view.proxy_host, view.proxy_port), timeout=30) as sock:
        sock.sendall(_post_head(proxy, size))
        chunk = b"p" * MIB
        with contextlib.suppress(OSError):
            while sent < size:
                sock.sendall(chunk)
                sent += len(chunk)
    assert 16 * MIB <= sent < 64 * MIB, sent  # the bound, plus what the socket buffers held
    obs.assert_nothing_reached()


def test_a_body_that_stalls_is_cut_after_the_linger_time(proxy: PrivateProxy) -> None:
    """The answer comes at once; a client that stops sending the rest of its body is closed
    `LINGER_S` (10 s) later, not held for the connection's idle timeout (D351)."""
    view = proxy.view
    with socket.create_connection((view.proxy_host, view.proxy_port), timeout=60) as sock:
        sock.sendall(_post_head(proxy, 4 * MIB) + b"p" * MIB)  # a quarter, then silence
        received = b""
        while b"\r\n\r\n" not in received:
            received += sock.recv(65536)
        answered = time.monotonic()
        assert received.startswith(b"HTTP/1.1 403 "), received[:200]
        with contextlib.suppress(ConnectionResetError):
            while sock.recv(65536):
                pass
        waited = time.monotonic() - answered
    assert 8 < waited < 30, waited
