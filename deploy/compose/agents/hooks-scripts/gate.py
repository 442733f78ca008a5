"""Example security gate: deny `code_execution` that deletes recursively with force.

Reads the pre_tool_execution payload on stdin; prints a deny, or {"decision": "allow"}: a gate
that prints nothing still allows, but every such call is logged as a fail-open warning.
"""

import json
import re
import sys

DESTRUCTIVE = re.compile(r"\brm\s+(-[a-zA-Z]*r[a-zA-Z]*f|-[a-zA-Z]*f[a-zA-Z]*r|-r\s+-f|-f\s+-r)\b")

payload = json.load(sys.stdin)
code = str(payload.get("tool_call", {}).get("args", {}).get("code", ""))
if DESTRUCTIVE.search(code):
    reason = "Destructive command blocked by security gate."
    print(json.dumps({"decision": "deny", "reason": reason}))
else:
    print(json.dumps({"decision": "allow"}))
