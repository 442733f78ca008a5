"""No product module is over 400 lines (docs/decisions.md D156).

A module that grows past the limit is split by responsibility, each piece named for what
it holds, not cut at line 400. The failure lists every module over the limit.
"""

from __future__ import annotations

from pathlib import Path

from tests.product import PRODUCT

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 400


def lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def over_the_limit(root: Path) -> dict[str, int]:
    """Every product module of `root` over `MAX_LINES`, with its line count."""
    found = {}
    for package in PRODUCT:
        for path in sorted((root / package).rglob("*.py")):
            if (count := lines(path)) > MAX_LINES:
                found[str(path.relative_to(root))] = count
    return found


def test_no_product_module_is_over_400_lines() -> None:
    assert over_the_limit(ROOT) == {}


def test_the_check_finds_a_module_over_the_limit(tmp_path: Path) -> None:
    (tmp_path / "proxy" / "sub").mkdir(parents=True)
    (tmp_path / "proxy" / "sub" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "proxy" / "full.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "long_test.py").write_text("x = 1\n" * 1000)
    assert over_the_limit(tmp_path) == {"proxy/sub/long.py": MAX_LINES + 1}
