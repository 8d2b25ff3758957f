"""PreToolUse / PostToolUse hooks with Claude Code's protocol: which hooks exist
(`definitions`), what a host hook may see and run (`trust`), running one and
reading what it said (`run`), whether a host hook's workspace scripts are still
what trust covered (`scripts`), and what a sandboxed hook needs from the run
(`sandbox`, a protocol the run implements).

May import: `config`, `errors`, `behavior`, `permissions.models` (outcomes, calls),
`permissions.sources` and `permissions.settings_files` (settings documents),
`regular_file` (reading a script without following links) and `sandbox_tools.wire`
(input limits).
"""

from orchestrator.permissions.hooks.definitions import (
    HookCommand,
    HookEvent,
    HookSet,
    load_hooks,
    parse_hooks,
)
from orchestrator.permissions.hooks.run import hook_input, run_hooks
from orchestrator.permissions.hooks.sandbox import HookSandbox, SandboxedHookRun

__all__ = [
    "HookCommand",
    "HookEvent",
    "HookSandbox",
    "HookSet",
    "SandboxedHookRun",
    "hook_input",
    "load_hooks",
    "parse_hooks",
    "run_hooks",
]
