"""The clauses' adapters, one row per clause of `proxy.clauses.CLAUSES` that acts on a
flow, in the order a request meets them: a budget admits before anything is written,
credentials are written before the request is signed, a body SigV4 holds is signed
before another clause judges it (D424), a git push or an MCP POST is held, and a model
API call (issue 46) is held, judged and metered last.
`addons.request` walks this table after its one decision (`addons.clauses.base`)."""

from __future__ import annotations

from sandbox_egress.addons.clauses.base import Adapter, Stream, Turn
from sandbox_egress.addons.clauses.budget import BudgetAdapter
from sandbox_egress.addons.clauses.credentials import CredentialsAdapter
from sandbox_egress.addons.clauses.llm import LlmAdapter
from sandbox_egress.addons.clauses.mcp import McpAdapter
from sandbox_egress.addons.clauses.rules import RulesAdapter
from sandbox_egress.addons.clauses.sigv4 import SigV4Adapter

ADAPTERS: tuple[Adapter, ...] = (
    BudgetAdapter(),
    CredentialsAdapter(),
    SigV4Adapter(),
    RulesAdapter(),
    McpAdapter(),
    LlmAdapter(),  # issue 46: model API calls judged and metered
)

__all__ = ["ADAPTERS", "Adapter", "Stream", "Turn"]
