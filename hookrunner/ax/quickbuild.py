"""The client ``hookrunner claude install`` wires: the C quick client when a C compiler is
there, else the Python one (D394).

Claude Code starts the installed command twice per tool call. The Python quick client
(``quickclient.py``) costs an interpreter start (~10-20 ms); ``quickclient.c``, the same
protocol in C, costs a fork and an exec. ``install`` compiles it with ``cc`` (``$CC``
when set) into the user's ``~/.claude`` (beside the moved hooks, a directory only the
user writes: the agent's tool user cannot swap it, D191), one binary per installation
(``hookrunner-client-<FNV of the installation>``), replaced atomically; a compiler that
is missing or fails leaves the Python client, which is said on stderr. Both fall back
to the full runner when no warm runner answers, and both exit 127 when the installation
is gone, which the installed command turns into a block (``claudeinstall``, D395).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from sandbox_egress.hookrunner.ax import quickclient

SOURCE = Path(__file__).with_name("quickclient.c")
COMPILE_TIMEOUT = 120.0


def python_client(runner: str) -> list[str]:
    """The words of the Python client before ``fire``."""
    return [os.path.abspath(sys.executable), "-I", "-S", _script(), runner]


def _script() -> str:
    return os.path.realpath(quickclient.__file__)


def compiler() -> str | None:
    chosen = os.environ.get("CC") or "cc"
    return shutil.which(chosen)


def client(runner: str, home: Path | None) -> tuple[list[str], str | None]:
    """(the words of the client before ``fire``, a notice when it is the Python one)."""
    cc = compiler()
    if home is None or cc is None or not SOURCE.is_file():
        why = "no C compiler (cc or $CC)" if cc is None else "no $HOME or no C source"
        return python_client(runner), f"{why}: the hook command is the Python quick client"
    prefix = quickclient.installation()
    target = home / ".claude" / f"hookrunner-client-{quickclient._digest(prefix)}"
    problem = build(cc, target)
    if problem is not None:
        return python_client(runner), f"{problem}: the hook command is the Python quick client"
    python = os.path.abspath(sys.executable)
    return [str(target), python, _script(), runner], None


def build(cc: str, target: Path) -> str | None:
    """Compile the C client into ``target`` (atomically); the problem, or None."""
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    os.close(handle)
    try:
        done = subprocess.run(
            [cc, "-O2", "-std=c11", "-o", temporary, str(SOURCE)],
            capture_output=True,
            text=True,
            timeout=COMPILE_TIMEOUT,
        )
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["?"])[-1][:200]
            return f"{cc} failed ({last})"
        os.chmod(temporary, 0o755)
        os.replace(temporary, target)
        return None
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{cc} could not run ({type(exc).__name__})"
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
