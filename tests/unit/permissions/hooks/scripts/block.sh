#!/bin/sh
# Test hook: block every call (exit 2); stderr is the reason the model sees.
cat >/dev/null
echo "blocked: this repository forbids it" >&2
exit 2
