"""Inline code (``python -c``, Python ``code_execution``, ``perl -e``): what packs cannot see.

The packs read the words of code that is not shell (a ``git`` ... ``push``
sequence, an env-file name), but a program that starts other programs or
evaluates text it builds (``subprocess``, ``os.system``, ``exec``,
``getattr``, ``__import__``, Node's ``child_process``, Perl's backquotes) can
run anything under any spelling. A blocking pack refuses such code as
unverifiable (D91): `starts_programs` names what it found (pure).
"""

from __future__ import annotations

import re

_PYTHON = re.compile(
    r"\b(subprocess|os\s*\.\s*(?:system|popen|exec\w*|spawn\w*|posix_spawn\w*|fork\w*)"
    r"|pty|ctypes|importlib|__import__|__builtins__|getattr|pexpect|plumbum|multiprocessing)\b"
    r"|(?<![\w.])(?:exec|eval|compile|system|popen)\s*\("
    r"|\bfrom\s+os\s+import\b"
)
_OTHER = re.compile(
    r"\b(child_process|execSync|spawnSync|execFile\w*|spawn|exec|system|qx|eval|Function"
    r"|require|import|IO\.popen|Open3|syscall|Process)\b|`"
)


def starts_programs(language: str, code: str) -> str | None:
    """What in ``code`` starts a program or evaluates built text, or None."""
    pattern = _PYTHON if language.startswith(("python", "pypy")) else _OTHER
    match = pattern.search(code)
    return None if match is None else re.sub(r"\s+", "", match.group(0))
