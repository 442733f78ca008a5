"""The approvals bridge: Claude Code's yes as a `once` grant of the egress proxy
(issue 47; docs/hooks.md#the-approvals-bridge-claude-codes-yes-as-a-grant, D500-D507).

Pure: ``hosts`` (the destinations a tool input names), ``files`` (Claude Code's file tools
kept from the admin token), ``settings`` (on or off, from Claude Code's environment),
``answer`` (the bridge's word in Claude Code's PreToolUse answer; the grant steps taken
off again for PostToolUse). Mechanisms: ``proxyapi`` (the proxy's two doors:
``egress.invalid`` from the sandbox, the admin API), ``grant`` (the step a yes runs,
``python -I -S``: standard library only, so this ``__init__`` imports nothing). Wiring:
``judge`` (the word on one call), ``fire`` (where the runner is Claude Code's hook,
``ax.cli``).
"""
