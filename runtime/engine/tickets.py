"""No TLS 1.3 session tickets to clients (issue 36, D301).

After a client's Finished, OpenSSL sends two NewSessionTicket messages by default: two
tickets sealed with the context's key, in a `send` of their own (mitmproxy hands them on as
soon as the handshake completes, before the client's request exists). A client that never
resumes (Go's default client, hey, Python's `ssl`/urllib3, pip, a fresh `curl` per URL)
throws them away. `SSL_OP_NO_TICKET` does not stop them in TLS 1.3: OpenSSL then sends
stateful tickets instead (tests/runtime/test_tickets.py checks both). Only
`SSL_set_num_tickets(ssl, 0)` does, and neither pyOpenSSL nor cryptography's bindings
expose it.

cryptography links OpenSSL statically into its extension module and exports none of its
symbols, but the module keeps its symbol table. `resolve()` reads the addresses of
`SSL_set_num_tickets` and `SSL_get_num_tickets` there, places them with two functions the
bindings do expose (`SSL_CTX_new` and `SSL_new`: both must give the same load address), and
checks them on a throwaway connection: the getter says OpenSSL's default (2), the setter
takes 0, the getter then says 0. Anything else (another ELF layout, a stripped module, a
changed default) and `resolve()` answers None: tickets are sent as before, nothing else
changes.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.bindings import _rust
from cryptography.hazmat.bindings._rust import _openssl
from OpenSSL import SSL

OPENSSL_DEFAULT_TICKETS = 2
_SHT_SYMTAB = 2
_SECTION = struct.Struct("<IIQQQQIIQQ")  # Elf64_Shdr
_SYMBOL = struct.Struct("<IBBHQQ")  # Elf64_Sym
_ANCHORS = ("SSL_CTX_new", "SSL_new")  # functions the cffi bindings expose
_CFFI = "_cffi_d_"  # cffi's `addressof` gives its direct-call wrapper of a function
_WRAPPERS = tuple(_CFFI + name for name in _ANCHORS)
_WANTED = ("SSL_set_num_tickets", "SSL_get_num_tickets")


def symbol_values(path: Path, names: tuple[str, ...]) -> dict[str, int]:
    """`names`' values (`st_value`) in the symbol table of the 64-bit little-endian ELF
    file at `path`; a name absent there is absent from the answer."""
    with path.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as elf:
        if elf[:6] != b"\x7fELF\x02\x01":
            return {}
        (shoff,) = struct.unpack_from("<Q", elf, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", elf, 0x3A)
        sections = [_SECTION.unpack_from(elf, shoff + i * shentsize) for i in range(shnum)]
        symtab = next((s for s in sections if s[1] == _SHT_SYMTAB), None)
        if symtab is None or symtab[9] != _SYMBOL.size:
            return {}
        strtab = sections[symtab[6]]
        strings = elf[strtab[4] : strtab[4] + strtab[5]]
        offsets = {}
        for name in names:
            at = strings.find(b"\0" + name.encode() + b"\0")
            if at >= 0:
                offsets[at + 1] = name
        found: dict[str, int] = {}
        start, end = symtab[4], symtab[4] + symtab[5]
        for at in range(start, end, _SYMBOL.size):
            st_name, _info, _other, shndx, value, _size = _SYMBOL.unpack_from(elf, at)
            named = offsets.get(st_name)
            if named is not None and shndx != 0 and value:
                found[named] = value
                if len(found) == len(offsets):
                    break
        return found


@dataclass(frozen=True)
class NumTickets:
    """OpenSSL's `SSL_set_num_tickets` / `SSL_get_num_tickets` for pyOpenSSL connections."""

    _set: Any
    _get: Any

    def set(self, conn: SSL.Connection, count: int) -> bool:
        return bool(self._set(_address(conn._ssl), count) == 1)

    def get(self, conn: SSL.Connection) -> int:
        return int(self._get(_address(conn._ssl)))


def _address(cdata: Any) -> int:
    return int(_openssl.ffi.cast("uintptr_t", cdata))


@functools.cache
def resolve() -> NumTickets | None:
    """The two functions, found and checked as the module docstring says; None when not."""
    try:
        values = symbol_values(Path(_rust.__file__ or ""), _WRAPPERS + _WANTED)
    except (OSError, ValueError, struct.error):
        return None
    if any(name not in values for name in _WRAPPERS + _WANTED):
        return None
    bases = {
        _address(_openssl.ffi.addressof(_openssl.lib, name)) - values[_CFFI + name]
        for name in _ANCHORS
    }
    if len(bases) != 1:
        return None
    base = bases.pop()
    found = NumTickets(
        ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t)(
            base + values["SSL_set_num_tickets"]
        ),
        ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.c_void_p)(base + values["SSL_get_num_tickets"]),
    )
    probe = SSL.Connection(SSL.Context(SSL.TLS_SERVER_METHOD))
    if found.get(probe) != OPENSSL_DEFAULT_TICKETS or not found.set(probe, 0):
        return None
    return found if found.get(probe) == 0 else None
