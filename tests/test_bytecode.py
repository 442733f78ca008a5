"""Every product module can be written as bytecode on every Python the project supports.

The image compiles with Python 3.13 (`compileall -o 1`), which refuses to write a .pyc
whose constants hold a lone surrogate; 3.12 writes it. A docstring spelling `"\\ud800"`
without a raw string did that and failed the image build, not a unit test: every string
constant of every module must be encodable as UTF-8."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.product import PRODUCT

REPO = Path(__file__).resolve().parent.parent
MODULES = sorted(path for package in PRODUCT for path in (REPO / package).rglob("*.py"))


def unencodable(source: str) -> list[int]:
    """Lines of string constants that are not UTF-8 text (a lone surrogate)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                node.value.encode("utf-8")
            except UnicodeEncodeError:
                lines.append(node.lineno)
    return lines


def test_a_lone_surrogate_in_a_constant_is_found() -> None:
    assert unencodable('"""a \\ud800 b"""\nx = "\\\\ud800"\n') == [1]


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(REPO)) for p in MODULES])
def test_every_string_constant_is_utf8_text(path: Path) -> None:
    assert unencodable(path.read_text(encoding="utf-8")) == []
