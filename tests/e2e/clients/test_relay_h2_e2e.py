"""End to end, HTTP/2 on both legs with the body relay off and on (issue 49, D575-D579).

The session's case: curl speaks HTTP/2 to the proxy inside an intercepted tunnel, nginx
speaks HTTP/2 upstream (testbed/nginx.py), and a large file streams down; and the other
way, a large upload streams up (D653-D655). Each test runs
on a fresh proxy, `--body-relay` off and on (`relaying`), and asserts the same outcome:
the bytes at both ends (sha256 of what nginx served and of what curl received), the
audit's count, the echoed secret masked in place, the proxy's memory bounded when the
client stops reading, the connection usable after the client resets the stream. With the
relay on, /status says how much it carried (`engine.relayed`).

The download's proxy CPU per GiB (from /proc) is written to the results file
(`EGRESS_E2E_RESULTS`) for docs/benchmarks.md; `EGRESS_E2E_RELAY_ROUNDS=3` runs it three
times each way. `EGRESS_E2E_STREAM_BYTES` changes the size.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import h2.errors
import h2.settings
import pytest

from testbed import nginx, registries
from testbed.bulk_server import echo_body, pattern_chunks
from testbed.h2stream import H2Stream
from testbed.proxyproc import RssSampler, record_result
from testbed.streaming import blank_echoes, expected_sha256
from tests.e2e.clients.conftest import HTTPS_PORT
from tests.e2e.conftest import SECRET_ENV, PrivateProxy, relaying
from tests.e2e.memory_support import GROWTH_BOUND_MIB, h2_request, h2_tunnel
from tests.e2e.test_streaming_e2e import _cpu_s

pytestmark = [pytest.mark.netns, pytest.mark.slow]

MIB = 1 << 20
SIZE = int(os.environ.get("EGRESS_E2E_STREAM_BYTES", str(1 << 30)))
ECHO_SIZE, ECHO_EVERY = 8 * MIB, 65_521
AUTHORITY = f"api.allowed.test:{HTTPS_PORT}"
URL = f"https://{AUTHORITY}"
CONFIG = f"""\
network:
  allowlist:
    - domain: api.allowed.test
      transform:
        Authorization: "Bearer ${{{SECRET_ENV}}}"
    - domain: 198.18.1.0/24
"""


@pytest.fixture(scope="module")
def files(content: registries.Content) -> Iterator[Path]:
    """The test's files in nginx's root: `relay-h2.bin` (`SIZE` pattern bytes), and
    `small.txt`; removed at the end."""
    big, small = content.root / "relay-h2.bin", content.root / "small.txt"
    with big.open("wb") as out:
        for chunk in pattern_chunks(SIZE):
            out.write(chunk)
    small.write_bytes(b"small\n")
    try:
        yield content.root
    finally:
        big.unlink()
        small.unlink()
        (content.root / "echo-h2.bin").unlink(missing_ok=True)


@pytest.fixture
def h2_proxy(
    private_proxy: Callable[..., PrivateProxy],
    nginx_upstream: nginx.Nginx,
    files: Path,
    body_relay: bool,
) -> PrivateProxy:
    p = relaying(private_proxy, body_relay)("relay-h2", CONFIG)
    _curl(p, "/small.txt", Path(os.devnull))  # warm up: the first handshakes, the certificate
    return p


def _curl(p: PrivateProxy, path: str, output: Path | None = None) -> tuple[str, int, str]:
    """curl --http2 through the proxy: (HTTP version, bytes, sha256 of the body), the body
    hashed as it streams (into `output` instead when given)."""
    argv = ["curl", "-sS", "--http2", "--proxy", f"http://{p.view.proxy_host}:{p.view.proxy_port}",
            "--cacert", str(p.view.proxy_ca), "-w", "%{stderr}%{http_version} %{size_download}",
            "-o", str(output) if output else "-", URL + path]  # fmt: skip
    env = {"PATH": os.environ["PATH"], "HOME": "/nonexistent", "LANG": "C.UTF-8"}
    with subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as curl:
        digest = hashlib.sha256()
        assert curl.stdout is not None and curl.stderr is not None
        while chunk := curl.stdout.read(MIB):
            digest.update(chunk)
        stderr = curl.stderr.read().decode()
        assert curl.wait(timeout=300) == 0, stderr
    version, size = stderr.split()
    return version, int(size), digest.hexdigest()


def _relayed(p: PrivateProxy) -> int | None:
    """What /status says the relay carried, None when it is off."""
    engine = p.process.status()["engine"]
    if "relay" not in engine["patches"]:
        assert "relayed" not in engine
        return None
    return int(engine["relayed"]["bytes"])


ROUNDS = int(os.environ.get("EGRESS_E2E_RELAY_ROUNDS", "1"))  # >1: the figures of D579


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_an_http2_download_arrives_byte_exact_and_counted(
    h2_proxy: PrivateProxy, nginx_upstream: nginx.Nginx, body_relay: bool, round_: int
) -> None:
    p, mark = h2_proxy, nginx_upstream.mark()
    started, cpu = time.monotonic(), _cpu_s(p.process)
    baseline = p.process.status_kib("VmRSS")
    with RssSampler(p.process) as rss:
        version, size, sha256 = _curl(p, "/relay-h2.bin")
    elapsed, cpu = time.monotonic() - started, _cpu_s(p.process) - cpu
    carried = _relayed(p)
    record_result(f"relay_h2_download{'_relay' if body_relay else ''}_{round_}", {
        "bytes": SIZE, "seconds": round(elapsed, 2),
        "proxy_cpu_s_per_gib": round(cpu * (1 << 30) / SIZE, 2),
        "relayed_bytes": carried, "rss_growth_mib": round((rss.peak_kib - baseline) / 1024, 1),
    })  # fmt: skip
    assert (version, size, sha256) == ("2", SIZE, expected_sha256(SIZE))
    (served,) = nginx_upstream.lines_for(mark, "/relay-h2.bin", 1)
    assert (served["proto"], served["alpn"], served["status"], served["bytes"]) == (
        "HTTP/2.0", "h2", 200, SIZE,
    )  # fmt: skip
    line = p.view.audit_log.wait_for(0, lambda a: a.get("path") == "/relay-h2.bin")
    assert (line["status"], line["bytes_received"]) == (200, SIZE)
    if body_relay:  # all but what came with the head and the last frame went below
        assert carried is not None and SIZE * 0.9 <= carried < SIZE, carried
    else:
        assert carried is None


def test_an_echoed_secret_is_masked_the_same_way(
    h2_proxy: PrivateProxy, files: Path, body_relay: bool, tmp_path: Path
) -> None:
    """nginx serves the injected Authorization value every 65,521 bytes of 8 MiB: each
    reaches curl masked in place, every other byte as served, relayed or not."""
    p = h2_proxy
    value = f"Bearer {p.view.secrets[0]}".encode()
    sent = bytearray(echo_body(ECHO_SIZE, value, ECHO_EVERY))
    (files / "echo-h2.bin").write_bytes(sent)
    output = tmp_path / "echo-h2.out"
    before = _relayed(p) or 0
    version, size, _ = _curl(p, "/echo-h2.bin", output)
    got = bytearray(output.read_bytes())
    output.unlink()
    assert (version, size, len(got)) == ("2", ECHO_SIZE, ECHO_SIZE)
    assert p.view.secrets[0].encode() not in got
    assert blank_echoes(got, sent, value, ECHO_EVERY) == (129, [])  # each masked
    assert got == sent  # nothing else changed, nothing moved
    line = p.view.audit_log.wait_for(0, lambda a: a.get("path") == "/echo-h2.bin")
    assert line["bytes_received"] == ECHO_SIZE
    if body_relay:
        assert (_relayed(p) or 0) - before > ECHO_SIZE // 2


@pytest.mark.parametrize("pause", [0, 4])
def test_a_client_that_stops_reading_then_resets_holds_the_upstream_back(
    h2_proxy: PrivateProxy, pause: int
) -> None:
    """The client opens windows of 8 MiB (so the relay has room to carry), reads 16 MiB,
    stops reading for `pause` s (the proxy's memory must not grow with the body; 0: the
    reset comes while the body flows), then resets the stream: the connection still
    answers the next request."""
    p = h2_proxy
    baseline = p.process.status_kib("VmRSS")
    with RssSampler(p.process) as rss, h2_tunnel(p, AUTHORITY) as conn:
        conn.sock.settimeout(30)
        client = H2Stream(conn.sock)
        client.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 8 * MIB})
        client.conn.increment_flow_control_window(64 * MIB)
        client._flush()
        sid = client.open(h2_request(AUTHORITY, "GET", "/relay-h2.bin"), end_stream=True)
        outcome = client.outcomes[sid]
        while outcome.body_bytes < 16 * MIB and not client.done(sid):
            client._pump()
        time.sleep(pause)  # not reading: the windows close, the proxy must hold nginx back
        stalled = p.process.status_kib("VmRSS")
        client.conn.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
        client._flush()
        after = client.open(h2_request(AUTHORITY, "GET", "/small.txt"), end_stream=True)
        answer = client.read_response(after)
    assert outcome.status == "200" and not outcome.ended
    assert (answer.status, answer.body_bytes) == ("200", len(b"small\n"))
    growth = (max(rss.peak_kib, stalled) - baseline) / 1024
    assert growth < GROWTH_BOUND_MIB, growth
    line = p.view.audit_log.wait_for(0, lambda a: a.get("path") == "/relay-h2.bin")
    assert 16 * MIB <= line["bytes_received"] < SIZE // 2, line


@pytest.mark.parametrize("window", [65_535, MIB + 1, 16 * MIB])
def test_a_client_with_a_small_window_gets_every_byte_in_order(
    h2_proxy: PrivateProxy, window: int, body_relay: bool
) -> None:
    """With the client's window smaller than a read (h2's default: every read waits for
    mitmproxy's queue), a few reads (the relay and the queue take turns) or larger (the
    relay carries it), 64 MiB arrive whole and in order: the relay never sends while
    something is queued. An `h2`-only client: the HTTP layer opened the upstream (D82),
    the other stack of `relayh2.route`."""
    p, size = h2_proxy, min(SIZE, 64 * MIB)
    before = _relayed(p) or 0
    with h2_tunnel(p, AUTHORITY) as conn:
        conn.sock.settimeout(30)
        client = H2Stream(conn.sock)
        client.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        if window > 65_535:  # the connection's window too (h2's default is 65,535)
            client.conn.increment_flow_control_window(window - 65_535)
        client._flush()
        head = h2_request(AUTHORITY, "GET", "/relay-h2.bin", ("range", f"bytes=0-{size - 1}"))
        outcome = client.read_response(client.open(head, end_stream=True))
    assert (outcome.status, outcome.body_bytes, outcome.ended) == ("206", size, True)
    assert outcome.sha256 == expected_sha256(size)
    carried = (_relayed(p) or 0) - before
    if body_relay and window == MIB + 1:  # the relay and mitmproxy's queue took turns
        assert 0 < carried < size * 0.9, carried
    elif body_relay and window > MIB:  # the window never closed: (nearly) all relayed
        assert carried >= size * 0.9, carried


UPLOAD = int(os.environ.get("EGRESS_E2E_UPLOAD_BYTES", str(64 * MIB)))


def _uploaded(server: nginx.Nginx, mark: int) -> tuple[dict, str]:
    """nginx's line for the one `/upload` since `mark`, and the sha256 of the body it
    kept (the file is removed)."""
    (line,) = server.lines_for(mark, "/upload", 1)
    kept = Path(line["body_file"])
    try:
        digest = hashlib.sha256()
        with kept.open("rb") as body:
            while chunk := body.read(MIB):
                digest.update(chunk)
    finally:
        kept.unlink()
    return line, digest.hexdigest()


def test_an_http2_upload_arrives_byte_exact_and_counted(
    h2_proxy: PrivateProxy, nginx_upstream: nginx.Nginx, body_relay: bool, tmp_path: Path
) -> None:
    """curl POSTs 64 MiB over HTTP/2 (the upstream opened first, `relayh2up.route`'s first
    stack): nginx keeps exactly the bytes sent, the audit counts them, and with the relay
    on most of them went below the layers (D653)."""
    p, mark = h2_proxy, nginx_upstream.mark()
    before = _relayed(p) or 0
    source = tmp_path / "upload.bin"
    with source.open("wb") as out:
        for chunk in pattern_chunks(UPLOAD):
            out.write(chunk)
    argv = ["curl", "-sS", "--http2", "--proxy", f"http://{p.view.proxy_host}:{p.view.proxy_port}",
            "--cacert", str(p.view.proxy_ca), "-w", "%{http_version} %{size_upload} %{http_code}",
            "-o", os.devnull, "--data-binary", f"@{source}", URL + "/upload"]  # fmt: skip
    env = {"PATH": os.environ["PATH"], "HOME": "/nonexistent", "LANG": "C.UTF-8"}
    cpu = _cpu_s(p.process)
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)
    cpu = _cpu_s(p.process) - cpu
    assert (done.returncode, done.stdout) == (0, f"2 {UPLOAD} 200"), done.stderr
    line, sha256 = _uploaded(nginx_upstream, mark)
    assert (line["proto"], line["method"], line["status"]) == ("HTTP/2.0", "POST", 200)
    assert sha256 == expected_sha256(UPLOAD)
    audit = p.view.audit_log.wait_for(0, lambda a: a.get("path") == "/upload")
    assert (audit["status"], audit["bytes_sent"]) == (200, UPLOAD)
    carried = (_relayed(p) or 0) - before
    record_result(f"relay_h2_upload{'_relay' if body_relay else ''}", {
        "bytes": UPLOAD, "proxy_cpu_s_per_gib": round(cpu * (1 << 30) / UPLOAD, 2),
        "relayed_bytes": carried,
    })  # fmt: skip
    if body_relay:
        assert UPLOAD * 0.5 <= carried < UPLOAD, carried
    else:
        assert carried == 0


def test_an_http2_only_clients_upload_arrives_byte_exact(
    h2_proxy: PrivateProxy, nginx_upstream: nginx.Nginx, body_relay: bool
) -> None:
    """An `h2`-only client (the HTTP layer opened the upstream, D82: the other stack of
    `relayh2up.route`) uploads 16 MiB in frames of 16 KiB: nginx keeps exactly what was
    sent, the audit counts it, and with the relay on most of it went below the layers."""
    p, mark, size = h2_proxy, nginx_upstream.mark(), 16 * MIB
    before = _relayed(p) or 0
    with h2_tunnel(p, AUTHORITY) as conn:
        conn.sock.settimeout(30)
        client = H2Stream(conn.sock)
        head = h2_request(AUTHORITY, "POST", "/upload", ("content-length", str(size)))
        sid = client.open(head)
        assert client.send_body(sid, pattern_chunks(size)) == size
        outcome = client.read_response(sid)
    assert (outcome.status, outcome.ended) == ("200", True)
    line, sha256 = _uploaded(nginx_upstream, mark)
    assert (line["proto"], line["status"], sha256) == ("HTTP/2.0", 200, expected_sha256(size))
    audit = p.view.audit_log.wait_for(0, lambda a: a.get("path") == "/upload")
    assert (audit["status"], audit["bytes_sent"]) == (200, size)
    carried = (_relayed(p) or 0) - before
    # Its frames straddle its reads and its first ones reach the layers (the upstream is
    # not open yet): the relay still takes most of it once it is (D657).
    assert (carried >= size * 0.5) if body_relay else (carried == 0), carried


def test_a_frame_cut_between_a_relayed_read_and_the_last_arrives_whole(
    h2_proxy: PrivateProxy, nginx_upstream: nginx.Nginx, body_relay: bool
) -> None:
    """One read brings a whole DATA frame and half of the next, the following read the
    rest of it and the frame that ends the stream: the first is relayed and the half
    waits (`_pending_frames`), the second goes to the layers (END_STREAM), which must get
    the half too. nginx keeps exactly both frames' bytes (D653; lost before the fix)."""
    p, mark = h2_proxy, nginx_upstream.mark()
    before = _relayed(p) or 0
    first, second = b"a" * 1000, b"b" * 1000
    with h2_tunnel(p, AUTHORITY) as conn:
        conn.sock.settimeout(30)
        client = H2Stream(conn.sock)
        length = ("content-length", str(len(first + second)))
        sid = client.open(h2_request(AUTHORITY, "POST", "/upload", length))
        time.sleep(0.5)  # the upstream connects and takes the headers: the body streams
        client.conn.send_data(sid, first)
        client.conn.send_data(sid, second)
        client.conn.end_stream(sid)
        wire = client.conn.data_to_send()
        cut = 9 + len(first) + 9 + len(second) // 2
        conn.sock.sendall(wire[:cut])
        time.sleep(0.3)  # two reads at the proxy
        conn.sock.sendall(wire[cut:])
        outcome = client.read_response(sid)
    assert (outcome.status, outcome.ended) == ("200", True)
    line, sha256 = _uploaded(nginx_upstream, mark)
    assert (line["status"], sha256) == (200, hashlib.sha256(first + second).hexdigest())
    carried = (_relayed(p) or 0) - before
    assert carried == (len(first) if body_relay else 0)


def test_more_requests_than_nginx_serves_on_one_connection_all_get_their_answer(
    h2_proxy: PrivateProxy, nginx_upstream: nginx.Nginx
) -> None:
    """nginx ends an HTTP/2 connection after `keepalive_requests` (1000) requests with a
    GOAWAY naming the last stream it serves, which it still answers (RFC 9113 6.8): every
    answer arrives, the 1000th too, and the next ones on a second connection (D701)."""
    mark = nginx_upstream.mark()
    with h2_tunnel(h2_proxy, AUTHORITY) as conn:
        conn.sock.settimeout(30)
        client = H2Stream(conn.sock)
        answers = []
        for _ in range(1010):
            sid = client.open(h2_request(AUTHORITY, "GET", "/small.txt"), end_stream=True)
            answer = client.read_response(sid)
            answers.append((answer.status, answer.body_bytes))
    failed = [(i, a) for i, a in enumerate(answers) if a != ("200", len(b"small\n"))]
    assert failed == []
    lines = nginx_upstream.lines_for(mark, "/small.txt", 1010)
    assert sorted(Counter(line["conn"] for line in lines).values()) == [10, 1000]
