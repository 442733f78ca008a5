"""The product's folders: the subpackages of the import package `sandbox_egress` (D140).

One list, read by every guard that walks the product's code (layering, no `assert`,
UTF-8 constants, module size), so that a new folder is covered by all of them at once.
`ALLOWED` is which folder may import which (the layering, tests/proxy/test_layers.py)."""

from __future__ import annotations

PRODUCT = ("proxy", "addons", "runtime", "hookrunner", "common")
ALLOWED: dict[str, frozenset[str]] = {
    "common": frozenset(),
    "proxy": frozenset({"common"}),
    "addons": frozenset({"common", "proxy"}),
    "runtime": frozenset({"common", "proxy", "addons"}),
    "hookrunner": frozenset({"common", "proxy"}),
}
