"""runtime/engine/patches.py: the one list of the engine's changes below mitmproxy's hooks.

Every module of runtime/engine/ has a row (or is named a support module), every row
resolves, names a decision that exists and a test that exists, and installs what it says
it replaces: checked in a fresh interpreter, before and after each stage."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox_egress.runtime.engine import lean, patches
from sandbox_egress.runtime.engine.patches import PATCHES, Stage

REPO = Path(__file__).resolve().parents[2]
ENGINE = REPO / "runtime" / "engine"


def _module_of(path: str) -> str:
    return path.partition(":")[0].rsplit(".", 1)[-1]


def test_every_engine_module_has_a_row_or_is_support() -> None:
    named = {row.name.split(".")[0] for row in PATCHES} | {
        _module_of(row.install) for row in PATCHES if row.stage is not Stage.OWNED
    }
    modules = {path.stem for path in ENGINE.glob("*.py")}
    assert modules - named - set(patches.SUPPORT) == set()
    assert set(patches.SUPPORT) <= modules


def test_names_are_unique_and_rows_resolve() -> None:
    names = [row.name for row in PATCHES]
    assert len(names) == len(set(names))
    for row in PATCHES:
        assert callable(patches.resolve(row.install)), row.name
        for replacement in row.installs:
            assert callable(patches.resolve(replacement)), (row.name, replacement)
        if row.installs:
            assert len(row.installs) == len(row.replaces), row.name


def test_each_decision_and_pinning_test_exists() -> None:
    decisions = (REPO / "docs" / "decisions.md").read_text(encoding="utf-8")
    for row in PATCHES:
        assert re.search(rf"\*\*{row.decision} —", decisions), (row.name, row.decision)
        file, _, test = row.pinned_by.partition("::")
        text = (REPO / file).read_text(encoding="utf-8")
        assert not test or f"def {test}(" in text, (row.name, row.pinned_by)


def test_the_stages_are_in_the_order_a_run_meets_them() -> None:
    order = list(Stage)
    stages = [order.index(row.stage) for row in PATCHES]
    assert stages == sorted(stages)


def test_the_addon_rows_are_the_engines_addons_in_table_order() -> None:
    kinds = [type(addon) for addon in lean.lean_addons()]
    rows = [patches.resolve(row.install) for row in PATCHES if row.stage is Stage.ADDON]
    assert all(kind in kinds for kind in rows)
    assert [kinds.index(kind) for kind in rows] == sorted(kinds.index(kind) for kind in rows)


def test_the_connection_rows_are_what_a_new_connection_gets() -> None:
    import inspect

    source = inspect.getsource(lean.CoalescingProxyserver.register_connection)
    assert "patches.attach(handler)" in source
    seen: list[str] = []
    for row in patches.rows(Stage.CONNECTION):
        seen.append(patches.resolve(row.install).__name__)
    assert seen == ["coalesce_root", "widen", "attach", "answer_hooks_inline", "lighten_watchdog"]


CHECK = """
import json, sys
from sandbox_egress.runtime.engine import patches
from sandbox_egress.runtime.engine.patches import PATCHES, Stage
engine = sys.argv[1]
before = {row.name: patches.in_place(row) for row in PATCHES if row.installs}
patches.install(Stage.IMPORT, engine)
patches.install(Stage.PROCESS, engine, {"on_pause": lambda: None})
if engine != "mitmdump":
    patches.install(Stage.ENGINE, engine)
from sandbox_egress.addons.layers import limits
from sandbox_egress.addons import upstream
limits.install(lambda limit: None)
upstream.install()
from sandbox_egress.addons import timeouts
timeouts.install(1.0)
after = {row.name: patches.in_place(row) for row in PATCHES if row.installs}
print(json.dumps({"before": before, "after": after, "active": patches.active(engine)}))
"""


def _run(engine: str) -> dict[str, dict[str, bool] | list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", CHECK, engine],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    found: dict[str, dict[str, bool] | list[str]] = json.loads(done.stdout)
    return found


@pytest.mark.parametrize("engine", ["lean", "mitmdump"])
def test_each_row_installs_what_it_names(engine: str) -> None:
    found = _run(engine)
    classes = [row for row in PATCHES if row.installs]
    assert found["before"] == {row.name: False for row in classes}
    expected = {
        row.name: row.stage is Stage.OWNED or engine != "mitmdump" or row.mitmdump
        for row in classes
    }
    assert found["after"] == expected
    active = found["active"]
    assert isinstance(active, list)
    if engine == "mitmdump":
        assert [row.name for row in PATCHES if row.name in active] == [
            row.name for row in PATCHES if row.mitmdump
        ]
    else:
        assert active == [row.name for row in PATCHES if not row.switch]  # switched: off
