"""`egress-proxy dns --log-format json`: its messages as JSON lines, build info on /metrics.

A real `egress-proxy dns` process on loopback; no query leaves it (the name is refused).
"""

from __future__ import annotations

import http.client
import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from sandbox_egress.common.serve import version


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_json_lines_and_build_info(tmp_path: Path) -> None:
    config = tmp_path / "env.yaml"
    config.write_text("network:\n  allowlist:\n    - domain: api.example.com\n")
    port, metrics = free_port(), free_port()
    egress_proxy = Path(sys.executable).parent / "egress-proxy"
    errors = tmp_path / "stderr"
    with errors.open("wb") as sink:
        child = subprocess.Popen(
            [str(egress_proxy), "dns", "--config", str(config), "--listen", f"127.0.0.1:{port}",
             "--metrics", f"127.0.0.1:{metrics}", "--log-format", "json"],
            stdout=subprocess.DEVNULL, stderr=sink,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 20

        def lines() -> list[dict[str, str]]:
            return [json.loads(line) for line in errors.read_text().splitlines()]

        while len(lines()) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        [ready] = lines()
        assert (ready["level"], ready["logger"]) == ("warning", "egress.dns")
        assert ready["message"] == f"egress-proxy dns: answering on 127.0.0.1:{port} (UDP and TCP)"

        connection = http.client.HTTPConnection("127.0.0.1", metrics, timeout=5)
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
        connection.close()
        assert f'egress_build_info{{version="{version()}"}} 1.0' in text.splitlines()

        config.write_text("network: [")  # a reload that fails keeps the running allowlist
        child.send_signal(signal.SIGHUP)
        while len(lines()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        refused = lines()[1]
        assert (refused["level"], refused["logger"]) == ("error", "egress.dns")
        assert refused["message"].startswith("dns: reload refused, keeping the running allowlist: ")
    finally:
        child.terminate()
        assert child.wait(10) == 0
