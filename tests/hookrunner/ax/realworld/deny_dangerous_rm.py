#!/usr/bin/env python3
"""PreToolUse hook for Bash: deny recursive deletes of the home or root directory."""

import json
import re
import sys

DANGEROUS = re.compile(
    r"\brm\s+(-[a-zA-Z]*r[a-zA-Z]*f|-[a-zA-Z]*f[a-zA-Z]*r)[a-zA-Z]*\s+(/|~|\$HOME)(\s|$)"
)

data = json.load(sys.stdin)
if data.get("tool_name") != "Bash":
    sys.exit(0)
command = data.get("tool_input", {}).get("command", "")
if DANGEROUS.search(command):
    print(
        json.dumps(
            {
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": "deny",
                    "permissionDecisionReason": f"Refusing to run `{command}`: it deletes the "
                    "whole home or root directory.",
                }
            }
        )
    )
sys.exit(0)
