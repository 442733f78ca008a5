"""`make demo`: the three scenarios of the source pages and an MCP budget (issue 48), run
for real and narrated.

Builds network namespaces (a sandbox, a gateway running the transparent egress
proxy, a telemetry upstream), so it needs root; it removes everything it built.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from testbed.netns import netns_available


def main() -> int:
    reason = netns_available()
    if reason is not None:
        print(f"make demo builds network namespaces and {reason}.", file=sys.stderr)
        print("Run it as root (for example: sudo make demo).", file=sys.stderr)
        return 2
    from demo.scenarios import SCENARIOS
    from testbed.stage import system_stage

    def say(line: str) -> None:
        print(line, flush=True)

    with tempfile.TemporaryDirectory(prefix="egress-demo-") as base:
        say("Building: sandbox -> gateway (transparent egress-proxy) -> telemetry upstream ...")
        with system_stage(Path(base)) as stage:
            say(f"   proxy pid {stage.proxy.pid}; the sandbox trusts {stage.proxy_ca.name} only\n")
            for scenario in SCENARIOS:
                scenario(stage, say)
                say("")
        say("Stage removed.")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
