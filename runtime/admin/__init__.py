"""The admin API on the metrics address (behind `--admin-token-file`) and the commands
that speak to it: approvals (`api`, `approvalscli`, issue 47) and model-API spending
(`usage`, `usagecli`, issue 46)."""
