"""One `Problem` for every configuration file both halves read, and JSON Schema to Problems.

A file's structure is data: the JSON Schemas in `common/schemas/` (shipped as package data,
`schemas/` at the top of the repository points there). `schema_problems` checks a document
against one of them with the maintained `jsonschema` library and turns each error into a
`Problem` whose words come from the schema itself: a subschema's `x-problem` names the
message per failing keyword. The checks a schema cannot express (IDNA, CIDR, RE2, secret
references) stay in each loader as small named validators producing the same `Problem`.

Invariants:
* a Problem names its file, a location inside it in the file's own path dialect
  (`network.allowlist[3].transform.X-K`, `$.hooks[0].event`), `line L, column C` for a
  syntax error, or the dialect's whole-document location (`""`, `$`);
* a message is built from the schema's words, key names and JSON type names. A document's
  value appears only where the schema's message asks for it (`{json}`, `{any}`, `{repr}`),
  which a schema does only for fields that never hold a secret (domains, event names);
* a JSON or YAML syntax error reads one way: `FILE: line L, column C: not valid JSON: DETAIL`.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
from referencing import Registry, Resource

from sandbox_egress.common.tokens import shown, token_format

SCHEMAS = Path(__file__).resolve().parent / "schemas"
MAX_SHOWN = 40  # characters of a shown value (`{json}`, `{repr}`)
HIDDEN_KEY = "<key not shown>"  # a location's part for a key that looks like a credential


def _integer(checker: Any, instance: Any) -> bool:
    # JSON Schema counts 2.0 as an integer; a port or a timeout written 2.0 is refused.
    return isinstance(instance, int) and not isinstance(instance, bool)


_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _integer),
)


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a configuration file."""

    file: str
    location: str
    message: str
    line: int | None = None  # 1-based, where the file's text is known (YAML and JSON files)
    column: int | None = None
    # Said, never failed on: what another program's file holds that this one does not
    # run (a Claude Code settings file's `Notification` hooks, D227).
    warning: bool = False

    def __str__(self) -> str:
        where = f": {self.location}" if self.location else ""
        at = f":{self.line}:{self.column}" if self.line is not None else ""
        return f"{self.file}{at}{where}: {self.message}"


def syntax_problem(
    file: str, language: str, detail: str, line: int | None, column: int | None, whole: str = ""
) -> Problem:
    """The one wording of a file that does not parse (`language` is "JSON" or "YAML")."""
    location = f"line {line}, column {column}" if line is not None else whole
    return Problem(file, location, f"not valid {language}: {detail}")


def did_you_mean(key: object, known: Iterable[str]) -> str:
    """`; did you mean 'network'?` for a misspelt key, or "" (never for a credential)."""
    if not isinstance(key, str) or token_format(key) is not None:
        return ""
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.7)
    return f"; did you mean {close[0]!r}?" if close else ""


def type_name(value: Any) -> str:
    """How a JSON value's type reads in a problem message."""
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    return "a number"


@cache
def _schema_document(name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((SCHEMAS / f"{name}.schema.json").read_text("utf-8"))
    return document


@cache
def schema_validator(name: str, definition: str | None = None) -> jsonschema.Validator:
    """The validator of `common/schemas/NAME.schema.json`, or of one of its `$defs`."""
    document = _schema_document(name)
    if definition is None:
        return _Validator(document)
    registry: Registry[Any] = Registry().with_resource(
        document["$id"], Resource.from_contents(document)
    )
    reference = {"$ref": f"{document['$id']}#/$defs/{definition}"}
    return _Validator(reference, registry=registry)


Unknown = Callable[[Sequence[str | int], str], str]  # (path of the object, key) -> message


@dataclass(frozen=True, slots=True)
class Found:
    """One schema error as a path inside the checked value and its message."""

    path: tuple[str | int, ...]
    message: str
    keyword: str


def schema_errors(
    validator: jsonschema.Validator, value: Any, unknown: Unknown | None = None
) -> list[Found]:
    """Every error of `value`, in the schema's order, each worded by its `x-problem`."""
    found: list[Found] = []
    for error in validator.iter_errors(value):
        for item in _found(error, unknown):
            if item not in found:
                found.append(item)
    return found


def _found(error: jsonschema.ValidationError, unknown: Unknown | None) -> Iterable[Found]:
    path = tuple(error.absolute_path)
    keyword = str(error.validator)
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    words = schema.get("x-problem", {})
    template = words if isinstance(words, str) else words.get(keyword, words.get("*"))
    at_object = keyword in schema.get("x-problem-at-object", ())
    if schema.get("x-problem-at-key") is True:  # propertyNames: the instance is the key
        path = (*path, error.instance)
    keys: list[str | None] = [None]
    if keyword == "additionalProperties":
        known = schema.get("properties", {})
        keys = [key for key in error.instance if key not in known]
    elif keyword == "required":
        keys = [key for key in error.validator_value if key not in error.instance]
    for key in keys:
        here = path if key is None or at_object else (*path, key)
        if at_object and key is not None and token_format(key) is not None:
            here = path  # a pasted credential as a key: the location must not show it either
        elif key is not None and token_format(key) is not None:
            here = (*path, HIDDEN_KEY)
        if isinstance(template, Mapping) and key is not None:
            enum = schema.get("properties", {}).get(key, {}).get("enum", [])
            message = _fill(template.get(key, "is invalid"), error, key, schema, enum)
        elif isinstance(template, str):
            message = _fill(template, error, key, schema, error.validator_value)
        elif keyword == "additionalProperties" and unknown is not None and key is not None:
            message = unknown(path, key)
        else:
            message = "is invalid"  # a schema error no x-problem words: never a value
        if keyword == "additionalProperties":
            message += did_you_mean(key, schema.get("properties", {}))
        yield Found(here, message, keyword)


def _fill(
    template: str, error: jsonschema.ValidationError, key: str | None, schema: Any, enum: Any
) -> str:
    instance = error.instance
    as_json = json.dumps(instance, default=str)
    hidden = token_format(as_json) is not None  # a pasted credential is named, never shown
    return template.format(
        key=shown(key),
        type=type_name(instance),
        json=shown(instance)
        if hidden
        else as_json[:MAX_SHOWN]
        if not isinstance(instance, dict | list)
        else "?",
        repr=shown(instance, MAX_SHOWN),
        any=shown(instance) if hidden else as_json[:MAX_SHOWN],
        expected=", ".join(sorted(schema.get("properties", {}))),
        enum=", ".join(str(v) for v in enum) if isinstance(enum, list) else "",
    )
