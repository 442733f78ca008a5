"""The hook kernel's layering: the base package knows no second dialect.

Every module of ``hookrunner`` outside ``hookrunner/ax/`` is parsed (ast) and
must not import ``hookrunner.ax`` in any spelling (``import hookrunner.ax``,
``from hookrunner.ax... import``, ``from hookrunner import ax``, a relative
import). The one exception is ``hookrunner/cli.py``: the command line is what
wires the dialects together (``hookrunner fire``, ``hookrunner validate``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "hookrunner"
WIRING = {"cli.py"}
BASE_MODULES = sorted(
    p for p in PACKAGE.rglob("*.py") if "ax" not in p.relative_to(PACKAGE).parts[:-1]
)


def ax_imports(source: str, module_parts: tuple[str, ...]) -> list[str]:
    """The ``hookrunner.ax`` imports of one module's source (``module_parts``: its package)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if _is_ax(a.name)]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against the module's package
                anchor = module_parts[: len(module_parts) - node.level + 1]
                base = ".".join((*anchor, *([base] if base else [])))
            names = [base] + [f"{base}.{a.name}" for a in node.names]
            found += [n for n in names if _is_ax(n)][:1]
    return [name.removeprefix("sandbox_egress.") for name in found]


def _is_ax(name: str) -> bool:
    name = name.removeprefix("sandbox_egress.")  # the import package (D140)
    return name == "hookrunner.ax" or name.startswith("hookrunner.ax.")


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("import hookrunner.ax", ["hookrunner.ax"]),
        ("import hookrunner.ax.model as m", ["hookrunner.ax.model"]),
        ("from hookrunner.ax.model import AxEvent", ["hookrunner.ax.model"]),
        ("from hookrunner import ax", ["hookrunner.ax"]),
        ("from . import ax", ["hookrunner.ax"]),
        ("from .ax.session import AxSession", ["hookrunner.ax.session"]),
        ("def f():\n    import hookrunner.ax.cli", ["hookrunner.ax.cli"]),
        ("from sandbox_egress.hookrunner.ax import cli", ["hookrunner.ax"]),
        ("from sandbox_egress.hookrunner import ax", ["hookrunner.ax"]),
        ("import hookrunner.axe", []),
        ("from hookrunner import model", []),
    ],
)
def test_the_checker_sees_every_spelling(source: str, found: list[str]) -> None:
    assert ax_imports(source, ("hookrunner",)) == found


@pytest.mark.parametrize("path", BASE_MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_base_module_imports_the_ax_dialect(path: Path) -> None:
    relative = path.relative_to(PACKAGE)
    package = ("hookrunner", *relative.parts[:-1])
    found = ax_imports(path.read_text(), package)
    if str(relative) in WIRING:
        assert found, "cli.py wires the AX dialect; if it no longer does, drop the exception"
    else:
        assert found == []


def test_the_base_modules_were_found() -> None:
    names = {str(p.relative_to(PACKAGE)) for p in BASE_MODULES}
    assert {"kernel.py", "metrics.py", "report.py", "outcome.py", "cli.py"} <= names
    assert not any(n.startswith("ax/") for n in names)
