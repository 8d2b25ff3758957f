"""The differential test: warden's permission decisions against Claude Code's own.

`python -m tests.differential` runs every generated case against the pinned
Claude Code CLI (offline, in a network namespace with only `lo`) and against
`warden policy explain`, and prints the agreement; `--slice` runs the fixed CI
slice. See `runner.py` for how Claude Code is driven and `cases.py` for the cases.
"""
