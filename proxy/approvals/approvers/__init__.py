"""Who is asked about a held destination: one small interface (`base`), one module per
kind, and the table `APPROVERS` that lists them (docs/configuration.md#approvals)."""

from __future__ import annotations

from sandbox_egress.proxy.approvals.approvers.base import Kind
from sandbox_egress.proxy.approvals.approvers.command import KIND as COMMAND
from sandbox_egress.proxy.approvals.approvers.webhook import KIND as WEBHOOK

# kind (the row's one key) -> how its row is parsed into an approver
APPROVERS: dict[str, Kind] = {"command": COMMAND, "webhook": WEBHOOK}
