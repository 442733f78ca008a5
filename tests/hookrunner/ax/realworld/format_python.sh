#!/usr/bin/env bash
# PostToolUse hook for Edit|Write|MultiEdit: format Python files with ruff, tell Claude when they changed.
set -euo pipefail
file=$(jq -r '.tool_input.file_path // ""')
case "$file" in
  *.py) ;;
  *) exit 0 ;;
esac
[ -f "$file" ] || exit 0
before=$(sha256sum "$file")
if ! ruff format --quiet "$file" 2>/tmp/format_python.$$; then
  echo "ruff format failed on $file: $(head -n1 /tmp/format_python.$$)" >&2
  rm -f /tmp/format_python.$$
  exit 1
fi
rm -f /tmp/format_python.$$
after=$(sha256sum "$file")
if [ "$before" != "$after" ]; then
  jq -n --arg f "$(basename "$file")" '{
    hookSpecificOutput: {
      hookEventName: "PostToolUse",
      additionalContext: ("Formatted " + $f + " with ruff format. Read it again before the next edit.")
    }
  }'
fi
exit 0
