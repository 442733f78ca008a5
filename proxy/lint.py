"""Warnings of `egress-proxy check`: what a valid file should still not do.

* A transform value holding a literal credential (one of `common.tokens`' formats once its
  `${NAME}`/`${file:}` references are removed): the file itself is then a secret, copied
  into repositories and images. Write the credential into the environment or a file and
  reference it.

Invariant: a warning names the location and the credential's format, never its value.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import yaml

from sandbox_egress.common.problems import Problem
from sandbox_egress.common.tokens import token_format
from sandbox_egress.proxy.positions import compose

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
        transform = entry.get("transform") if isinstance(entry, dict) else None
        for header, value in (transform if isinstance(transform, dict) else {}).items():
            if not isinstance(value, str):
                continue
            kind = token_format(_REFERENCE.sub(" ", value))
            if kind is not None:
                where = f"network.allowlist[{index}].transform.{header}"
                message = (
                    f"a literal {kind} credential: the file is now a secret; put it in the "
                    "environment or a file and write ${NAME} or ${file:/path}"
                )
                found.append(positions.place(Problem(source, where, message)))
    return found
