"""What the approvals end-to-end tests share (tests/e2e/test_approvals_e2e.py,
test_approvers_e2e.py): a proxy with `approvals:` and an admin token, the admin API, curl
through the proxy, and a client call on a thread of its own."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.e2e.conftest import PrivateProxy

TOKEN = "approvals-e2e-token-0123456789"
CONFIG = """\
network:
  allowlist:
    - domain: api.allowed.test
    - domain: 198.18.1.0/24
approvals:
  unknown: hold
  timeout: {timeout}
  max_pending: 3
  scopes: [once, session, 1h]
  approvers: {approvers}
"""


def config(timeout: str = "20s", approvers: str = "[]") -> str:
    return CONFIG.format(timeout=timeout, approvers=approvers)


def start(
    private_proxy: Callable[..., PrivateProxy], tmp_path: Path, name: str, text: str
) -> PrivateProxy:
    token = tmp_path / "admin-token"
    token.write_text(TOKEN + "\n")
    return private_proxy(name, text, "--admin-token-file", str(token))


def api(p: PrivateProxy, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
    from sandbox_egress.runtime.approvalscli import call

    return call(p.view.metrics_host, p.view.metrics_port, TOKEN, method, path, body)


def pending(p: PrivateProxy, count: int = 1, timeout: float = 15.0) -> list[dict[str, Any]]:
    """The open approvals, once there are `count` (each with at least one request waiting,
    for those a request opened)."""
    deadline = time.monotonic() + timeout
    found: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        status, document = api(p, "GET", "/approvals")
        assert status == 200, document
        found = [a for a in document["approvals"] if a["state"] == "pending"]
        if len(found) >= count and all(a["waiting"] > 0 for a in found if a["source"] == "request"):
            return found
        time.sleep(0.05)
    raise AssertionError(f"expected {count} pending approvals, found {found}")


def curl(p: PrivateProxy, url: str, *extra: str) -> tuple[int, dict[str, str], float]:
    started = time.monotonic()
    done = subprocess.run(
        ["curl", "-s", "-o", "/dev/null", "-D", "/dev/stderr", "-w", "%{http_code} %{http_connect}",
         "--max-time", "60", "--cacert", str(p.view.proxy_ca),
         "-x", f"http://{p.view.proxy_host}:{p.view.proxy_port}", *extra, url],
        capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    took = time.monotonic() - started
    lines = done.stderr.splitlines()
    headers = {k.lower(): v.strip() for k, sep, v in (x.partition(":") for x in lines) if sep}
    code, connect = (int(x) for x in (done.stdout or "0 0").split())
    return code or connect, headers, took  # a refused CONNECT: its status


class Background:
    """A client call on a thread of its own: `result()` joins it (bounded)."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self._value: Any = None
        self._error: BaseException | None = None

        def run() -> None:
            try:
                self._value = call()
            except BaseException as exc:  # handed to the test's thread
                self._error = exc

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def result(self, timeout: float = 90.0) -> Any:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the client is still waiting"
        if self._error is not None:
            raise self._error
        return self._value
