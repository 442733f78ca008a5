"""What the `llm` row's head rule hands the adapter for one generation call (`LlmPart`):
the clauses judging it, each with the entry that holds it and the call as its head
tells (`proxy.clauses.llm`). Imported by the clause table: nothing here reads it back.
"""

from __future__ import annotations

from dataclasses import dataclass

from sandbox_egress.proxy.llm.config import LlmClause
from sandbox_egress.proxy.llm.requests import Call


@dataclass(frozen=True, slots=True)
class Metered:
    """One clause judging a call, with the pattern of the entry that holds it (the key
    its spending is kept under)."""

    entry: str
    clause: LlmClause
    call: Call


@dataclass(frozen=True, slots=True)
class LlmPart:
    judges: tuple[Metered, ...]  # the entry's clause first, then its node's

    @property
    def api(self) -> str:
        return self.judges[0].clause.api.value
