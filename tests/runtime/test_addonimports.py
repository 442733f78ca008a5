"""A `run` imports the mitmproxy addons its engine uses, not mitmproxy's whole addon package
and what it pulls in (flask, ldap3, ...): D162. Checked in a fresh interpreter."""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from sandbox_egress.runtime.engine import addonimports

REPO = Path(__file__).resolve().parents[2]

# What a run must not load: mitmproxy's other addons and their libraries, and what only
# other commands or the tests use.
NEVER_IN_A_RUN = (
    "flask", "werkzeug", "jinja2", "click", "ldap3", "pyasn1",
    "mitmproxy.addons.onboarding", "mitmproxy.addons.proxyauth", "mitmproxy.addons.savehar",
    "mitmproxy.tools", "tree_sitter", "hypothesis", "dns", "pytest",
)  # fmt: skip

RUN_PATH = """
import asyncio, json, sys
import sandbox_egress.runtime.cli
from sandbox_egress.runtime import launcher
from sandbox_egress.runtime.engine.addonimports import import_addons_one_by_one
first = import_addons_one_by_one()
# what launcher.serve imports once the configuration is loaded, then the engine
from mitmproxy.addons.termlog import TermLog
from sandbox_egress.addons.connections import Connections
from sandbox_egress.addons.egress import EgressPolicy
from sandbox_egress.addons.layers.limits import Limits
from sandbox_egress.addons.telemetry import CountingAudit, Telemetry
from sandbox_egress.addons.upstream import UpstreamFailures

async def engine(name):
    return type(launcher._engine(name)[1]).__name__

made = asyncio.run(engine("lean"))
loaded = sorted(sys.modules)
again = import_addons_one_by_one()
mitmdump = asyncio.run(engine("mitmdump"))  # mitmdump's master needs the whole package
print(json.dumps([first, again, made, mitmdump, loaded, "flask" in sys.modules]))
"""


def test_a_run_imports_only_the_addons_its_engine_uses() -> None:
    done = subprocess.run(
        [sys.executable, "-c", RUN_PATH], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    first, again, made, mitmdump, loaded, whole_later = json.loads(done.stdout.splitlines()[-1])
    assert (first, again, made, mitmdump) == (True, False, "LeanMaster", "DumpMaster")
    assert [name for name in NEVER_IN_A_RUN if name in loaded] == []
    for used in (
        "mitmproxy.addons.tlsconfig",
        "mitmproxy.addons.proxyserver",
        "sandbox_egress.addons.egress",
    ):
        assert used in loaded
    assert whole_later  # default_addons() ran the package's own __init__ on demand


def test_the_package_is_left_alone_once_imported() -> None:
    code = (
        "import mitmproxy.addons, sys\n"
        "from sandbox_egress.runtime.engine.addonimports import import_addons_one_by_one, is_whole\n"
        "print(import_addons_one_by_one(), is_whole())"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.split() == ["False", "True"], done.stderr[-2000:]


def test_a_name_the_package_does_not_have_is_an_attribute_error() -> None:
    code = (
        "import sys\n"
        "from sandbox_egress.runtime.engine.addonimports import import_addons_one_by_one, is_whole\n"
        "import_addons_one_by_one()\n"
        "from mitmproxy.addons import core\n"
        "package = sys.modules['mitmproxy.addons']\n"
        "print(is_whole(), 'flask' in sys.modules)\n"
        "try:\n"
        "    package.no_such_name\n"
        "except AttributeError as exc:\n"
        "    print(type(exc).__name__, is_whole())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.split() == ["False", "False", "AttributeError", "True"], done.stderr[-2000:]


def test_a_package_imported_one_by_one_in_this_process(tmp_path: Path, monkeypatch: Any) -> None:
    """The same on a package made for the test: submodules alone, the __init__ on demand."""
    package = tmp_path / "onebyone_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from onebyone_pkg import used, unused\nWHOLE = True\n")
    (package / "used.py").write_text("NAME = 'used'\n")
    (package / "unused.py").write_text("NAME = 'unused'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert addonimports.import_addons_one_by_one("onebyone_pkg")
        assert not addonimports.is_whole("onebyone_pkg")
        from onebyone_pkg import used

        assert used.NAME == "used"
        assert "onebyone_pkg.unused" not in sys.modules
        assert not addonimports.import_addons_one_by_one("onebyone_pkg")  # already there
        made = sys.modules["onebyone_pkg"]
        assert made.WHOLE is True  # a name of the __init__: it runs now
        assert addonimports.is_whole("onebyone_pkg")
        assert "onebyone_pkg.unused" in sys.modules
        assert not addonimports.import_addons_one_by_one("no_such_package_here")
    finally:
        for name in [n for n in sys.modules if n.startswith("onebyone_pkg")]:
            del sys.modules[name]


# What launcher.serve does for the lean engine before mitmproxy is imported, then the same
# imports as RUN_PATH; then a br and a zstd body decoded, and an options file written.
SELDOM_USED_PATH = """
import asyncio, json, sys, tempfile
from pathlib import Path
import sandbox_egress.runtime.cli
from sandbox_egress.runtime.engine import addonimports
from sandbox_egress.runtime import launcher
addonimports.import_addons_one_by_one()
deferred = addonimports.defer_seldom_used()
from mitmproxy.addons.termlog import TermLog
from sandbox_egress.addons.egress import EgressPolicy
from sandbox_egress.runtime.engine.lean import LeanMaster, LeanOptions
opts = LeanOptions()

async def engine():
    return LeanMaster(opts)
master = asyncio.run(engine())
maps = open("/proc/self/maps").read()
waiting = [name for name in addonimports.SELDOM_USED if not addonimports.is_whole(name)]
mapped = [name for name in ("_brotli", "_zstd") if name in maps]
ran = [name for name in ("ruamel.yaml.main", "brotli._brotli", "pyparsing.core", "unittest")
       if name in sys.modules]
from mitmproxy.command import unquote  # the forwarder mitmproxy's command module holds
unquoted = unquote('"a b"')
parsed = [part.value for part in master.commands.parse_partial('set "a b"')[0]]
from mitmproxy.net import encoding
body = b"a body " * 50
decoded = [encoding.decode(encoding.encode(body, kind), kind) == body for kind in ("br", "zstd")]
from mitmproxy import optmanager
opts.update(listen_port=8123)
with tempfile.TemporaryDirectory() as work:
    optmanager.save(opts, Path(work) / "options.yaml")
    saved = (Path(work) / "options.yaml").read_text()
whole = [addonimports.is_whole(name) for name in addonimports.SELDOM_USED]
print(json.dumps([deferred, waiting, mapped, ran, decoded, "listen_port: 8123" in saved, whole,
                  unquoted, parsed]))
"""


def test_seldom_used_libraries_run_on_first_use_only() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SELDOM_USED_PATH],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.splitlines()[-1])
    deferred, waiting, mapped, ran, decoded, saved, whole, unquoted, parsed = found
    assert deferred == waiting == list(addonimports.SELDOM_USED)
    assert (mapped, ran) == ([], [])  # neither compiled code mapped nor their modules run
    # Used: a br and a zstd body decode, an options file is written (ruamel), a command
    # string is parsed (pyparsing through mitmproxy's lexer); each library is then the one
    # its own code made.
    assert (decoded, saved, whole) == ([True, True], True, [True] * len(whole))
    assert (unquoted, parsed) == ("a b", ["set", " ", '"a b"'])


def test_forwarded_names_are_top_level_functions_of_their_module() -> None:
    """A forwarder stands for a function: an upgrade that makes one anything else (or
    removes it) fails here, not at a call."""
    for name, functions in addonimports.FORWARDED.items():
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None
        tree = ast.parse(Path(spec.origin).read_text())
        defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert set(functions) <= defined, name


def test_a_plain_module_runs_on_first_use(tmp_path: Path, monkeypatch: Any) -> None:
    (tmp_path / "firstuse_mod.py").write_text(
        "import sys\nRAN = sys.modules[__name__]\ndef hello(who):\n    return 'hi ' + who\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(addonimports.FORWARDED, "firstuse_mod", ("hello",))
    try:
        assert addonimports.run_on_first_use("firstuse_mod")
        import firstuse_mod  # reads __spec__: does not run it
        from firstuse_mod import hello  # reads __path__ (no package) and hello: a forwarder

        assert not addonimports.is_whole("firstuse_mod")
        assert hello("you") == "hi you"  # its first call runs the module
        assert addonimports.is_whole("firstuse_mod")
        assert firstuse_mod.RAN is firstuse_mod  # run in place, into the same module
        assert hello("again") == "hi again"
        assert not addonimports.run_on_first_use("firstuse_mod")  # already there
        assert not addonimports.run_on_first_use("firstuse_mod_not_here")
        assert not addonimports.run_on_first_use("firstuse_mod", packages_only=True)
    finally:
        sys.modules.pop("firstuse_mod", None)
