#!/usr/bin/env python3
"""UserPromptSubmit hook: refuse prompts that carry an API key."""

import json
import re
import sys

SECRET = re.compile(r"sk-ant-[A-Za-z0-9_-]{10,}|AKIA[0-9A-Z]{16}|ghp_[A-Za-z0-9]{30,}")

data = json.load(sys.stdin)
if SECRET.search(data.get("prompt", "")):
    print(
        json.dumps(
            {
                "decision": "block",
                "reason": "Your prompt contains what looks like an API key. Remove it and pass "
                "the key through an environment variable instead.",
            }
        )
    )
sys.exit(0)
