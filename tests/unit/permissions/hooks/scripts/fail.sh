#!/bin/sh
# Test hook: a broken hook (exit 1) - a non-blocking error.
cat >/dev/null
echo "hook crashed: missing dependency" >&2
exit 1
