#!/usr/bin/env bash
# PostToolUseFailure hook: one line per failed tool call, keyed by its tool_use_id.
set -euo pipefail
input=$(cat)
log="${CLAUDE_PROJECT_DIR:?}/.claude/tool-failures.log"
mkdir -p "$(dirname "$log")"
jq -r '[.tool_use_id, .tool_name, (.is_interrupt // false | tostring), (.error // "-")] | join(" ")' <<<"$input" >>"$log"
