"""Bash's ANSI-C quoting (``$'...'``): the escapes of the bash manual, section QUOTING (pure).

``\\a \\b \\e \\E \\f \\n \\r \\t \\v \\\\ \\' \\" \\?``, ``\\NNN`` (one to three octal
digits), ``\\xHH`` (one or two hex digits), ``\\uHHHH`` / ``\\UHHHHHHHH`` (one to four /
eight), ``\\cX`` (control-X). An unknown escape keeps its backslash. Invariants, as
bash in a UTF-8 locale: the text ends at the first NUL; a byte above 0x7f (``\\xe9``,
``\\351``) becomes the ``surrogateescape`` character ``os.fsdecode`` gives for it, a
``\\u`` escape the character itself.
"""

from __future__ import annotations

_SIMPLE_ESCAPES = {
    "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r",
    "t": "\t", "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?",
}  # fmt: skip
_DIGITS = {"x": (16, 2), "u": (16, 4), "U": (16, 8)}
_HEX = frozenset("0123456789abcdefABCDEF")
_OCTAL = frozenset("01234567")


def _byte(code: int) -> str:
    """``\\xHH`` / ``\\NNN``: one byte; above 0x7f, what ``os.fsdecode`` makes of it."""
    return chr(code) if code < 0x80 else chr(0xDC00 + code)


def _unicode(code: int) -> str:
    """``\\uHHHH`` / ``\\UHHHHHHHH``: a character (bash writes it in UTF-8)."""
    if code > 0x10FFFF:
        return "?"  # not a character at all; in any case not ASCII
    if 0xD800 <= code <= 0xDFFF:  # bash writes the three bytes of its UTF-8 form anyway
        return "".join(_byte(b) for b in chr(code).encode("utf-8", "surrogatepass"))
    return chr(code)


def ansi_c(body: str) -> str:
    """The text of ``$'body'`` as bash makes it (escapes of the bash manual, QUOTING)."""
    out: list[str] = []
    i = 0
    while i < len(body):
        c = body[i]
        if c != "\\" or i + 1 >= len(body):
            out.append(c)
            i += 1
            continue
        e = body[i + 1]
        i += 2
        if e in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[e])
        elif e in _OCTAL:
            j = i - 1
            while j < len(body) and j < i + 2 and body[j] in _OCTAL:
                j += 1
            out.append(_byte(int(body[i - 1 : j], 8) & 0xFF))
            i = j
        elif e in _DIGITS:
            base, most = _DIGITS[e]
            j = i
            while j < len(body) and j < i + most and body[j] in _HEX:
                j += 1
            if j == i:
                out.append("\\" + e)
            else:
                code = int(body[i:j], base)
                out.append(_byte(code) if e == "x" else _unicode(code))
                i = j
        elif e == "c" and i < len(body):
            x = body[i]
            i += 1
            out.append("\x7f" if x == "?" else chr(ord(x.upper()) & 0x1F))
        else:
            out.append("\\" + e)
    text = "".join(out)
    return text.split("\x00", 1)[0]  # bash's string ends at the first NUL
