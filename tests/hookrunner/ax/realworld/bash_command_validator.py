#!/usr/bin/env python3
"""PreToolUse hook for Bash: suggest faster tools (the shape of Claude Code's documented example).

Exit 2 with the issues on stderr blocks the call and shows them to Claude.
"""

import json
import re
import sys

VALIDATION_RULES = [
    (
        r"^grep\b(?!.*\|)",
        "Use 'rg' (ripgrep) instead of 'grep' for better performance and features",
    ),
    (
        r"^find\s+\S+\s+-name\b",
        "Use 'rg --files | rg pattern' or 'rg --files -g pattern' instead of 'find -name' "
        "for better performance",
    ),
]


def validate_command(command: str) -> list[str]:
    return [message for pattern, message in VALIDATION_RULES if re.search(pattern, command)]


def main() -> None:
    try:
        input_data = json.load(sys.stdin)
    except json.JSONDecodeError as e:
        print(f"Error: Invalid JSON input: {e}", file=sys.stderr)
        sys.exit(1)
    tool_name = input_data.get("tool_name", "")
    tool_input = input_data.get("tool_input", {})
    command = tool_input.get("command", "")
    if tool_name != "Bash" or not command:
        sys.exit(0)
    issues = validate_command(command)
    if issues:
        for message in issues:
            print(f"• {message}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
