"""Imports run one way: runtime -> addons -> proxy (parsed with `ast`, nothing imported).

* core (`proxy/`): the policy and what it needs; never mitmproxy, never `addons/`,
  never `runtime/`.
* adapter (`addons/`): mitmproxy addons that turn flows into values for the core.
* launcher (`runtime/`): the commands and the modules that start mitmproxy (and the CA
  store it reads).

A module's layer is its folder. `hookrunner/` and `common/` may use the core, never the
adapter or the launcher. Every folder is a subpackage of the one import package
`sandbox_egress` (D140), and every import names it: an import of a bare `proxy` would load
a second copy of a module next to the first. Imports inside functions and under
`TYPE_CHECKING` count like any other.
"""

from __future__ import annotations

import ast
from enum import IntEnum
from pathlib import Path

import pytest

from tests.product import ALLOWED, PRODUCT

REPO = Path(__file__).resolve().parents[2]
PREFIX = "sandbox_egress."


class Layer(IntEnum):
    """A module may import its own layer and the layers below it."""

    CORE = 0
    ADAPTER = 1
    LAUNCHER = 2


LAYERS = {"proxy": Layer.CORE, "addons": Layer.ADAPTER, "runtime": Layer.LAUNCHER}
USERS_OF_THE_CORE = ("hookrunner", "common")  # packages that may use the core only
PACKAGES = PRODUCT  # the subpackages of sandbox_egress
# Every folder of Python that imports the product (the product's own folders included).
IMPORTERS = (*PACKAGES, "tests", "testbed", "bench", "demo", "scripts")


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(package: str) -> dict[str, Path]:
    return {module_name(p): p for p in sorted((REPO / package).rglob("*.py"))}


def imported(path: Path, name: str, *, strip: bool = True) -> set[str]:
    """Every module `path` imports; `from pkg import mod` names `pkg.mod` when mod is one.
    With `strip`, names inside the import package lose its prefix (`proxy.config`)."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name.removeprefix(PREFIX) for name in found} if strip else found


def all_modules(*packages: str) -> dict[str, Path]:
    return {name: path for package in packages for name, path in modules(package).items()}


def layer_of(module: str) -> Layer | None:
    """The layer of an imported module of the three layers (None for anything else)."""
    return LAYERS.get(module.split(".")[0])


LAYERED = all_modules(*LAYERS)


def test_the_import_package_is_the_repositorys_folders() -> None:
    """sandbox_egress/ holds links to the folders, so the build installs one package (D140)."""
    package = REPO / "sandbox_egress"
    links = {p.name: p.readlink() for p in package.iterdir() if p.is_symlink()}
    assert links == {name: Path("..", name) for name in PACKAGES}


@pytest.mark.parametrize("folder", IMPORTERS)
def test_every_import_names_the_import_package(folder: str) -> None:
    wrong = sorted(
        f"{name} -> {target}"
        for name, path in modules(folder).items()
        for target in imported(path, name, strip=False)
        if target.split(".")[0] in PACKAGES
    )
    assert wrong == [], "import sandbox_egress.<package>, never the bare folder name"


@pytest.mark.parametrize("name", sorted(LAYERED))
def test_imports_run_launcher_to_adapter_to_core(name: str) -> None:
    path = LAYERED[name]
    own = layer_of(name)
    assert own is not None
    wrong = sorted(
        f"{target} ({layer.name.lower()})"
        for target in imported(path, name)
        if (layer := layer_of(target)) is not None and layer > own
    )
    assert wrong == [], f"{name} ({own.name.lower()}) imports upward"


CORE = all_modules("proxy")


@pytest.mark.parametrize("name", sorted(CORE))
def test_the_core_never_imports_mitmproxy(name: str) -> None:
    path = CORE[name]
    assert sorted(t for t in imported(path, name) if t.split(".")[0] == "mitmproxy") == []


@pytest.mark.parametrize("package", USERS_OF_THE_CORE)
def test_the_hook_runner_and_common_use_only_the_core(package: str) -> None:
    wrong = sorted(
        f"{name} -> {target}"
        for name, path in modules(package).items()
        for target in imported(path, name)
        if (layer := layer_of(target)) is not None and layer is not Layer.CORE
    )
    assert wrong == []


def test_a_wrong_direction_import_is_found(tmp_path: Path) -> None:
    """The parser sees lazy, aliased and `from package import module` imports."""
    source = tmp_path / "probe.py"
    source.write_text(
        "def f():\n"
        "    from sandbox_egress.addons import egress as e\n"
        "    import sandbox_egress.runtime.launcher\n"
        "    from sandbox_egress.runtime.cli import main\n"
        "    import proxy.config\n"
    )
    found = imported(source, "proxy.probe")
    assert {"addons.egress", "runtime.launcher", "runtime.cli"} <= found
    assert layer_of("runtime.cli") is Layer.LAUNCHER
    assert "proxy.config" in imported(source, "proxy.probe", strip=False)
    assert "sandbox_egress.addons.egress" in imported(source, "proxy.probe", strip=False)


def test_the_core_has_no_import_cycle() -> None:
    """A cycle hides which module owns a rule (issue 25: config -> redact -> decision -> config,
    because a policy rule lived in the redaction module). `TYPE_CHECKING` imports count."""
    core = sorted(CORE)
    edges = {n: sorted(t for t in imported(CORE[n], n) if t in CORE and t != n) for n in core}
    cycles: list[list[str]] = []

    def visit(name: str, path: list[str]) -> None:
        for target in edges[name]:
            if target == path[0]:
                cycles.append([*path, target])
            elif target not in path and target > path[0]:  # each cycle once, from its least
                visit(target, [*path, target])

    for name in core:
        visit(name, [name])
    assert cycles == []


@pytest.mark.parametrize("package", PRODUCT)
def test_each_folder_imports_only_the_folders_below_it(package: str) -> None:
    """The whole table (tests/product.py): the core never imports the hook runner either."""
    assert set(USERS_OF_THE_CORE) | set(LAYERS) == set(PRODUCT) == set(ALLOWED)
    wrong = sorted(
        f"{name} -> {target}"
        for name, path in modules(package).items()
        for target in imported(path, name)
        if (folder := target.split(".")[0]) in PRODUCT
        and folder != package
        and folder not in ALLOWED[package]
    )
    assert wrong == []


def _product_edges() -> dict[str, set[str]]:
    every = all_modules(*PRODUCT)
    edges: dict[str, set[str]] = {}
    for name, path in every.items():
        found = set()
        for target in imported(path, name):
            while target and target not in every:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
        edges[name] = found
    return edges


def test_no_two_modules_import_each_other_through_any_path() -> None:
    """No import circle between modules anywhere in the product (a package importing its
    own modules from its `__init__` is not one). Function-level imports count."""
    edges = _product_edges()
    circles: list[list[str]] = []
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()

    def strong(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on.add(node)
        for target in edges[node]:
            if target not in index:
                strong(target)
                low[node] = min(low[node], low[target])
            elif target in on:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                each = stack.pop()
                on.discard(each)
                component.append(each)
                if each == node:
                    break
            top = min(component, key=len)
            if len(component) > 1 and not all(
                c == top or c.startswith(top + ".") for c in component
            ):
                circles.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            strong(node)
    assert circles == []
