"""The Bash analyser: what a command line runs, proven or asked (`analysis.analyse`).

Two independent parsers must agree: the strict whitelist grammar (`parser`, with
its words in `words`) and tree-sitter-bash (`tree`); `wrappers` looks through
commands that run other commands (`env`, `timeout`, `xargs`, …) and `env` decides
which environment prefixes and shell variables are harmless. Everything else of
`permissions` reaches the analyser through the names below.

May import: `errors`. Nothing else of warden: the analyser is pure (a string in,
an analysis out), so it can be fuzzed and proven on its own.
"""

from orchestrator.permissions.shell.analysis import (
    DYNAMIC,
    MAX_COMMAND_CHARS,
    MAX_HEREDOCS,
    MAX_NESTING,
    ShellAnalysis,
    SimpleCommand,
    analyse,
    is_safe_device,
    refused_shape,
)

__all__ = [
    "DYNAMIC",
    "MAX_COMMAND_CHARS",
    "MAX_HEREDOCS",
    "MAX_NESTING",
    "ShellAnalysis",
    "SimpleCommand",
    "analyse",
    "is_safe_device",
    "refused_shape",
]
