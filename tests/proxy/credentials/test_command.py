"""`command` credentials run real child processes (proxy/credentials/command.py): output
capped, one newline stripped, a timeout kills the whole process group, a grandchild
holding the pipe cannot hold the fetch, a failure never shows what the child printed."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from sandbox_egress.proxy.credentials.base import CacheSettings, CredentialError
from sandbox_egress.proxy.credentials.command import MAX_OUTPUT, CommandSource

SH = "/bin/sh"


def run(script: str, timeout: float = 5.0) -> str:
    source = CommandSource((SH, "-c", script), CacheSettings(timeout=timeout))
    return source.fetch().value.reveal()


def test_the_value_is_stdout_without_one_trailing_newline() -> None:
    assert run("printf 'tok-123\\n\\n'") == "tok-123\n"
    assert run("printf 'tok-123\\n'") == "tok-123"


def test_argv_runs_without_a_shell() -> None:
    source = CommandSource(("/bin/echo", "$HOME;", "`id`"), CacheSettings())
    assert source.fetch().value.reveal() == "$HOME; `id`"


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ("echo the-secret-it-printed >&2; exit 3", "exited with 3"),
        ("printf ''", "printed nothing"),
        (f"head -c {MAX_OUTPUT + 1} /dev/zero | tr '\\0' a", "more than"),
        ("printf '\\377\\376'", "not UTF-8"),
    ],
    ids=["exit-status", "empty", "over-the-cap", "not-utf8"],
)
def test_a_failure_names_the_program_never_its_output(script: str, message: str) -> None:
    with pytest.raises(CredentialError, match=message) as caught:
        run(script)
    assert "the-secret-it-printed" not in str(caught.value)
    assert SH in str(caught.value)


def test_a_missing_program_is_a_failure() -> None:
    with pytest.raises(CredentialError, match="cannot run"):
        CommandSource(("/nonexistent/op", "read"), CacheSettings()).fetch()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return status != "Z"


def test_a_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = f"sleep 300 & echo $! > {pids}; sleep 300"
    with pytest.raises(CredentialError, match="killed"):
        run(script, timeout=1.0)
    grandchild = int(pids.read_text())
    deadline = time.monotonic() + 5
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild)


def test_a_grandchild_holding_the_pipe_does_not_hold_the_fetch(tmp_path: Path) -> None:
    """The leader prints and exits; a daemonised grandchild keeps stdout open for 300 s."""
    pids = tmp_path / "pids"
    script = (
        f"printf 'tok-9'; {sys.executable} -c \"import os,time\n"
        f"if os.fork(): os._exit(0)\nos.setsid()\nopen('{pids}','w').write(str(os.getpid()))\n"
        f'time.sleep(300)" &'
    )
    assert run(script, timeout=30.0) == "tok-9"  # held to its timeout, it would be killed
    if pids.exists():
        pid = int(pids.read_text())
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
