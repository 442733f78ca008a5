#!/usr/bin/env python3
"""UserPromptSubmit hook: add the project's notes to Claude's context (additionalContext)."""

import json
import os
import sys

data = json.load(sys.stdin)
notes = os.path.join(data.get("cwd", "."), ".claude", "NOTES.md")
if not os.path.exists(notes):
    sys.exit(0)
with open(notes, encoding="utf-8") as f:
    text = f.read().strip()
print(
    json.dumps(
        {
            "hookSpecificOutput": {
                "hookEventName": "UserPromptSubmit",
                "additionalContext": f"Project notes:\n{text}",
            }
        }
    )
)
