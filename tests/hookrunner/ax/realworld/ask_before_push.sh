#!/usr/bin/env bash
# PreToolUse hook for Bash: any git push needs a human's confirmation.
set -euo pipefail
input=$(cat)
tool=$(jq -r '.tool_name // ""' <<<"$input")
command=$(jq -r '.tool_input.command // ""' <<<"$input")
[ "$tool" = "Bash" ] || exit 0
if grep -Eq '(^|[;&|[:space:]])git[[:space:]]+push\b' <<<"$command"; then
  jq -n --arg cmd "$command" '{
    hookSpecificOutput: {
      hookEventName: "PreToolUse",
      permissionDecision: "ask",
      permissionDecisionReason: ("This pushes to a remote: " + $cmd)
    }
  }'
fi
exit 0
