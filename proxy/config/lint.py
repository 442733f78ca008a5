"""Warnings of `egress-proxy check`: what a valid file should still not do.

* A transform value or a `secrets[].value` holding a literal credential (one of
  `common.tokens`' formats once its `${NAME}`/`${file:}` references are removed): the file
  itself is then a secret, copied into repositories and images. Write the credential into
  the environment or a file and reference it.

* A `llm.budget.cost` that may admit a model no `llm.prices` glob prices
  (`proxy.llm.config.unpriced`): such a model is refused at run time
  (`llm_model_unpriced`); the warning names the `models` globs without a price.

Invariant: a warning names the location and the credential's format, never its value.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from sandbox_egress.common.problems import Problem
from sandbox_egress.common.tokens import token_format
from sandbox_egress.proxy.config.positions import compose
from sandbox_egress.proxy.llm.config import parse_llm, unpriced

_REFERENCE = re.compile(r"\$\{[^}]*\}")


def warnings(path: str | os.PathLike[str]) -> list[Problem]:
    """The warnings of a file that `proxy.config.load` accepted (none for an unreadable one)."""
    source = str(path)
    try:
        document, positions = compose(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return []
    if isinstance(document, dict) and "network" not in document:
        document = document.get("environment")
    network = document.get("network") if isinstance(document, dict) else None
    allowlist = network.get("allowlist") if isinstance(network, dict) else None
    found: list[Problem] = []
    for index, entry in enumerate(allowlist if isinstance(allowlist, list) else []):
        for where, value in _credential_values(entry, f"network.allowlist[{index}]"):
            kind = token_format(_REFERENCE.sub(" ", value))
            if kind is not None:
                message = (
                    f"a literal {kind} credential: the file is now a secret; put it in the "
                    "environment or a file and write ${NAME} or ${file:/path}"
                )
                found.append(positions.place(Problem(source, where, message)))
        found += [
            positions.place(p) for p in _unpriced(entry, f"network.allowlist[{index}]", source)
        ]
    return found


def _unpriced(entry: Any, where: str, source: str) -> list[Problem]:
    raw = entry.get("llm") if isinstance(entry, dict) else None
    ok, clause = parse_llm(raw, f"{where}.llm", lambda _where, _message: None)
    missing = unpriced(clause) if ok and clause is not None else []
    if not missing:
        return []
    globs = ", ".join(missing)
    message = (
        f"llm.budget.cost needs a price for every model it admits; no llm.prices glob "
        f"prices {globs} (such a model is refused: llm_model_unpriced)"
    )
    return [Problem(source, f"{where}.llm.prices", message)]


def _credential_values(entry: Any, where: str) -> Iterator[tuple[str, str]]:
    """(location, value) of what an entry writes into requests: its `transform` values and
    its `secrets[].value`s (the placeholder itself is not secret)."""
    if not isinstance(entry, dict):
        return
    transform = entry.get("transform")
    for header, value in (transform if isinstance(transform, dict) else {}).items():
        if isinstance(value, str):
            yield f"{where}.transform.{header}", value
    secrets = entry.get("secrets")
    for index, secret in enumerate(secrets if isinstance(secrets, list) else []):
        value = secret.get("value") if isinstance(secret, dict) else None
        if isinstance(value, str):
            yield f"{where}.secrets[{index}].value", value
