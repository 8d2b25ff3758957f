"""Host-side permission decisions: Claude Code rules, modes, sources, hooks, approvers.

Two rooms have their own rules: the Bash analyser (`shell`) and hooks (`hooks`;
a sandboxed hook runs in a container the run provides, `hooks.HookSandbox`).

May import: `config`, `errors`, `shipped` (the shipped policies), `behavior`, `event_sink` (the task a question is for),
`labels`, `untrusted_text` (questions show container text). Never `backend`,
`images` or `workspace`.
"""

from orchestrator.behavior import Behavior
from orchestrator.permissions.engine import PermissionEngine
from orchestrator.permissions.evaluate import Explanation, SubcommandVerdict, evaluate, explain
from orchestrator.permissions.hooks import HookCommand, HookSet, load_hooks
from orchestrator.permissions.models import (
    MODES,
    CallContext,
    Decision,
    HookOutcome,
    Mode,
    ToolCall,
)
from orchestrator.permissions.policy import EffectivePolicy, effective_tools, narrow_mode
from orchestrator.permissions.rules import Rule, parse_rule
from orchestrator.permissions.sources import load_policy

__all__ = [
    "MODES",
    "Behavior",
    "CallContext",
    "Decision",
    "EffectivePolicy",
    "Explanation",
    "HookCommand",
    "HookOutcome",
    "HookSet",
    "Mode",
    "PermissionEngine",
    "Rule",
    "SubcommandVerdict",
    "ToolCall",
    "effective_tools",
    "evaluate",
    "explain",
    "load_hooks",
    "load_policy",
    "narrow_mode",
    "parse_rule",
]
