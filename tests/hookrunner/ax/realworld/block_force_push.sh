#!/usr/bin/env bash
# PreToolUse hook for Bash: block force pushes (the older {"decision": "block"} answer).
set -euo pipefail
command=$(jq -r '.tool_input.command // ""')
if grep -Eq 'git[[:space:]]+push\b.*([[:space:]](--force|--force-with-lease|-f)\b|[[:space:]]\+)' <<<"$command"; then
  jq -n '{decision: "block", reason: "Force pushes rewrite shared history. Push without --force, or ask a maintainer."}'
  exit 0
fi
exit 0
