#!/usr/bin/env python3
"""A Bash command validator in the shape of Claude Code's documented example hook
(written for these tests): read the event from stdin, check the command against
(regex, message) rules, exit 2 with the messages on stderr to block, exit 0 to let
the call through, exit 1 on bad input."""

import json
import re
import sys

RULES = [
    (r"^grep\b(?!.*\|)", "Use 'rg' (ripgrep) instead of 'grep'"),
    (r"^find\s+\S+\s+-name\b", "Use 'rg --files -g PATTERN' instead of 'find -name'"),
]

try:
    event = json.load(sys.stdin)
except json.JSONDecodeError as exc:
    print(f"Error: invalid JSON input: {exc}", file=sys.stderr)
    sys.exit(1)
if event.get("tool_name") != "Bash":
    sys.exit(0)
command = event.get("tool_input", {}).get("command", "")
if not command:
    sys.exit(1)
problems = [message for pattern, message in RULES if re.search(pattern, command)]
if problems:
    for message in problems:
        print(f"• {message}", file=sys.stderr)
    sys.exit(2)
