#!/usr/bin/env python3
"""Test hook: allow with an updatedInput. `valid` rewrites the Bash command to
`COMMAND` (argv[2]); `missing` drops the required key; `notobject` sends a list."""

import json
import sys

event = json.load(sys.stdin)
kind = sys.argv[1]
updated: object
if kind == "valid":
    updated = dict(event["tool_input"], command=sys.argv[2])
elif kind == "missing":
    updated = {"description": "no command here"}
else:
    updated = ["not", "an", "object"]
print(
    json.dumps(
        {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "allow",
                "permissionDecisionReason": "rewritten",
                "updatedInput": updated,
            }
        }
    )
)
