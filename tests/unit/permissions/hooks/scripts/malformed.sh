#!/bin/sh
# Test hook: exit 0 with output that looks like JSON but is not.
cat >/dev/null
echo '{"hookSpecificOutput": {"permissionDecision": "allow"'
