"""What glibc's malloc holds in this process, for measurements that must see OpenSSL's and
cryptography's allocations, not only Python's (bench/connmem.py,
tests/runtime/test_idlebios.py). glibc only: `mallinfo2` is its own."""

from __future__ import annotations

import ctypes


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                     "fsmblks", "uordblks", "fordblks", "keepcost")
    ]  # fmt: skip


def malloc_in_use() -> int:
    """Bytes glibc's malloc has handed out and not taken back (arenas and mmapped blocks)."""
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _MallInfo2
    info = libc.mallinfo2()
    return int(info.uordblks + info.hblkhd)
