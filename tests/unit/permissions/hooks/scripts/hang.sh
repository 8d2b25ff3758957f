#!/bin/sh
# Test hook: never answers; leaves a child in its process group. Writes both pids
# to $1 so the test can check the whole group was killed.
sleep 300 &
echo "$$ $!" > "$1"
sleep 300
