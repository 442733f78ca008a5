#!/usr/bin/env python3
"""PreToolUse hook for every MCP tool (matcher "mcp__.*"): deny the destructive ones."""

import json
import re
import sys

data = json.load(sys.stdin)
tool = data.get("tool_name", "")
server, _, name = tool.removeprefix("mcp__").partition("__")
if re.search(r"(delete|remove|drop|destroy)", name):
    print(
        json.dumps(
            {
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": "deny",
                    "permissionDecisionReason": f"MCP tool {name} on {server} is destructive; "
                    "ask the user to do it.",
                }
            }
        )
    )
