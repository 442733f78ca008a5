"""Imports run one way: launcher -> adapter -> core (parsed with `ast`, nothing imported).

* core (`proxy/`): the policy and what it needs; never mitmproxy, never `addons/`,
  never the launcher.
* adapter (`addons/`): mitmproxy addons that turn flows into values for the core.
* launcher (`proxy/`): the modules that start mitmproxy (and the CA store it reads).

Every module of `proxy/` and `addons/` is placed below by name, so a new module fails
this test until someone decides its layer. `hookrunner/` and `common/` are checked as
packages: they may use the core, never the adapter or the launcher. Imports inside
functions and under `TYPE_CHECKING` count like any other.
"""

from __future__ import annotations

import ast
from enum import IntEnum
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


class Layer(IntEnum):
    """A module may import its own layer and the layers below it."""

    CORE = 0
    ADAPTER = 1
    LAUNCHER = 2


LAYERS: dict[str, Layer] = {
    "proxy.addresses": Layer.CORE,
    "proxy.audit": Layer.CORE,
    "proxy.budget": Layer.CORE,
    "proxy.config": Layer.CORE,
    "proxy.decision": Layer.CORE,
    "proxy.dns": Layer.CORE,  # the DNS responder: no mitmproxy in it
    "proxy.fairness": Layer.CORE,
    "proxy.fields": Layer.CORE,
    "proxy.formats": Layer.CORE,  # other tools' files: what they are (check's hints)
    "proxy.health": Layer.CORE,
    "proxy.gitpush": Layer.CORE,
    "proxy.identity": Layer.CORE,
    "proxy.hosts": Layer.CORE,
    "proxy.importers": Layer.CORE,  # other sandboxes' allowlists (egress-proxy import)
    "proxy.limits": Layer.CORE,
    "proxy.lint": Layer.CORE,  # warnings of `check` (a literal credential in a transform)
    "proxy.outbound": Layer.CORE,
    "proxy.metrics": Layer.CORE,
    "proxy.paths": Layer.CORE,
    "proxy.patterns": Layer.CORE,  # a `domain` value classified (split from config)
    "proxy.placeholders": Layer.CORE,
    "proxy.policy": Layer.CORE,
    "proxy.propose": Layer.CORE,
    "proxy.positions": Layer.CORE,
    "proxy.secret": Layer.CORE,  # a credential value that never shows itself  # file:line:column of each configuration problem
    "proxy.redact": Layer.CORE,
    "proxy.references": Layer.CORE,  # ${NAME} and ${file:} resolved (split from config)
    "proxy.resolver": Layer.CORE,
    "proxy.rules": Layer.CORE,
    "proxy.sandboxes": Layer.CORE,
    "proxy.selfaddr": Layer.CORE,
    "proxy.stages": Layer.CORE,
    "proxy.swap": Layer.CORE,
    "proxy.targets": Layer.CORE,
    "proxy.tenancy": Layer.CORE,
    "proxy.transforms": Layer.CORE,  # an entry's transform headers (split from config)
    "addons.auditing": Layer.ADAPTER,
    "addons.backpressure": Layer.ADAPTER,
    "addons.budget": Layer.ADAPTER,
    "addons.clienthello": Layer.ADAPTER,
    "addons.connect": Layer.ADAPTER,
    "addons.connections": Layer.ADAPTER,
    "addons.egress": Layer.ADAPTER,
    "addons.failclosed": Layer.ADAPTER,
    "addons.gitpush": Layer.ADAPTER,
    "addons.limits": Layer.ADAPTER,
    "addons.mitm": Layer.ADAPTER,  # the unannotated mitmproxy calls, typed (D151)
    "addons.pinning": Layer.ADAPTER,
    "addons.refusal": Layer.ADAPTER,
    "addons.request": Layer.ADAPTER,
    "addons.response": Layer.ADAPTER,
    "addons.sandboxes": Layer.ADAPTER,
    "addons.shared": Layer.ADAPTER,
    "addons.targets": Layer.ADAPTER,
    "addons.telemetry": Layer.ADAPTER,
    "addons.upstream": Layer.ADAPTER,
    "addons.tcp": Layer.ADAPTER,
    "addons.workarounds": Layer.ADAPTER,
    "proxy.__main__": Layer.LAUNCHER,  # `python -m proxy`
    "proxy.ca": Layer.LAUNCHER,  # writes mitmproxy's CA store (imports its DH params)
    "proxy.accepting": Layer.LAUNCHER,  # patches asyncio's accept loop
    "proxy.addonimports": Layer.LAUNCHER,  # mitmproxy's addons one by one (issue 26)
    "proxy.cli": Layer.LAUNCHER,
    "proxy.cmdline": Layer.LAUNCHER,  # the options of egress-proxy (split from cli)
    "proxy.coalesce": Layer.LAUNCHER,  # merges what mitmproxy layers send (issue 26)
    "proxy.engine": Layer.LAUNCHER,
    "proxy.launcher": Layer.LAUNCHER,
    "proxy.layerqueues": Layer.LAUNCHER,  # mitmproxy layers' event queues, lazily (issue 26)
    "proxy.lifecycle": Layer.LAUNCHER,
    "proxy.tlsshare": Layer.LAUNCHER,  # one OpenSSL copy per certificate (issue 26)
    "proxy.startup": Layer.LAUNCHER,  # what `serve` prepares before listening (from launcher)
    "proxy.tenants": Layer.LAUNCHER,  # loads and watches the sandbox directory
    "proxy.optimized": Layer.LAUNCHER,  # re-executes the console script under -O
    "proxy.workers": Layer.LAUNCHER,
}

PLACED = ("proxy", "addons")  # every module of these packages is in LAYERS
USERS_OF_THE_CORE = ("hookrunner", "common")  # packages that may use the core only


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(package: str) -> dict[str, Path]:
    return {module_name(p): p for p in sorted((REPO / package).rglob("*.py"))}


def imported(path: Path, name: str) -> set[str]:
    """Every module `path` imports; `from pkg import mod` names `pkg.mod` when mod is one."""
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
    return found


def layer_of(module: str) -> Layer | None:
    """The layer of an imported module of proxy/ or addons/ (None for anything else)."""
    return LAYERS.get(module)


def test_every_module_is_placed_in_a_layer() -> None:
    found = {
        name
        for package in PLACED
        for name in modules(package)
        if name not in PLACED  # the packages' own (empty) __init__ modules
    }
    assert sorted(found - LAYERS.keys()) == [], "place the new module in LAYERS"
    assert sorted(LAYERS.keys() - found) == [], "a placed module no longer exists"


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_imports_run_launcher_to_adapter_to_core(name: str) -> None:
    path = REPO / Path(*name.split(".")).with_suffix(".py")
    own = LAYERS[name]
    wrong = sorted(
        f"{target} ({layer.name.lower()})"
        for target in imported(path, name)
        if (layer := layer_of(target)) is not None and layer > own
    )
    assert wrong == [], f"{name} ({own.name.lower()}) imports upward"


@pytest.mark.parametrize("name", sorted(n for n, layer in LAYERS.items() if layer is Layer.CORE))
def test_the_core_never_imports_mitmproxy(name: str) -> None:
    path = REPO / Path(*name.split(".")).with_suffix(".py")
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
        "    from addons import egress as e\n"
        "    import proxy.launcher\n"
        "    from proxy.cli import main\n"
    )
    assert {"addons.egress", "proxy.launcher", "proxy.cli"} <= imported(source, "proxy.probe")


def test_the_core_has_no_import_cycle() -> None:
    """A cycle hides which module owns a rule (issue 25: config -> redact -> decision -> config,
    because a policy rule lived in the redaction module). `TYPE_CHECKING` imports count."""
    core = sorted(n for n, layer in LAYERS.items() if layer is Layer.CORE)
    edges = {
        name: sorted(
            t for t in imported(REPO / Path(*name.split(".")).with_suffix(".py"), name) if t in core
        )
        for name in core
    }
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
