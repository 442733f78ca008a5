#!/usr/bin/env python3
"""PreToolUse hook: keep Claude away from .env files (Read, Edit, Write, MultiEdit, Bash)."""

import json
import os
import re
import sys

ALLOWED = {".env.example", ".env.sample", ".env.template"}
ENV_WORD = re.compile(r"(^|[\s/'\"=<>])\.env(\.[\w.-]+)?($|[\s'\";|&)])")


def is_env_file(path: str) -> bool:
    name = os.path.basename(path)
    return (name == ".env" or name.startswith(".env.")) and name not in ALLOWED


data = json.load(sys.stdin)
tool = data.get("tool_name", "")
tool_input = data.get("tool_input", {})
if tool in ("Read", "Edit", "Write", "MultiEdit"):
    path = tool_input.get("file_path", "")
    if is_env_file(path):
        print(
            f"Blocked: {os.path.basename(path)} holds secrets; do not read or change it.",
            file=sys.stderr,
        )
        sys.exit(2)
elif tool == "Bash":
    command = tool_input.get("command", "")
    match = ENV_WORD.search(command)
    if match and not any(a in command for a in ALLOWED):
        print("Blocked: this command touches a .env file, which holds secrets.", file=sys.stderr)
        sys.exit(2)
sys.exit(0)
