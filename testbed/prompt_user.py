"""The user at Claude Code's permission prompt, for headless runs (issue 47).

`claude -p` has nobody to ask, so a hook's `ask` is refused there — unless the run names a
permission-prompt tool (`--permission-prompt-tool mcp__user__answer`), which Claude Code
then calls with the pending tool call. This is that tool: a stdio MCP server (standard
library only, one JSON-RPC message per line) answering each prompt with the next word of
`--answers` (a JSON list of "yes"/"no"; past its end, "no"), and appending every prompt
it got (`{"tool_name", "input", "answer"}`) to `--log` before answering.

A yes is `{"behavior": "allow", "updatedInput": <the input it was shown>}`, a no
`{"behavior": "deny", "message": "The user said no."}`: what a person would answer.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

TOOL = {
    "name": "answer",
    "description": "Answers Claude Code's permission prompts as the user would.",
    "inputSchema": {
        "type": "object",
        "properties": {"tool_name": {"type": "string"}, "input": {"type": "object"},
                       "tool_use_id": {"type": "string"}},
        "required": ["tool_name", "input"],
    },
}  # fmt: skip


def reply(ident: Any, result: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}) + "\n")
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--answers", type=Path, required=True)
    parser.add_argument("--log", type=Path, required=True)
    args = parser.parse_args()
    answers: list[str] = json.loads(args.answers.read_text())
    asked = 0
    for line in sys.stdin:
        message = json.loads(line)
        method, ident = message.get("method"), message.get("id")
        if ident is None:
            continue  # a notification
        if method == "initialize":
            version = message.get("params", {}).get("protocolVersion", "2025-06-18")
            reply(ident, {"protocolVersion": version, "capabilities": {"tools": {}},
                          "serverInfo": {"name": "user", "version": "1"}})  # fmt: skip
        elif method == "tools/list":
            reply(ident, {"tools": [TOOL]})
        elif method == "tools/call":
            call = message.get("params", {}).get("arguments", {})
            word = answers[asked] if asked < len(answers) else "no"
            asked += 1
            with args.log.open("a") as log:
                log.write(json.dumps({"tool_name": call.get("tool_name"),
                                      "input": call.get("input"), "answer": word}) + "\n")  # fmt: skip
            if word == "yes":
                decision = {"behavior": "allow", "updatedInput": call.get("input", {})}
            else:
                decision = {"behavior": "deny", "message": "The user said no."}
            reply(ident, {"content": [{"type": "text", "text": json.dumps(decision)}]})
        else:
            reply(ident, {})


if __name__ == "__main__":
    main()
