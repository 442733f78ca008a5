"""Start-up and shutdown in the project's own voice: one line each, and at once.

Through the real console script: a taken proxy port, a bad `HOST:PORT`, a CA directory that
is read-only or cannot be created, and the lines SIGTERM writes (README.md#command-line).
"""

from __future__ import annotations

import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandbox_egress.runtime.ca import CA_CERT, ensure_ca
from testbed import procs

EGRESS_PROXY = Path(sys.executable).parent / "egress-proxy"
CONFIG = "network:\n  allowlist:\n    - domain: api.example.test\n"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_proxy(tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "env.yaml"
    config.write_text(CONFIG)
    argv = [str(EGRESS_PROXY), "run", "--config", str(config), "--audit-log", "/dev/null"]
    return subprocess.run(
        [*argv, *options], capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin"}
    )


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_taken_proxy_port_is_one_line_naming_listen(tmp_path: Path, workers: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        result = run_proxy(
            tmp_path,
            *("--listen", f"127.0.0.1:{port}", "--metrics", f"127.0.0.1:{free_port()}"),
            *("--certs", str(tmp_path / "certs"), "--workers", workers),
        )
        print(f"\n[measured] taken port refused after {time.monotonic() - started:.2f} s")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        f"egress-proxy: cannot listen on 127.0.0.1:{port}: Address already in use; choose "
        "another address with --listen HOST:PORT (make run LISTEN=HOST:PORT)\n"
    )


def test_a_bad_host_port_says_what_is_expected(tmp_path: Path) -> None:
    result = run_proxy(tmp_path, "--metrics", "nonsense")
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        "egress-proxy run: error: argument --metrics: expected HOST:PORT, got 'nonsense' "
        "(for example 127.0.0.1:8080 or :8080)"
    )


def test_a_read_only_directory_holding_the_ca_is_only_read(tmp_path: Path) -> None:
    """A Kubernetes Secret mounted as it is: nothing is written, nothing is chmod-ed."""
    certs = tmp_path / "certs"
    ensure_ca(certs)
    certs.chmod(0o500)
    before = {p.name: p.stat().st_mtime_ns for p in certs.iterdir()}
    result = subprocess.run(
        [str(EGRESS_PROXY), "ca", "--certs", str(certs)], capture_output=True, text=True, timeout=60
    )
    assert (result.returncode, result.stdout, result.stderr) == (
        0,
        f"{(certs / CA_CERT).resolve()}\n",
        "",
    )
    assert stat.S_IMODE(certs.stat().st_mode) == 0o500
    assert {p.name: p.stat().st_mtime_ns for p in certs.iterdir()} == before


def test_a_ca_that_cannot_be_created_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    certs = tmp_path / "file" / "certs"
    for argv in (["ca", "--certs", str(certs)],):
        result = subprocess.run(
            [str(EGRESS_PROXY), *argv], capture_output=True, text=True, timeout=60
        )
        assert (result.returncode, result.stdout) == (2, "")
        assert result.stderr == (
            f"egress-proxy: cannot create the CA in {certs}: Not a directory (give --certs a "
            "writable directory, or one that already holds the CA: `egress-proxy ca --certs "
            "DIR`)\n"
        )
    result = run_proxy(
        tmp_path,
        *("--listen", f"127.0.0.1:{free_port()}", "--metrics", f"127.0.0.1:{free_port()}"),
        *("--certs", str(certs)),
    )
    assert (result.returncode, result.stderr.count("\n")) == (2, 1)
    assert result.stderr.startswith(f"egress-proxy: cannot create the CA in {certs}: ")


def test_sigterm_logs_the_drain_and_the_stop(tmp_path: Path) -> None:
    config = tmp_path / "env.yaml"
    config.write_text(CONFIG)
    argv = [str(EGRESS_PROXY), "run", "--config", str(config), "--audit-log", "/dev/null"]
    argv += ["--listen", f"127.0.0.1:{free_port()}", "--metrics", f"127.0.0.1:{free_port()}"]
    argv += ["--certs", str(tmp_path / "certs"), "--drain-seconds", "3"]
    child = procs.start("egress-proxy", argv, tmp_path)
    try:
        procs.wait_until(
            "the banner", lambda: "debug-only" in child.stderr.read_text(), 60, child=child
        )
        status = child.stop(grace=30)
    finally:
        child.stop()
    lines = child.stderr.read_text().splitlines()
    assert status == 0
    assert lines[0] == (
        f"egress-proxy: created a new CA in {tmp_path / 'certs'}: sandboxes must trust its "
        "certificate (--certs is relative to the working directory)"
    )
    assert lines[-2:] == [
        "egress-proxy: SIGTERM: draining, new connections refused; 0 open connections get "
        "up to 3 s",
        "egress-proxy: stopped",
    ]


def test_a_refused_configuration_reads_as_check_says_it(tmp_path: Path) -> None:
    config = tmp_path / "env.yaml"
    config.write_text("netwrok: {}\n")
    argv = [str(EGRESS_PROXY), "run", "--config", str(config)]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    checked = subprocess.run(
        [str(EGRESS_PROXY), "check", str(config)], capture_output=True, text=True, timeout=60
    )
    assert (result.returncode, checked.returncode) == (2, 1)
    assert (
        result.stderr
        == checked.stderr
        == (f"error: {config}:1:1: no 'network' section; did you mean 'network' (not 'netwrok')?\n")
    )


def test_an_unset_variable_says_how_to_set_it(tmp_path: Path) -> None:
    """Issue 48: the installed command on its default configuration, without the demo
    token in its environment: the problem, then what to do about it."""
    argv = [str(EGRESS_PROXY), "run", "--certs", str(tmp_path / "certs")]
    argv += ["--listen", f"127.0.0.1:{free_port()}", "--metrics", f"127.0.0.1:{free_port()}"]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin"}, cwd=tmp_path
    )
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert lines[0].endswith(
        "network.allowlist[0].transform.Authorization: environment variable DEMO_API_TOKEN is not set"
    )
    assert lines[1:] == [
        "hint: give the proxy's environment the variable named above, e.g. "
        "`export DEMO_API_TOKEN=...` before `egress-proxy run` (`make run` takes "
        "config/default.env; a container: `-e DEMO_API_TOKEN=...`), or put the value in a "
        "file and write ${file:/path} instead; `egress-proxy check --no-secrets` checks the "
        "file without its secrets"
    ]
