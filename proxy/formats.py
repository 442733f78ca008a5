"""Files people bring instead of an environment file: what they are, said in one line;
and what to do about a variable the file names that is not set (`unset_variables`).

A file without a `network` section is refused (a deny-all by mistake is the quietest
failure there is); the message names the section, a close misspelling of it, and the
other tools' files that are mistaken for ours (docs/configuration.md#other-formats).

Invariant: a message names keys of the file, never a value; a key that looks like a
credential is not named either.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from typing import Any

from sandbox_egress.common.problems import Problem, did_you_mean

# Top-level keys of a Claude Code settings file (code.claude.com/docs/en/settings).
CLAUDE_CODE_KEYS = frozenset(
    {"permissions", "hooks", "env", "model", "apiKeyHelper", "sandbox", "enabledPlugins"}
)
UNSET = re.compile(r"environment variable ([A-Za-z_][A-Za-z0-9_]*) is not set")
NO_SECTION = "no 'network' section (write `network: {allowlist: []}` to refuse everything)"


def missing_network(document: Any) -> str:
    """Why a document without `network` is refused, with the likeliest cause."""
    if document is None:
        return f"the file is empty: {NO_SECTION}"
    keys = [key for key in document if isinstance(key, str)]
    for key in keys:
        if did_you_mean(key, ["network"]):
            return f"no 'network' section; did you mean 'network' (not {key!r})?"
    if CLAUDE_CODE_KEYS.intersection(keys):
        return (
            f"{NO_SECTION}; this looks like a Claude Code settings file, which the hook "
            "runner reads (`hookrunner fire`), not the proxy"
        )
    return NO_SECTION


def unset_variables(problems: Iterable[Problem]) -> list[str]:
    """The environment variables the problems say are not set, each once, in order."""
    found = (UNSET.search(p.message) for p in problems)
    return list(dict.fromkeys(m.group(1) for m in found if m is not None))


def hinted(problem: Problem) -> Problem:
    """`problem`, with the importer named when it is another tool's key (sandbox-runtime's)."""
    if problem.location in ("network.allowedDomains", "network.deniedDomains"):
        hint = "; a sandbox-runtime settings file? `egress-proxy import --from sandbox-runtime`"
        return dataclasses.replace(problem, message=problem.message + hint)
    return problem
