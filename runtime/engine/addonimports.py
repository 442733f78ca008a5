"""mitmproxy's addon modules, imported one by one: not its whole addon package (issue 26, D162);
libraries a run seldom uses, loaded on first use (issue 36, D298).

`mitmproxy/addons/__init__.py` imports every one of mitmproxy's ~35 addons, so importing any
one of them (`from mitmproxy.addons import tlsconfig`) loads them all and what they use:
flask, werkzeug, jinja2 and click (the onboarding app), ldap3 and pyasn1 (proxy
authentication), the HAR and flow writers. The lean engine uses seven of them; the rest is
14 MiB of a `run`'s resident memory. `import_addons_one_by_one()` puts the package in
`sys.modules` without running its `__init__` (the module object its own loader would
fill, with the package's `__path__`), so `mitmproxy.addons.X` imports X alone.

The same mechanism, `run_on_first_use(name)`, defers `SELDOM_USED`: mitmproxy's option
manager imports ruamel.yaml (to read or write an options file, which egress-proxy never
does), its content-encoding module brotli and zstd (to decode a `br` or `zstd` body, only
when an addon reads one), and its command module pyparsing and its command lexer (to parse
a command string, which only mitmproxy's consoles do): 5 MiB of an idle run. The command
module imports the lexer's `unquote` by name at import time: a name of `FORWARDED`, read
before its module ran, is a forwarder that runs the module at its first call. The standard
library's `LazyLoader` does not defer these: under Python 3.12 an `import X` of a module
already in `sys.modules` reads its `__spec__`, which loads a lazy module; here `__spec__`
and the other import attributes are set from the start, and only a read of another name
(not `__path__`, which the import system reads of every module a `from X import y` names)
runs the module.

Invariants: done only when the module is not imported yet (an imported module is left as
it is); `from mitmproxy.addons import X` (which first asks the package for X) imports the
submodule X alone; the first read of a name the module's code defines (`default_addons`,
which mitmdump's master calls; `from mitmproxy.addons import default_addons`;
`brotli.decompress`) runs that code into the same module object, after which the module is
exactly the library's own.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

PACKAGE = "mitmproxy.addons"
SELDOM_USED = (
    "ruamel.yaml",
    "brotli",
    "backports.zstd",
    "pyparsing",
    "mitmproxy.command_lexer",
)
# Functions a module imports by name from a deferred one at import time: they are
# forwarders, which run the module at their first call (mitmproxy.command imports
# `unquote` so, and uses it only when a command string is parsed).
FORWARDED = {"mitmproxy.command_lexer": ("quote", "unquote")}
_WAITING: set[str] = set()  # modules in sys.modules whose own code has not run yet


def import_addons_one_by_one(name: str = PACKAGE) -> bool:
    """Make `mitmproxy.addons.X` (`name`.X) import X alone; False when the package was
    imported already."""
    return run_on_first_use(name, packages_only=True)


def defer_seldom_used(names: tuple[str, ...] = SELDOM_USED) -> list[str]:
    """`run_on_first_use` for each of `names`; the ones deferred (D298)."""
    return [name for name in names if run_on_first_use(name)]


def run_on_first_use(name: str, packages_only: bool = False) -> bool:
    """Put module `name` in `sys.modules` without running its code, which runs on the first
    read of a name that is not a submodule; False when it was imported already or is not
    found (or, with `packages_only`, is not a package)."""
    if name in sys.modules:
        return False
    try:
        spec = importlib.util.find_spec(name)  # imports its parent package, if any
    except ModuleNotFoundError:
        return False
    if spec is None or spec.loader is None:
        return False
    if packages_only and spec.submodule_search_locations is None:
        return False  # not a package on disk: import it the usual way
    package = importlib.util.module_from_spec(spec)
    loader = spec.loader
    is_package = spec.submodule_search_locations is not None

    def run() -> None:
        if name in _WAITING:  # once: the first read or call that needs it
            del package.__dict__["__getattr__"]
            _WAITING.discard(name)
            loader.exec_module(package)

    def forwarder(attribute: str) -> Any:
        def forward(*args: Any, **kwargs: Any) -> Any:
            run()
            return package.__dict__[attribute](*args, **kwargs)

        forward.__name__ = forward.__qualname__ = attribute
        return forward

    def complete(attribute: str) -> Any:
        # `from mitmproxy.addons import X` asks for X first: a submodule is imported alone.
        if is_package and importlib.util.find_spec(f"{name}.{attribute}") is not None:
            return importlib.import_module(f"{name}.{attribute}")
        if attribute in FORWARDED.get(name, ()):
            return forwarder(attribute)
        if attribute == "__path__":  # the import system asking whether it is a package
            raise AttributeError(attribute)
        # A name only the package's __init__ defines: run it now, once, into this module.
        run()
        try:
            return package.__dict__[attribute]
        except KeyError:
            raise AttributeError(f"module {name!r} has no attribute {attribute!r}") from None

    package.__dict__["__getattr__"] = complete
    sys.modules[name] = package
    _WAITING.add(name)
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, package)
    return True


def is_whole(name: str = PACKAGE) -> bool:
    """Whether the module `name`, if imported, is the one its own code made."""
    return name not in _WAITING
