"""Where each value of the environment file is written: `file:line:column` for every Problem.

PyYAML's composer keeps a start mark on every node, so no second YAML library is needed: the
loader composes the file once, constructs the document from those nodes (what `safe_load`
does), and `Positions.place` puts each Problem at the node its location names
(`network.allowlist[3].transform.X-K`), or at the nearest enclosing node that has one.

Invariants:
* a position is 1-based (line and column), as editors and compilers print them;
* a location is looked up, never parsed for values: no value of the file is kept here.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

import yaml

from sandbox_egress.common.problems import HIDDEN_KEY, Problem
from sandbox_egress.common.tokens import token_format

_LAST_PART = re.compile(r"(\[\d+\]|\.[^.\[]*)$")


@dataclass(frozen=True, slots=True)
class Positions:
    """Location (the loader's dialect) -> (line, column)."""

    found: dict[str, tuple[int, int]]

    def at(self, location: str) -> tuple[int, int] | None:
        """The position of `location`, or of the nearest enclosing location that has one."""
        while location not in self.found:
            shorter = _LAST_PART.sub("", location)
            if shorter == location:
                return None
            location = shorter
        return self.found[location]

    def place(self, problem: Problem) -> Problem:
        if problem.line is not None or (position := self.at(problem.location)) is None:
            return problem
        return dataclasses.replace(problem, line=position[0], column=position[1])


def compose(text: str) -> tuple[Any, Positions]:
    """The document `yaml.safe_load(text)` gives, and where its network section's values are.

    Raises yaml.YAMLError as `safe_load` does.
    """
    try:
        node, document = _compose(text, _FAST_LOADER)
    except yaml.YAMLError:
        node, document = _compose(text, _SAFE_LOADER)  # the pure-Python loader words it
    found: dict[str, tuple[int, int]] = {}
    if node is not None:
        found[""] = _mark(node)
        network = _child(node, "network")
        environment = _child(node, "environment")
        if network is None and environment is not None:
            network = _child(environment[1], "network")
        if network is not None:
            _walk(network[1], "network", found)
            found["network"] = _mark(network[0])
        state = _child(node, "state")  # the top-level `state:` section (proxy.state.settings)
        if state is not None:
            _walk(state[1], "state", found)
            found["state"] = _mark(state[0])
    return document, Positions(found)


def yaml12(loader: Any) -> Any:
    """`loader` with YAML 1.2's plain scalars where YAML 1.1 surprises an operator (D226):
    only `true`/`false` are booleans (`domain: no` is the string "no", not false), and
    `22:30` or `2026-12-04` stay strings (no sexagesimal numbers, no timestamps)."""
    dropped = {"tag:yaml.org,2002:bool", "tag:yaml.org,2002:timestamp"}
    resolvers = {
        first: [(tag, rx) for tag, rx in pairs if tag not in dropped]
        for first, pairs in loader.yaml_implicit_resolvers.items()
    }
    for first, pairs in resolvers.items():
        resolvers[first] = [
            (
                tag,
                re.compile(
                    rx.pattern.replace(_SEXAGESIMAL_INT, "").replace(_SEXAGESIMAL_FLOAT, ""), re.X
                ),
            )
            if tag in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
            else (tag, rx)
            for tag, rx in pairs
        ]
    twelve: Any = type(
        f"Yaml12{loader.__name__}", (loader,), {"yaml_implicit_resolvers": resolvers}
    )
    twelve.add_implicit_resolver(
        "tag:yaml.org,2002:bool",
        re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
        list("tTfF"),
    )
    return twelve


_SEXAGESIMAL_INT = "\n                    |[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+"
_SEXAGESIMAL_FLOAT = "\n                    |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\\.[0-9_]*"

# libyaml's loader when PyYAML was built with it (about 10x faster: a node proxy reads a
# thousand sandbox files); the same nodes and marks.
_FAST_LOADER: Any = yaml12(getattr(yaml, "CSafeLoader", yaml.SafeLoader))
_SAFE_LOADER: Any = yaml12(yaml.SafeLoader)


def _compose(text: str, loader_type: Any) -> tuple[yaml.Node | None, Any]:
    loader = loader_type(text)
    try:
        node = loader.get_single_node()
        return node, None if node is None else loader.construct_document(node)
    finally:
        loader.dispose()


def _mark(node: yaml.Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


def _child(node: yaml.Node, key: str) -> tuple[yaml.Node, yaml.Node] | None:
    """(key node, value node) of `key` in a mapping node, or None."""
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
                return key_node, value_node
    return None


def _walk(node: yaml.Node, location: str, found: dict[str, tuple[int, int]]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                here = f"{location}.{key_node.value}"
                found.setdefault(here, _mark(key_node))
                if token_format(key_node.value) is not None:  # the problem hides the key
                    found.setdefault(f"{location}.{HIDDEN_KEY}", _mark(key_node))
                _walk(value_node, here, found)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            here = f"{location}[{index}]"
            found[here] = _mark(item)
            _walk(item, here, found)
