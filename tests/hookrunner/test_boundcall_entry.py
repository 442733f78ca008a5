"""The boundary's lean entry in this process, without root (issue 44, D430; D530).

What ``boundcall`` decides before a namespace is made: the call's arguments (a
malformed call is refused, never run), the command's base64, the shell, the private
file for the final directory, the program found on the caller's PATH, the child run
with only the descriptors it should get and its status as a shell reports it, the
directory reported back; and ``bound.original``'s reading of a wrapping that is not
exactly this runner's. Running the command under the namespace is the privileged
suites' business (test_fire_boundary.py, test_bound_lean.py).
"""

from __future__ import annotations

import base64
import binascii
import os
import shlex
import signal
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_egress.hookrunner.enforce import bound, boundcall

ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
# ``_wait`` forks (the entry is single-threaded; a test worker may not be): the child
# only closes descriptors and execs, nothing that could wait on another thread's lock.
pytestmark = pytest.mark.filterwarnings(
    "ignore:This process .* is multi-threaded, use of fork:DeprecationWarning"
)
REFUSAL = "hookrunner boundary: {}; the command was not run\n"


@pytest.fixture(autouse=True)
def _signals() -> Iterator[None]:
    """``_wait`` forwards SIGTERM, SIGHUP and SIGINT to its child: put the handlers back."""
    kept = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    yield
    for signum, handler in kept.items():
        signal.signal(signum, handler)


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    ("text", "command"),
    [("", ""), (b64("ls -la"), "ls -la"), (b64("é ✓"), "é ✓"), ("/w==", "\udcff")],
)
def test_the_command_is_decoded_strictly(text: str, command: str) -> None:
    assert boundcall.decode(text) == command


@pytest.mark.parametrize("text", ["bHM=\n", "bHM", "b H M=", "bHM=="])
def test_a_text_outside_the_alphabet_or_unpadded_is_no_command(text: str) -> None:
    with pytest.raises(binascii.Error):
        boundcall.decode(text)


@pytest.mark.parametrize(
    ("shell", "program"),
    [("/bin/zsh", "zsh"), ("/usr/bin/bash", "bash"), ("/usr/bin/fish", "bash"), ("", "bash")],
)
def test_the_shell_is_the_callers_when_claude_code_runs_commands_with_it(
    shell: str, program: str
) -> None:
    assert boundcall.shell({"SHELL": shell}) == program
    assert boundcall.shell({}) == "bash"


def test_a_refusal_is_one_line_and_the_shells_cannot_run_status(
    capfd: pytest.CaptureFixture[str],
) -> None:
    assert boundcall.refuse("why") == 126 == boundcall.REFUSED
    assert capfd.readouterr().err == REFUSAL.format("why")


def test_the_private_file_is_new_empty_and_the_users_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    path = Path(boundcall._private_file())
    assert path.parent == tmp_path and path.name.startswith("hookrunner-cwd-")
    assert (stat.S_IMODE(path.stat().st_mode), path.read_bytes()) == (0o600, b"")
    assert boundcall._private_file() != str(path)
    monkeypatch.setenv("TMPDIR", "relative/dir")  # not absolute: /tmp
    other = Path(boundcall._private_file())
    try:
        assert other.parent == Path("/tmp")
    finally:
        other.unlink()


def test_the_program_is_found_as_execvpe_would(tmp_path: Path) -> None:
    script = tmp_path / "tool"
    script.write_text("#!/bin/sh\n")
    assert boundcall._program(["tool"], {"PATH": f"/nonexistent:{tmp_path}"}) is None  # not x
    script.chmod(0o755)
    (tmp_path / "dir").mkdir(mode=0o755)
    assert boundcall._program(["tool"], {"PATH": f"/nonexistent:{tmp_path}"}) == str(script)
    assert boundcall._program(["dir"], {"PATH": str(tmp_path)}) is None
    assert boundcall._program(["./anything"], {}) == "./anything"
    assert boundcall._program(["sh"], {"PATH": "/bin"}) == "/bin/sh"


def test_the_child_exits_with_its_status_or_128_plus_its_signal() -> None:
    assert boundcall._wait(["sh", "-c", "exit 3"], ENV, None) == 3
    assert boundcall._wait(["sh", "-c", "kill -TERM $$"], ENV, None) == 128 + signal.SIGTERM
    assert boundcall._wait(["true"], ENV, None) == 0


def test_the_child_gets_the_kept_descriptor_and_no_other(tmp_path: Path) -> None:
    read, write = os.pipe()
    other_read, other_write = os.pipe()
    os.set_inheritable(other_write, True)  # inheritable, still closed for the child
    try:
        probe = (
            f"echo kept >&{write}; "
            f"if (: >&{other_write}) 2>/dev/null; then echo open; else echo closed; fi >&{write}"
        )
        assert boundcall._wait(["bash", "-c", probe], ENV, write) == 0
        os.close(write)
        os.close(other_write)
        assert os.read(read, 100) == b"kept\nclosed\n"
        assert os.read(other_read, 100) == b""
    finally:
        os.close(read)
        os.close(other_read)


def test_what_cannot_be_started_is_refused(capfd: pytest.CaptureFixture[str]) -> None:
    assert boundcall._wait(["no-such-program-here"], ENV, None) == 126
    assert boundcall._wait(["sh", "-c", "a\0b"], ENV, None) == 126
    assert boundcall._wait(["true"], {**ENV, "X": "a\0b"}, None) == 126
    assert boundcall._wait(["/nonexistent/program"], ENV, None) == 126
    assert capfd.readouterr().err == (
        REFUSAL.format("cannot start no-such-program-here: not found")
        + REFUSAL.format("a NUL byte cannot be passed to a program") * 2
        + "hookrunner boundary: cannot start /nonexistent/program: No such file or directory\n"
    )


def test_the_final_directory_is_reported_and_the_descriptor_closed(tmp_path: Path) -> None:
    written = tmp_path / "cwd"
    written.write_text("/some/where\n")
    read, write = os.pipe()
    boundcall._report_directory(str(written), write)
    assert os.read(read, 100) == b"/some/where"  # closed: the read ends there
    assert os.read(read, 100) == b""
    os.close(read)
    read, write = os.pipe()
    boundcall._report_directory(str(tmp_path / "missing"), write)  # nothing to report
    assert os.read(read, 100) == b""
    os.close(read)


def test_the_virtual_environment_is_the_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "prefix", "/elsewhere")
    monkeypatch.setattr(sys, "exec_prefix", "/elsewhere")
    boundcall._venv_prefix()
    venv = os.path.dirname(os.path.dirname(sys.executable))
    assert (sys.prefix, sys.exec_prefix) == (venv, venv)
    assert os.path.isfile(os.path.join(venv, "pyvenv.cfg"))


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        ([], "usage: bound --workspace DIR [--cwd-fd N] BASE64-COMMAND"),
        (["--workspace"], "usage: bound --workspace DIR [--cwd-fd N] BASE64-COMMAND"),
        ([b64("true")], "usage: bound --workspace DIR [--cwd-fd N] BASE64-COMMAND"),
        (["--workspace", "WS", b64("a"), b64("b")],
         "usage: bound --workspace DIR [--cwd-fd N] BASE64-COMMAND"),
        (["--workspace", "WS", "--cwd-fd", "3"],
         "usage: bound --workspace DIR [--cwd-fd N] BASE64-COMMAND"),
        (["--workspace", "WS", "not base64!"], "the command is not base64 of UTF-8 text"),
        (["--workspace", "WS", b64("true\0rm")],
         "the command holds a NUL byte, which no shell can run"),
        (["--workspace", "WS/missing", b64("true")],
         "the workspace 'WS/missing' is not a directory"),
    ],
)  # fmt: skip
def test_a_malformed_call_is_refused_never_run(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], argv: list[str], why: str
) -> None:
    args = [word.replace("WS", str(tmp_path)) for word in argv]
    assert boundcall.main(args) == 126
    assert capfd.readouterr().err == REFUSAL.format(why.replace("WS", str(tmp_path)))
    assert bound.main(args) == 126  # D381's spelling, the same entry


def wrapped(command: str, workspace: Path) -> str:
    return bound.shell_command(command, workspace)


def test_a_wrapping_not_exactly_this_runners_is_not_read(tmp_path: Path) -> None:
    text = wrapped("echo hi", tmp_path)
    assert bound.original(text) == "echo hi"
    root = shlex.quote(bound.package_root())
    assert bound.original(text.replace(f" {root} ", " /other/root ", 1)) is None
    boot = shlex.quote(bound.BOOT)
    assert bound.original(text.replace(boot, shlex.quote(bound.BOOT + " "), 1)) is None
    assert bound.original(text.replace(bound.encode("echo hi"), "ZWNobyBoaQ=", 1)) is None
    python = shlex.quote(sys.executable)
    assert bound.original(text.replace(python, "'unclosed", 1)) is None
    assert bound.original(text.replace(python, "/usr/bin/python3", 1)) is None


def test_the_definitions_descriptor_is_sourced_only_when_open() -> None:
    read, write = os.pipe()
    assert boundcall._readable(read) is True
    os.close(read)
    os.close(write)
    assert boundcall._readable(read) is False
