"""The project's own invariants, checked in every mode of the interpreter.

The proxy runs under `python -O` (D75), which strips every `assert` statement (and
mitmproxy's `if __debug__` field checks, the reason it runs so). So production code in
`proxy/`, `addons/`, `hookrunner/` and `common/` never uses `assert` for something it
relies on: it checks explicitly and raises `InvariantError`, which says which invariant
broke and never carries a value that could be a secret. tests/proxy/test_optimized.py
keeps `assert` out of those folders.
"""

from __future__ import annotations


class InvariantError(RuntimeError):
    """A state the code rules out happened anyway: a bug, never a bad input."""
