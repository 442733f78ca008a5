#!/usr/bin/env python3
"""Stop hook: keep Claude working until the tests passed; honours stop_hook_active (no loops)."""

import json
import os
import sys

data = json.load(sys.stdin)
if data.get("stop_hook_active"):
    sys.exit(0)  # already continuing because of this hook: let it stop
marker = os.path.join(data.get("cwd", "."), ".tests-passed")
if not os.path.exists(marker):
    print(
        json.dumps(
            {
                "decision": "block",
                "reason": "The tests have not passed yet. Run `make test` and fix what fails before finishing.",
            }
        )
    )
sys.exit(0)
