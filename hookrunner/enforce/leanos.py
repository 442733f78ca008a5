"""The few ``shutil``/``tempfile``/``shlex`` helpers the boundary needs, on ``os`` alone (D430).

Every Bash call of ``fire`` starts a Python for the boundary (``enforce.boundcall``)
and pays for what ``toolns`` imports: ``shutil``, ``tempfile`` and ``shlex`` pull in
``re``, ``fnmatch``, ``random`` and ``threading`` (~20 ms of CPU a call here). These
are the same operations, with the standard library's rules, on ``os`` and ``stat``.

``has_capability`` is ``contain``'s (which imports it from here).

Invariants: ``which`` finds what ``shutil.which`` finds (a regular or linked file the
caller may execute, first in PATH order); ``quote`` gives what ``shlex.quote`` gives;
``make_temp_dir`` makes a new directory (mode 0700, never an existing one) where
``tempfile.gettempdir`` would; ``remove_tree`` never follows a symbolic link.
"""

from __future__ import annotations

import contextlib
import os
import stat

_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-")


def has_capability(bit: int) -> bool:
    """Whether this process has the capability in its effective set (Linux /proc)."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> bit & 1)
    return False


def which(name: str, path: str) -> str | None:
    """``shutil.which(name, path=path)`` on POSIX."""
    if os.path.dirname(name):
        return name if _runnable(name) else None
    seen: set[str] = set()
    for directory in path.split(os.pathsep):
        if directory in seen:
            continue
        seen.add(directory)
        candidate = os.path.join(directory, name)
        if _runnable(candidate):
            return candidate
    return None


def _runnable(path: str) -> bool:
    return os.path.exists(path) and os.access(path, os.X_OK) and not os.path.isdir(path)


def quote(word: str) -> str:
    """``shlex.quote``: the word as is when every character is safe, else single-quoted."""
    if word and all(char in _SAFE for char in word):
        return word
    return "'" + word.replace("'", "'\"'\"'") + "'"


def join(words: list[str]) -> str:
    """``shlex.join``."""
    return " ".join(quote(word) for word in words)


def temp_root() -> str:
    """Where ``tempfile.gettempdir`` puts things: ``TMPDIR``, ``TEMP``, ``TMP``, then the
    system's directories, the first one this process can write to."""
    named = [os.environ.get(name, "") for name in ("TMPDIR", "TEMP", "TMP")]
    for directory in [*named, "/tmp", "/var/tmp", "/usr/tmp"]:
        if directory and os.path.isdir(directory) and os.access(directory, os.W_OK | os.X_OK):
            return os.path.abspath(directory)
    return os.getcwd()


def make_temp_dir(prefix: str) -> str:
    """``tempfile.mkdtemp(prefix=prefix)``: a new directory of mode 0700."""
    root = temp_root()
    for _ in range(100):
        path = os.path.join(root, prefix + os.urandom(6).hex())
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
            return path
    raise FileExistsError(f"no new directory in {root}")


def copy_file(source: str, target: str) -> None:
    """``shutil.copyfile`` to a name that does not exist yet (never through a link); in
    the kernel (``copy_file_range``, as ``shutil`` does with ``sendfile``) where it can."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with open(source, "rb", buffering=0) as reading:
        handle = os.open(target, flags, 0o600)
        try:
            try:
                while os.copy_file_range(reading.fileno(), handle, 1 << 24):
                    pass
                return
            except OSError:  # not between these file systems: copied here
                os.lseek(handle, 0, os.SEEK_SET)
                os.ftruncate(handle, 0)
                reading.seek(0)
            while chunk := reading.read(1 << 20):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(handle, view) :]
        finally:
            os.close(handle)


def remove_tree(path: str) -> None:
    """``shutil.rmtree(path, ignore_errors=True)``: links removed, never followed."""
    with contextlib.suppress(OSError):
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            os.unlink(path)
            return
    for directory, subdirectories, files in os.walk(path, topdown=False):
        for name in files:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, name))
        for name in subdirectories:
            full = os.path.join(directory, name)
            with contextlib.suppress(OSError):
                if os.path.islink(full):
                    os.unlink(full)
                else:
                    os.rmdir(full)
    with contextlib.suppress(OSError):
        os.rmdir(path)
