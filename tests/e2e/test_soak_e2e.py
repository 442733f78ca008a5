"""End to end, a bounded soak of the real proxy: mixed allowed and refused requests over
kept-alive connections from a few concurrent clients (issue 3, "parsers under fire").

The proxy must still be the same process at the end, answer /healthz, have counted every
decision exactly, have let exactly the allowed requests reach the upstream, and keep its
memory flat: resident memory is sampled at each tenth of the run, and the last tenth may
exceed the first by at most 25 % (plus a small absolute slack for allocator noise).

The issue asks for about 10^5 requests. This proxy does roughly 200-260 requests/s per
process on the 2-core CI machine (CPU-bound in mitmproxy's per-request hook dispatch), so
10^5 would take ~8 minutes; the default is 3*10^4 (~2-3 minutes), bounded by a deadline.
`EGRESS_E2E_SOAK=100000` runs the full count. The measured rate and the RSS per tenth are
printed and written to the results file.

Slow: `-m "not slow"` skips it.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from testbed.proxyproc import record_result
from testbed.rawhttp import Conn
from tests.e2e.conftest import BULK_PORT, BULK_TLS_PORT, SECRET_ENV, Bulk, PrivateProxy

pytestmark = [pytest.mark.netns, pytest.mark.slow]

TOTAL = int(os.environ.get("EGRESS_E2E_SOAK", "30000"))
DEADLINE_S = float(os.environ.get("EGRESS_E2E_SOAK_SECONDS", "300"))
PLAIN_CLIENTS, TLS_CLIENTS = 3, 1
REQUESTS_PER_CONNECTION = 200  # then a new connection: connection set-up and teardown soak too
GROWTH_FACTOR, SLACK_KIB = 1.25, 8 * 1024

CONFIG = f"""\
network:
  allowlist:
    - domain: other.allowed.test
    - domain: api.allowed.test
      transform:
        Authorization: "Bearer ${{{SECRET_ENV}}}"
    - domain: 198.18.1.0/24
"""

OTHER = f"other.allowed.test:{BULK_PORT}"
# (label, request target, Host header, expected status, expected X-Egress-Denied)
PLAIN_CYCLE = [
    ("allowed", f"http://{OTHER}/ok", OTHER, 200, None),
    ("not_allowlisted", f"http://notlisted.test:{BULK_PORT}/ok", None, 403, "not_allowlisted"),
    ("loopback", f"http://127.0.0.1:{BULK_PORT}/ok", None, 403, "loopback"),
    ("host_mismatch", f"http://{OTHER}/ok", "notlisted.test", 403, "host_mismatch"),
    (
        "plaintext_credentials",
        f"http://api.allowed.test:{BULK_PORT}/ok",
        None,
        403,
        "plaintext_credentials",
    ),
    ("allowed", f"http://{OTHER}/ok", OTHER, 200, None),
]
API = f"api.allowed.test:{BULK_TLS_PORT}"
TLS_CYCLE = [
    ("allowed_tls", "/ok", API, 200, None),
    ("host_mismatch", "/ok", "other.allowed.test", 403, "host_mismatch"),
    ("allowed_tls", "/ok", API, 200, None),
]


@dataclass
class Run:
    done: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    connects: int = 0
    problems: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)

    def take(self) -> bool:
        """Claim one request of the budget; False when the run is over."""
        with self.lock:
            if self.done >= TOTAL or self.stop.is_set():
                return False
            self.done += 1
            return True

    def record(self, label: str, problem: str | None) -> None:
        with self.lock:
            if problem is None:
                self.outcomes[label] += 1
            else:
                self.problems.append(problem)
                self.stop.set()


def _check(response_status: int, denied: str | None, want: tuple) -> str | None:
    label, _target, _host, status, reason = want
    if (response_status, denied) != (status, reason):
        return f"{label}: got {response_status} {denied}"
    return None


def _plain_client(p: PrivateProxy, run: Run, offset: int) -> None:
    conn: Conn | None = None
    n = offset
    try:
        while run.take():
            if conn is None or n % REQUESTS_PER_CONNECTION == 0:
                if conn is not None:
                    conn.close()
                conn = p.view.conn()
            want = PLAIN_CYCLE[n % len(PLAIN_CYCLE)]
            label, target, host, _status, _reason = want
            if host is None:
                host = target.split("://", 1)[1].split("/", 1)[0]
            response = conn.request("GET", target, [("Host", host)])
            body_ok = want[3] != 200 or response.body == b"ok"
            problem = _check(response.status, response.header("X-Egress-Denied"), want)
            run.record(label, problem or (None if body_ok else f"{label}: body {response.body!r}"))
            n += 1
    except Exception as exc:  # noqa: BLE001 - any failure ends the run and is reported
        run.record("error", repr(exc))
    finally:
        if conn is not None:
            conn.close()


def _tls_client(p: PrivateProxy, run: Run) -> None:
    n = 0
    try:
        while not run.stop.is_set() and run.done < TOTAL:
            with p.view.tunnel(API) as conn:
                with run.lock:
                    run.connects += 1
                for _ in range(REQUESTS_PER_CONNECTION):
                    if not run.take():
                        return
                    want = TLS_CYCLE[n % len(TLS_CYCLE)]
                    label, target, host, _status, _reason = want
                    response = conn.request("GET", target, [("Host", host)])
                    run.record(
                        label, _check(response.status, response.header("X-Egress-Denied"), want)
                    )
                    n += 1
    except Exception as exc:  # noqa: BLE001
        run.record("error", repr(exc))


def _requests_total(p: PrivateProxy) -> dict[tuple[str, str], float]:
    return {
        (dict(labels)["decision"], dict(labels)["reason"]): value
        for (name, labels), value in p.process.scrape().items()
        if name == "egress_requests_total"
    }


def test_soak_mixed_traffic_keeps_the_proxy_alive_counted_and_flat(
    private_proxy: Callable[..., PrivateProxy], bulk: Bulk
):
    p = private_proxy("soak", CONFIG)
    pid = p.process.pid
    counts_before, stats_before = _requests_total(p), bulk.stats()
    run = Run()
    threads = [
        threading.Thread(target=_plain_client, args=(p, run, i * 7), daemon=True)
        for i in range(PLAIN_CLIENTS)
    ] + [
        threading.Thread(target=_tls_client, args=(p, run), daemon=True) for _ in range(TLS_CLIENTS)
    ]

    tenths: list[dict[str, float]] = []
    started = time.monotonic()
    for thread in threads:
        thread.start()
    next_mark = TOTAL // 10
    while any(t.is_alive() for t in threads):
        if run.done >= next_mark and len(tenths) < 10:
            tenths.append(
                {
                    "requests": run.done,
                    "seconds": round(time.monotonic() - started, 1),
                    "rss_mib": round(p.process.status_kib("VmRSS") / 1024, 1),
                }
            )
            next_mark += TOTAL // 10
        if time.monotonic() - started > DEADLINE_S:
            run.stop.set()
        time.sleep(0.02)
    elapsed = time.monotonic() - started
    for thread in threads:
        thread.join(timeout=10)
    if len(tenths) < 10 and not run.problems:
        tenths.append({"requests": run.done, "seconds": round(elapsed, 1),
                       "rss_mib": round(p.process.status_kib("VmRSS") / 1024, 1)})  # fmt: skip

    figures = {
        "requests": run.done,
        "seconds": round(elapsed, 1),
        "per_s": round(run.done / elapsed),
        "connects": run.connects,
        "outcomes": dict(run.outcomes),
        "rss_per_tenth_mib": [t["rss_mib"] for t in tenths],
        "vmhwm_mib": round(p.process.status_kib("VmHWM") / 1024, 1),
    }
    record_result("soak", figures)

    assert run.problems == [], run.problems[:5]
    assert run.done == TOTAL, f"deadline: {run.done}/{TOTAL} in {elapsed:.0f} s"
    # Same process, alive, healthy: never restarted.
    assert p.process.child.alive()
    assert p.process.pid == pid
    assert p.process.healthz() == 200
    # Every decision counted exactly once, by reason.
    outcomes = run.outcomes
    allowed = outcomes["allowed"] + outcomes["allowed_tls"]
    counts_after = _requests_total(p)
    delta = {k: counts_after[k] - counts_before.get(k, 0) for k in counts_after}
    expected = {k: 0.0 for k in counts_after}
    expected[("allow", "allowlisted")] = allowed + run.connects
    for reason in ("not_allowlisted", "loopback", "host_mismatch", "plaintext_credentials"):
        expected[("deny", reason)] = outcomes[reason]
    assert delta == expected
    # Exactly the allowed requests reached the upstream.
    stats_after = bulk.stats()
    assert stats_after["ok"] - stats_before["ok"] == allowed
    # Memory flat from the first tenth to the last.
    first, last = tenths[0]["rss_mib"] * 1024, tenths[-1]["rss_mib"] * 1024
    assert last <= first * GROWTH_FACTOR + SLACK_KIB, figures
