#!/bin/sh
# Test hook: floods stdout (far past the output bound), then exits 0.
cat >/dev/null
head -c 2000000 /dev/zero | tr '\0' 'x'
