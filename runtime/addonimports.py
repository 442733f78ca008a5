"""mitmproxy's addon modules, imported one by one: not its whole addon package (issue 26, D162).

`mitmproxy/addons/__init__.py` imports every one of mitmproxy's ~35 addons, so importing any
one of them (`from mitmproxy.addons import tlsconfig`) loads them all and what they use:
flask, werkzeug, jinja2 and click (the onboarding app), ldap3 and pyasn1 (proxy
authentication), the HAR and flow writers. The lean engine uses seven of them; the rest is
14 MiB of a `run`'s resident memory. `import_addons_one_by_one()` puts the package in
`sys.modules` without running its `__init__` (the module object its own loader would
fill, with the package's `__path__`), so `mitmproxy.addons.X` imports X alone.

Invariants: done only when the package is not imported yet (an imported package is left
as it is); `from mitmproxy.addons import X` (which first asks the package for X) imports
the submodule X alone; the first read of a name the package's `__init__` defines (`default_addons`,
which mitmdump's master calls; `from mitmproxy.addons import default_addons`) runs that
`__init__` into the same module object, after which the package is exactly mitmproxy's.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

PACKAGE = "mitmproxy.addons"
_WAITING: set[str] = set()  # packages in sys.modules whose own __init__ has not run yet


def import_addons_one_by_one(name: str = PACKAGE) -> bool:
    """Make `mitmproxy.addons.X` (`name`.X) import X alone; False when the package was
    imported already."""
    if name in sys.modules:
        return False
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return False  # not a package on disk: import it the usual way
    package = importlib.util.module_from_spec(spec)
    loader = spec.loader

    def complete(attribute: str) -> Any:
        # `from mitmproxy.addons import X` asks for X first: a submodule is imported alone.
        if importlib.util.find_spec(f"{name}.{attribute}") is not None:
            return importlib.import_module(f"{name}.{attribute}")
        # A name only the package's __init__ defines: run it now, once, into this module.
        del package.__dict__["__getattr__"]
        _WAITING.discard(name)
        loader.exec_module(package)
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
    """Whether the package `name`, if imported, is the one its own `__init__` made."""
    return name not in _WAITING
