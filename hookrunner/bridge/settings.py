"""Whether and how the approvals bridge runs (issue 47, D506).

The bridge is off unless the operator gives Claude Code (and so its hooks) both
``HOOKRUNNER_APPROVALS_ADMIN`` — the egress proxy's metrics address, ``http://HOST:PORT``,
where its admin API is served — and ``HOOKRUNNER_APPROVALS_TOKEN_FILE`` — a file holding
the admin token (``run --admin-token-file``), which the boundary masks in every Bash call
and the bridge refuses to Claude Code's file tools. The hook never reads the token: only
the grant step does, after a yes.

Invariants: ``None`` when either is missing, the address is not ``http://``, or the token
file is not an existing file given by an absolute path (nothing to mask, nothing a grant
step could read: the bridge stays off rather than make every Bash call refuse, D506).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

ADMIN = "HOOKRUNNER_APPROVALS_ADMIN"
TOKEN_FILE = "HOOKRUNNER_APPROVALS_TOKEN_FILE"


@dataclass(frozen=True)
class BridgeSettings:
    admin: str  # http://HOST:PORT of the proxy's metrics address
    token_file: str  # absolute path, as given

    @property
    def protected(self) -> str:
        """The token file as the boundary and the file-tool check compare it."""
        return os.path.realpath(self.token_file)


def from_env(env: Mapping[str, str]) -> BridgeSettings | None:
    admin, token = env.get(ADMIN, "").strip(), env.get(TOKEN_FILE, "").strip()
    if not admin.startswith("http://") or not os.path.isabs(token) or not os.path.isfile(token):
        return None
    return BridgeSettings(admin.rstrip("/"), token)
