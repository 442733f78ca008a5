"""A hook's arguments without reading its class's dataclass fields on every hook (D151).

mitmproxy's `Hook.args()` calls `dataclasses.fields` each time: four hooks per kept-alive
request called it three times each, nineteen hooks per new intercepted connection. The
field names are kept per hook class; the values are read from the hook as before. Used
by the lean engine's addon manager (runtime/engine/lean.py) and by the connection
handler's `handle_hook` (runtime/engine/connsetup.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from mitmproxy import hooks

_ARG_NAMES: dict[type, tuple[str, ...]] = {}


def hook_args(event: hooks.Hook) -> list[Any]:
    """`event.args()` (its dataclass fields' values, in order), the names kept per class."""
    names = _ARG_NAMES.get(type(event))
    if names is None:
        names = _ARG_NAMES[type(event)] = tuple(f.name for f in dataclasses.fields(event))  # type: ignore[arg-type]
    return [getattr(event, name) for name in names]
