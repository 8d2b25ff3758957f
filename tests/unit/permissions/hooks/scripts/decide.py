#!/usr/bin/env python3
"""Test hook: answer with a permissionDecision given on the command line.

usage: decide.py DECISION [REASON]     DECISION: allow | deny | ask
"""

import json
import sys

json.load(sys.stdin)
decision = sys.argv[1]
reason = sys.argv[2] if len(sys.argv) > 2 else f"hook says {decision}"
print(
    json.dumps(
        {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": decision,
                "permissionDecisionReason": reason,
            }
        }
    )
)
