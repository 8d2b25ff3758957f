"""Rule evaluation: deny → ask → allow, first match wins, else the mode's default.

Shared by `PermissionEngine.decide` and `explain`, so what `warden policy explain`
prints is exactly what the engine decides (hooks aside). Owns the order of the
checks and how the Skill tool and the tools other than Bash are decided; a Bash call
goes to `bash_decision`."""

from __future__ import annotations

import logging
import posixpath
from pathlib import Path
from typing import Any

from orchestrator.behavior import Behavior
from orchestrator.permissions import paths
from orchestrator.permissions.bash_decision import decide_bash
from orchestrator.permissions.explanation import (
    BUILT_IN_ASK_SOURCE,
    FAILURE_SOURCE,
    MEMORY_SOURCE,
    MODE_SOURCE,
    Explanation,
    SubcommandVerdict,
)
from orchestrator.permissions.models import (
    EDIT_TOOLS,
    MCP_RESOURCE_TOOLS,
    NO_PROMPT_TOOLS,
    OWN_STATE_TOOLS,
    READ_TOOLS,
    Decision,
    ToolCall,
)
from orchestrator.permissions.policy import AGENT_DEFINITION_SOURCE, EffectivePolicy
from orchestrator.permissions.rules import (
    MCP_PREFIX,
    PATH_TOOLS,
    Rule,
    could_reach,
    mcp_rule_covers,
    path_matches,
    tool_listed,
    webfetch_matches,
)
from orchestrator.permissions.skill_rules import SKILL_TOOL, skill_rule_matches
from sandbox_tools.wire import WORKSPACE

log = logging.getLogger(__name__)

__all__ = [
    "BUILT_IN_ASK_SOURCE",
    "FAILURE_SOURCE",
    "MEMORY_SOURCE",
    "MODE_SOURCE",
    "Explanation",
    "SubcommandVerdict",
    "evaluate",
    "explain",
]


def evaluate(
    policy: EffectivePolicy,
    call: ToolCall,
    *,
    workspace_host: Path | None = None,
    cwd: str = WORKSPACE,
) -> Explanation:
    """Decide `call` from the policy's rules and mode. Never raises: a call that
    cannot be evaluated (a path longer than PATH_MAX, any failure) asks."""
    evaluator = _Evaluator(policy, call, workspace_host, cwd)
    try:
        return evaluator.run()
    except paths.PathTooLongError as exc:
        return evaluator.failed(f"{exc}, so no file can be opened by it")
    except Exception as exc:  # a bug or a resource limit must not decide the call
        log.exception("evaluating a %s call failed", call.tool_name)
        return evaluator.failed(f"warden could not evaluate this call ({type(exc).__name__})")


explain = evaluate


class _Evaluator:
    def __init__(
        self, policy: EffectivePolicy, call: ToolCall, host: Path | None, cwd: str
    ) -> None:
        self.policy = policy
        self.call = call
        self.host = host
        self.cwd = cwd
        self.mode = policy.mode

    def done(
        self, behavior: Behavior, reason: str, rule: Rule | None = None, **extra: Any
    ) -> Explanation:
        if behavior == "ask" and self.mode == "dontAsk":
            behavior, reason = "deny", f"{reason}; the dontAsk mode never asks, so it is denied"
        decision = Decision(
            behavior=behavior,
            reason=reason,
            rule=rule.text if rule else extra.pop("rule_text", None),
            source=rule.source if rule else extra.pop("source", None),
        )
        return Explanation(
            decision=decision, mode=self.mode, mode_source=self.policy.mode_source, **extra
        )

    def failed(self, why: str) -> Explanation:
        """The decision for a call that could not be evaluated: ask (deny in dontAsk)."""
        return self.done("ask", why, source=FAILURE_SOURCE, fallback=True)

    def mode_default(self, tool: str, in_workspace: bool, why: str = "") -> Explanation:
        m = self.mode
        lead = f"{why}; " if why else "no rule matches; "
        if (
            m == "bypassPermissions"
            or tool in OWN_STATE_TOOLS | MCP_RESOURCE_TOOLS
            or (tool in NO_PROMPT_TOOLS and m != "plan")
        ):
            b: Behavior = "allow"
        elif tool in READ_TOOLS and in_workspace:
            b = "allow"  # as Claude Code: reading the working directories needs no rule
        elif m == "dontAsk":
            b = "deny"
        elif tool in READ_TOOLS:
            b = "ask"  # outside the workspace (and additionalDirectories)
        elif m == "plan" and not tool.startswith(MCP_PREFIX):
            b = "deny"
        elif m == "acceptEdits" and tool in EDIT_TOOLS and in_workspace:
            b = "allow"
        else:
            b = "ask"
        text = {
            "allow": f"the {m} mode allows it",
            "deny": f"the {m} mode denies it"
            + (" (only allowed calls run)" if m == "dontAsk" else ""),
            "ask": f"the {m} mode asks for it",
        }[b]
        return self.done(b, lead + text, rule_text=None, source=f"{MODE_SOURCE}:{m}", fallback=True)

    def run(self) -> Explanation:
        tool = self.call.tool_name
        allowed = self.policy.allowed_tools
        if allowed is not None and not tool_listed(tool, allowed):
            return self.done(
                "deny",
                f"{tool} is not among this agent's tools ({', '.join(sorted(allowed)) or 'none'})",
                source=AGENT_DEFINITION_SOURCE,
            )
        if tool == "Bash":
            return decide_bash(self)
        if tool == SKILL_TOOL:
            return self._skill()
        return self._tool()

    # -- Skill ------------------------------------------------------------------------
    def _skill_rules(self, behavior: str, name: str) -> Rule | None:
        return next(
            (
                r
                for r in self.policy.rules_for(behavior)
                if r.tool == SKILL_TOOL and skill_rule_matches(r, name)
            ),
            None,
        )

    def _skill(self) -> Explanation:
        """A `Skill` call as Claude Code decides it (`skill_rules`): deny rules, then
        ask rules, then allow rules, each by name or prefix; a plain skill loads
        unasked in every mode, one with `allowed-tools` (or `disallowed-tools`,
        `hooks`) is a question the mode answers."""
        raw = self.call.tool_input.get("skill")
        if not isinstance(raw, str) or not raw.strip():
            return self.done("deny", "Skill input has no 'skill' string", source="input")
        name = raw.strip().removeprefix("/")
        grant = self.policy.skill(name)
        if grant is not None and not grant.invocable:
            return self.done(
                "allow",
                f"skill {name!r} has disable-model-invocation: the Skill tool refuses to load "
                "it (as Claude Code's does, before any permission), so nothing is loaded",
                source="skill",
            )
        verbs: dict[Behavior, str] = {"deny": "denies it", "ask": "asks for approval",
                                      "allow": "allows it"}  # fmt: skip
        for behavior, verb in verbs.items():
            rule = self._skill_rules(behavior, name)
            if rule is not None:
                return self.done(behavior, f"{rule.text} ({rule.source}) {verb}", rule)
        if grant is None or grant.plain:
            return self.done(
                "allow",
                f"skill {name!r} has instructions only: it loads without a question in "
                "every mode, as in Claude Code",
                source=f"{MODE_SOURCE}:{self.mode}",
                fallback=True,
            )
        why = (
            f"skill {name!r} allows tools while it is loaded ({', '.join(grant.allowed_tools)})"
            if grant.allowed_tools
            else f"skill {name!r} changes tools or hooks while it is loaded"
        )
        if self.mode == "plan":  # Claude Code asks here too: loading it only adds rules
            return self.done(
                "ask", f"{why}; the plan mode asks for it", source=f"{MODE_SOURCE}:plan",
                fallback=True,
            )  # fmt: skip
        return self.mode_default(SKILL_TOOL, False, why)

    # -- non-Bash tools ---------------------------------------------------------------
    def _target(self) -> list[str] | None:
        inp = self.call.tool_input
        tool = self.call.tool_name
        if tool in ("Read", "Write", "Edit"):
            p = inp.get("file_path")
        elif tool == "NotebookEdit":
            p = inp.get("notebook_path")
        elif tool in ("Glob", "Grep"):
            p = inp.get("path") or self.cwd
            pattern = inp.get("pattern")
            if tool == "Glob" and isinstance(pattern, str) and isinstance(p, str):
                p = posixpath.join(
                    p, paths.static_prefix(pattern) if any(c in pattern for c in "*?[") else pattern
                )
        else:
            return None
        if not isinstance(p, str) or not p:
            return []
        return paths.spellings(p, self.host, self.cwd)

    def _matches(self, rule: Rule, target: list[str] | None, strict: bool) -> bool:
        if not rule.applies_to(self.call.tool_name):
            return False
        if rule.whole_tool:
            # As Claude Code: a bare `Edit` allows the Edit tool only; deny and ask
            # rules for a tool also hold for the tools it covers.
            return (
                strict
                or rule.tool == self.call.tool_name
                or mcp_rule_covers(rule.tool, self.call.tool_name)
            )
        if rule.tool in PATH_TOOLS:
            if target is None:
                return False
            if not target:
                return strict
            return path_matches(rule, target, strict=strict)
        if rule.tool == "Task":
            return self.call.tool_input.get("subagent_type") == (rule.specifier or "").strip()
        if rule.tool == "WebFetch":
            return webfetch_matches(rule.specifier or "", self.call.tool_input.get("url"))
        return False

    def _tool(self) -> Explanation:
        tool = self.call.tool_name
        target = self._target()
        if tool in ("Read", "Write", "Edit", "NotebookEdit") and not target:
            key = "notebook_path" if tool == "NotebookEdit" else "file_path"
            return self.done("deny", f"{tool} input has no {key!r} string", source="input")
        for rule in self.policy.rules_for("deny"):
            if self._matches(rule, target, strict=True):
                return self.done("deny", f"denied by {rule.text} ({rule.source})", rule)
        # MCP tools are decided by rules in plan mode too: an allow rule allows, else
        # the call asks, whatever the server's readOnlyHint (measured with the pinned
        # Claude Code; `_mode_default`)
        mcp = tool.startswith(MCP_PREFIX)
        unasked = READ_TOOLS | OWN_STATE_TOOLS | MCP_RESOURCE_TOOLS
        if self.mode == "plan" and tool not in unasked and not mcp:
            return self.done("deny", "the plan mode is read-only", source=f"{MODE_SOURCE}:plan")
        memory = self._memory_write(target)
        for rule in self.policy.rules_for("ask"):
            if memory and rule.source == BUILT_IN_ASK_SOURCE:
                continue  # `.claude` asks, but the agent's own memory is its to write
            if self._matches(rule, target, strict=True):
                return self.done("ask", f"{rule.text} ({rule.source}) asks for approval", rule)
        if memory:
            return self.done(
                "allow",
                "agent memory files are allowed for writing (the agent's own memory "
                "directory, as in Claude Code)",
                source=MEMORY_SOURCE,
            )
        if tool == "Grep" and target and not self._all_regular_files(target):
            for rule in [*self.policy.rules_for("deny"), *self.policy.rules_for("ask")]:
                if rule.tool == "Read" and could_reach(rule, target):
                    return self.done(
                        "ask",
                        f"this search could read files that {rule.text} ({rule.source}) "
                        f"{rule.behavior}s; narrow its path to allow it",
                        rule,
                    )
        for rule in self.policy.rules_for("allow"):
            if self._matches(rule, target, strict=False):
                return self.done("allow", f"allowed by {rule.text} ({rule.source})", rule)
        in_ws = bool(target) and all(paths.inside(p, self.edit_roots()) for p in target or [])
        return self.mode_default(tool, in_ws)

    def _memory_write(self, target: list[str] | None) -> bool:
        """A Write or Edit of `.md` files in the agent's own memory directory, every
        spelling of the path (links resolved) inside it."""
        if self.call.tool_name not in ("Write", "Edit") or not target:
            return False
        return self.in_memory(target)

    def in_memory(self, spellings: list[str]) -> bool:
        """Every spelling of a path is a `.md` file in the agent's own memory directory
        (what Claude Code lets Write, Edit and a shell redirection write unasked)."""
        root = self.policy.memory_dir
        if root is None or not spellings:
            return False
        return all(p.endswith(".md") and paths.inside(p, [root]) and p != root for p in spellings)

    def _all_regular_files(self, spellings: list[str]) -> bool:
        """True when the host shows every spelling is a regular file (not a tree)."""
        if self.host is None:
            return False
        for p in spellings:
            host = paths.to_host(p, self.host)
            if host is None or not host.is_file() or host.is_symlink():
                return False
        return True

    def edit_roots(self) -> list[str]:
        extra = [
            posixpath.normpath(posixpath.join(WORKSPACE, d))
            for d in self.policy.additional_directories
        ]
        return [WORKSPACE, *extra]
