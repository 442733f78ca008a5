"""Opening paths inside a directory so that no concurrent rename or symlink can lead outside.

The file tools resolve a path once (``os.path.realpath``) to find where it
points, then **open** that resolved, relative path from a descriptor of the
workspace root without following any symlink on the way:

* where the kernel has ``openat2`` (Linux 5.6+), one system call with
  ``RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS``;
* otherwise component by component: ``openat(dirfd, name, O_NOFOLLOW |
  O_DIRECTORY)`` for each directory, then the last name with ``O_NOFOLLOW``.

Invariants:
* a symlink (or ``..``) that appears between the resolution and the open makes
  the open fail (``RaceError``); it is never followed, so a concurrent process
  that flips a symlink between inside and outside can make an operation fail
  but never make it touch anything outside the root;
* everything after the open works on descriptors: ``fstat``, reads and writes
  through the fd, ``mkdirat`` and ``unlinkat`` relative to a directory fd;
* every open is ``O_NONBLOCK``: a FIFO or device does not hang the opener, and
  ``fstat`` tells the caller what it opened before it reads or writes.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import stat
from collections.abc import Sequence

from sandbox_egress.common.contain import Credentials
from sandbox_egress.common.invariant import InvariantError

RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
_SYS_OPENAT2 = 437  # the same number on every Linux architecture (unified table since 5.6)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class RaceError(OSError):
    """A path component changed (became a symlink, vanished) between resolving and opening."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _load_syscall() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        function = libc.syscall
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_long
    return function


_syscall = _load_syscall()
_openat2_works: bool | None = None


def _openat2(dirfd: int, path: str, flags: int, mode: int) -> int:
    if _syscall is None:
        raise InvariantError("openat2 is called only where libc has syscall()")
    mode = mode if flags & os.O_CREAT else 0  # openat2 refuses a mode it would not use
    how = _OpenHow(flags, mode, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS)
    fd = _syscall(
        ctypes.c_long(_SYS_OPENAT2),
        ctypes.c_int(dirfd),
        ctypes.c_char_p(os.fsencode(path)),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), path)
    return int(fd)


def has_openat2() -> bool:
    """Whether this kernel answers openat2 (probed once, on the root directory)."""
    global _openat2_works
    if _openat2_works is None:
        _openat2_works = False
        if _syscall is not None:
            try:
                os.close(_openat2(os.open("/", _DIR_FLAGS), ".", _DIR_FLAGS, 0))
                _openat2_works = True
            except OSError:
                pass  # ENOSYS (old kernel), EPERM (a seccomp filter), ...
    return _openat2_works


def _raced(exc: OSError, path: str) -> OSError:
    if exc.errno in (errno.ELOOP, errno.EXDEV):
        return RaceError(exc.errno, "a path component changed while it was opened", path)
    return exc


def _symlink_as_loop(exc: OSError, dirfd: int, name: str) -> OSError:
    """O_DIRECTORY | O_NOFOLLOW on a symlink says ENOTDIR; tell it from a regular file."""
    if exc.errno == errno.ENOTDIR:
        try:
            if stat.S_ISLNK(os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_mode):
                return OSError(errno.ELOOP, os.strerror(errno.ELOOP), name)
        except OSError:
            pass
    return exc


def open_beneath(
    root_fd: int, parts: Sequence[str], flags: int, mode: int = 0o666, *, use_openat2: bool = True
) -> int:
    """Open ``parts`` (a resolved path relative to ``root_fd``, no ``..``) without following links.

    ``parts == []`` opens the root itself. ``O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK``
    are always added. Raises ``RaceError`` when a component is (now) a symlink.
    """
    if any(p in ("", ".", "..") or "/" in p for p in parts):
        raise ValueError(f"not a resolved relative path: {parts!r}")
    flags |= os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    relative = "/".join(parts) or "."
    if use_openat2 and has_openat2():
        try:
            return _openat2(root_fd, relative, flags, mode)
        except OSError as exc:
            raise _raced(exc, relative) from None
    dirfd = open_directory(root_fd, parts[:-1], use_openat2=False)
    try:
        if not parts:
            return os.open(".", flags, mode, dir_fd=dirfd)
        return os.open(parts[-1], flags, mode, dir_fd=dirfd)
    except OSError as exc:
        raise _raced(exc, relative) from None
    finally:
        os.close(dirfd)


def open_directory(
    root_fd: int,
    parts: Sequence[str],
    *,
    create: bool = False,
    use_openat2: bool = True,
    owner: Credentials | None = None,
) -> int:
    """A descriptor of the directory ``parts`` below ``root_fd``, walked component by component.

    With ``create``, missing directories are made with ``mkdirat`` on the way
    (mode 0777 minus umask), given to ``owner`` when there is one. A component
    that is a symlink fails (``RaceError``).
    """
    if not create and use_openat2 and parts and has_openat2():
        return open_beneath(root_fd, parts, os.O_RDONLY | os.O_DIRECTORY)
    fd = os.dup(root_fd)
    try:
        for part in parts:
            if part in ("", ".", "..") or "/" in part:
                raise ValueError(f"not a resolved relative path: {parts!r}")
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                made = False
                # made meanwhile (maybe as a symlink: the open below refuses it)
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o777, dir_fd=fd)
                    made = True
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    raise _raced(_symlink_as_loop(exc, fd, part), part) from None
                if made and owner is not None:
                    os.fchown(child, owner.uid, owner.gid)
            except OSError as exc:
                raise _raced(_symlink_as_loop(exc, fd, part), part) from None
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise
