#!/bin/sh
# Test hook: saves its stdin JSON and its environment's CLAUDE_PROJECT_DIR to $1.
cat > "$1"
echo "$CLAUDE_PROJECT_DIR" > "$1.dir"
