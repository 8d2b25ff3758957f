"""Rule evaluation: deny → ask → allow, first match wins, else the mode's default.

Shared by `PermissionEngine.decide` and `explain`, so what `warden policy explain`
prints is exactly what the engine decides (hooks aside)."""

from __future__ import annotations

import logging
import posixpath
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.behavior import Behavior
from orchestrator.permissions import file_reads, file_writes, glob_reads, paths, program_options
from orchestrator.permissions.analyser_bound import analyse_bounded
from orchestrator.permissions.glob_reads import glob_may_read
from orchestrator.permissions.models import (
    EDIT_TOOLS,
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
    bash_matches,
    could_reach,
    mcp_rule_covers,
    path_matches,
    tool_listed,
    webfetch_matches,
)
from orchestrator.permissions.shell import SimpleCommand
from orchestrator.permissions.skill_rules import SKILL_TOOL, skill_rule_matches
from sandbox_tools.wire import WORKSPACE

log = logging.getLogger(__name__)

MODE_SOURCE = "mode"
MEMORY_SOURCE = "agent memory"
BUILT_IN_ASK_SOURCE = "built-in"
"""The source of the executed-paths ask rules (`sources.BUILT_IN_SOURCE`)."""
TRANSPARENT_WRAPPERS = frozenset({"timeout", "time", "nice", "nohup", "stdbuf"})
"""Wrappers an allow rule looks through, as Claude Code does: `timeout 5 npm test` is
allowed by `Bash(npm test:*)`. Every other command that runs a command (`sh -c`,
`bash -c`, `xargs`, `env`, `flock`, ...) must be allowed itself, as well as what it
runs: Claude Code asks for `sh -c 'echo hi'` even with `Bash(echo:*)` allowed."""


def _base(command: SimpleCommand) -> str:
    return posixpath.basename(command.words[0]) if command.words else ""


FAILURE_SOURCE = "evaluation"
"""The source of a decision taken because a call could not be evaluated (it asks)."""


class SubcommandVerdict(BaseModel):
    """How one piece of a Bash command (a simple command or a redirect) fared."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["command", "write", "read"]
    """A simple command, an output redirection (a write) or an input redirection."""
    text: str
    """The command or path."""
    verdict: Behavior | None
    """The rule list it matched; None when no rule matched it."""
    rule: str | None = None
    """The rule that matched."""
    source: str | None = None
    """That rule's source."""


class Explanation(BaseModel):
    """Which rule from which source decides a call, and why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    decision: Decision
    """The decision from rules and mode alone."""
    mode: str
    """The mode in force, and"""
    mode_source: str
    """where it came from."""
    fallback: bool = False
    """True when no rule decided and the mode's default (or an analyser fallback) did."""
    subcommands: tuple[SubcommandVerdict, ...] = Field(default_factory=tuple)
    """For Bash: each simple command and redirect target and what it matched."""
    problems: tuple[str, ...] = Field(default_factory=tuple)
    """What the shell analyser did not understand."""


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

    def _done(
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
        return self._done("ask", why, source=FAILURE_SOURCE, fallback=True)

    def _mode_default(self, tool: str, in_workspace: bool, why: str = "") -> Explanation:
        m = self.mode
        lead = f"{why}; " if why else "no rule matches; "
        if (
            m == "bypassPermissions"
            or tool in OWN_STATE_TOOLS
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
        return self._done(
            b, lead + text, rule_text=None, source=f"{MODE_SOURCE}:{m}", fallback=True
        )

    def run(self) -> Explanation:
        tool = self.call.tool_name
        allowed = self.policy.allowed_tools
        if allowed is not None and not tool_listed(tool, allowed):
            return self._done(
                "deny",
                f"{tool} is not among this agent's tools ({', '.join(sorted(allowed)) or 'none'})",
                source=AGENT_DEFINITION_SOURCE,
            )
        if tool == "Bash":
            return self._bash()
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
            return self._done("deny", "Skill input has no 'skill' string", source="input")
        name = raw.strip().removeprefix("/")
        grant = self.policy.skill(name)
        if grant is not None and not grant.invocable:
            return self._done(
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
                return self._done(behavior, f"{rule.text} ({rule.source}) {verb}", rule)
        if grant is None or grant.plain:
            return self._done(
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
            return self._done(
                "ask", f"{why}; the plan mode asks for it", source=f"{MODE_SOURCE}:plan",
                fallback=True,
            )  # fmt: skip
        return self._mode_default(SKILL_TOOL, False, why)

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
            return self._done("deny", f"{tool} input has no {key!r} string", source="input")
        for rule in self.policy.rules_for("deny"):
            if self._matches(rule, target, strict=True):
                return self._done("deny", f"denied by {rule.text} ({rule.source})", rule)
        # MCP tools are decided by rules in plan mode too: an allow rule allows, else
        # the call asks, whatever the server's readOnlyHint (measured with the pinned
        # Claude Code; `_mode_default`)
        mcp = tool.startswith(MCP_PREFIX)
        if self.mode == "plan" and tool not in READ_TOOLS | OWN_STATE_TOOLS and not mcp:
            return self._done("deny", "the plan mode is read-only", source=f"{MODE_SOURCE}:plan")
        memory = self._memory_write(target)
        for rule in self.policy.rules_for("ask"):
            if memory and rule.source == BUILT_IN_ASK_SOURCE:
                continue  # `.claude` asks, but the agent's own memory is its to write
            if self._matches(rule, target, strict=True):
                return self._done("ask", f"{rule.text} ({rule.source}) asks for approval", rule)
        if memory:
            return self._done(
                "allow",
                "agent memory files are allowed for writing (the agent's own memory "
                "directory, as in Claude Code)",
                source=MEMORY_SOURCE,
            )
        if tool == "Grep" and target and not self._all_regular_files(target):
            for rule in [*self.policy.rules_for("deny"), *self.policy.rules_for("ask")]:
                if rule.tool == "Read" and could_reach(rule, target):
                    return self._done(
                        "ask",
                        f"this search could read files that {rule.text} ({rule.source}) "
                        f"{rule.behavior}s; narrow its path to allow it",
                        rule,
                    )
        for rule in self.policy.rules_for("allow"):
            if self._matches(rule, target, strict=False):
                return self._done("allow", f"allowed by {rule.text} ({rule.source})", rule)
        in_ws = bool(target) and all(paths.inside(p, self._edit_roots()) for p in target or [])
        return self._mode_default(tool, in_ws)

    def _memory_write(self, target: list[str] | None) -> bool:
        """A Write or Edit of `.md` files in the agent's own memory directory, every
        spelling of the path (links resolved) inside it."""
        if self.call.tool_name not in ("Write", "Edit") or not target:
            return False
        return self._in_memory(target)

    def _in_memory(self, spellings: list[str]) -> bool:
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

    def _edit_roots(self) -> list[str]:
        extra = [
            posixpath.normpath(posixpath.join(WORKSPACE, d))
            for d in self.policy.additional_directories
        ]
        return [WORKSPACE, *extra]

    # -- Bash -------------------------------------------------------------------------
    def _bash(self) -> Explanation:
        command = self.call.tool_input.get("command")
        if not isinstance(command, str):
            return self._done("deny", "Bash input has no 'command' string", source="input")
        analysis = analyse_bounded(command)
        problems = list(analysis.problems)
        writes: list[tuple[str, list[str]]] = []
        for target in analysis.writes:
            if analysis.changes_dir and not target.startswith("/"):
                problems.append(f"'{target}' is written after a cd, so its path is unknown")
            writes.append((target, paths.spellings(target, self.host, self.cwd)))
        reads = [(t, paths.spellings(t, self.host, self.cwd)) for t in analysis.reads]
        for target in analysis.reads:
            if analysis.changes_dir and not target.startswith("/"):
                problems.append(f"'{target}' is read after a cd, so its path is unknown")
        trees: list[tuple[str, list[str]]] = []
        globs: list[tuple[str, glob_reads.GlobOperand]] = []
        changed: list[tuple[str, list[str]]] = []  # written by a command's operands
        write_trees: list[tuple[str, list[str]]] = []
        problems += program_options.link_problems(analysis.commands)
        problems += program_options.route_problems([*analysis.reads, *analysis.writes])
        for cmd in analysis.commands:
            written = file_writes.writes(cmd, self.cwd)
            hidden = program_options.effects(cmd)  # options and scripts that read or write
            problems += hidden.problems
            written.files += hidden.writes
            written.trees += hidden.write_trees
            for target in written.files:
                if analysis.changes_dir and not target.startswith("/"):
                    write_trees.append((f"{target} (after a cd)", ["/"]))
                else:
                    changed.append((target, paths.spellings(target, self.host, self.cwd)))
            for target in written.trees:
                root = "/" if analysis.changes_dir and not target.startswith("/") else target
                write_trees.append((target, paths.normalise(root, self.cwd)))
            found = file_reads.reads(cmd, self.cwd)
            found.files += hidden.reads
            for target in found.files:
                if analysis.changes_dir and not target.startswith("/"):
                    trees.append((f"{target} (after a cd)", ["/"]))
                else:
                    reads.append((target, paths.spellings(target, self.host, self.cwd)))
            for target in found.trees:
                root = "/" if analysis.changes_dir and not target.startswith("/") else target
                trees.append((target, paths.normalise(root, self.cwd)))
            for word in found.globs:
                operand = None
                if not analysis.changes_dir or word.startswith("/"):
                    operand = glob_reads.glob_operand(word, self.cwd, self.host)
                if operand is None:  # not decided exactly: the tree it lies under
                    root = file_reads.static_dir(word, self.cwd)
                    root = "/" if analysis.changes_dir and not word.startswith("/") else root
                    trees.append((word, paths.normalise(root, self.cwd)))
                    continue
                globs.append((word, operand))
                reads += [(m, paths.spellings(m, self.host, self.cwd)) for m in operand.matches]
        verdicts: list[SubcommandVerdict] = []

        def scan(behavior: str, strict: bool) -> SubcommandVerdict | None:
            for rule in self.policy.rules_for(behavior):
                for cmd in [*analysis.commands, *analysis.wrappers]:
                    if rule.tool == "Bash" and bash_matches(rule, cmd, strict=strict):
                        return SubcommandVerdict(
                            kind="command",
                            text=cmd.display(),
                            verdict=rule.behavior,
                            rule=rule.text,
                            source=rule.source,
                        )
                for text, spell in [*writes, *changed]:
                    if (
                        rule.source == BUILT_IN_ASK_SOURCE
                        and (text, spell) in writes
                        and self._in_memory(spell)
                    ):
                        continue  # a redirection into its own memory: as Claude Code
                    if rule.tool in ("Edit", "Write") and path_matches(rule, spell, strict=strict):
                        return SubcommandVerdict(
                            kind="write",
                            text=text,
                            verdict=rule.behavior,
                            rule=rule.text,
                            source=rule.source,
                        )
                for text, spell in reads:
                    if rule.tool == "Read" and path_matches(rule, spell, strict=strict):
                        return SubcommandVerdict(
                            kind="read",
                            text=text,
                            verdict=rule.behavior,
                            rule=rule.text,
                            source=rule.source,
                        )
            return None

        extra: dict[str, Any] = {"problems": tuple(problems)}
        hit = scan("deny", strict=True)
        if hit:
            return self._done(
                "deny",
                f"{hit.kind} '{hit.text}' is denied by {hit.rule} ({hit.source})",
                rule_text=hit.rule,
                source=hit.source,
                subcommands=(hit,),
                **extra,
            )
        if self.mode == "plan":
            return self._done(
                "deny", "the plan mode is read-only", source=f"{MODE_SOURCE}:plan", **extra
            )
        hit = scan("ask", strict=True)
        if hit:
            return self._done(
                "ask",
                f"{hit.kind} '{hit.text}' needs approval: {hit.rule} ({hit.source})",
                rule_text=hit.rule,
                source=hit.source,
                subcommands=(hit,),
                **extra,
            )

        for text, operand in globs:
            for near in [*self.policy.rules_for("deny"), *self.policy.rules_for("ask")]:
                if near.tool == "Read" and glob_may_read(near, operand):
                    hit = SubcommandVerdict(
                        kind="read", text=text, verdict="ask", rule=near.text, source=near.source
                    )
                    return self._done(
                        "ask",
                        f"'{text}' may match files that {near.text} ({near.source}) "
                        f"{near.behavior}s; name the files to decide it",
                        rule_text=near.text,
                        source=near.source,
                        subcommands=(hit,),
                        **extra,
                    )
        for text, roots in write_trees:
            for near in [*self.policy.rules_for("deny"), *self.policy.rules_for("ask")]:
                if near.tool in ("Edit", "Write") and could_reach(near, roots):
                    hit = SubcommandVerdict(
                        kind="write", text=text, verdict="ask", rule=near.text, source=near.source
                    )
                    return self._done(
                        "ask",
                        f"the command may write files under '{text}' that {near.text} "
                        f"({near.source}) {near.behavior}s; name the files to decide it",
                        rule_text=near.text,
                        source=near.source,
                        subcommands=(hit,),
                        **extra,
                    )
        for text, roots in trees:
            for near in [*self.policy.rules_for("deny"), *self.policy.rules_for("ask")]:
                if near.tool == "Read" and could_reach(near, roots):
                    hit = SubcommandVerdict(
                        kind="read", text=text, verdict="ask", rule=near.text, source=near.source
                    )
                    return self._done(
                        "ask",
                        f"the command may read files under '{text}' that {near.text} "
                        f"({near.source}) {near.behavior}s; name the files to decide it",
                        rule_text=near.text,
                        source=near.source,
                        subcommands=(hit,),
                        **extra,
                    )

        allow_rules = [r for r in self.policy.rules_for("allow")]
        uncovered: list[str] = []
        used: list[Rule] = []
        named = [w for w in analysis.wrappers if _base(w) not in TRANSPARENT_WRAPPERS]
        for cmd in [*analysis.commands, *named]:
            rule = next(
                (r for r in allow_rules if r.tool == "Bash" and bash_matches(r, cmd, strict=False)),
                None,
            )
            verdicts.append(
                SubcommandVerdict(
                    kind="command",
                    text=cmd.display(),
                    verdict="allow" if rule else None,
                    rule=rule.text if rule else None,
                    source=rule.source if rule else None,
                )
            )
            if rule is None:
                uncovered.append(cmd.display())
            else:
                used.append(rule)
        for text, spell in writes:
            rule = next(
                (
                    r
                    for r in allow_rules
                    if r.tool in ("Edit", "Write") and path_matches(r, spell, strict=False)
                ),
                None,
            )
            by_mode = self.mode in ("acceptEdits", "bypassPermissions") and all(
                paths.inside(p, self._edit_roots()) for p in spell
            )
            memory = rule is None and not by_mode and self._in_memory(spell)
            by_mode = by_mode or memory
            verdicts.append(
                SubcommandVerdict(
                    kind="write",
                    text=text,
                    verdict="allow" if rule or by_mode else None,
                    rule=rule.text if rule else None,
                    source=rule.source
                    if rule
                    else (
                        MEMORY_SOURCE
                        if memory
                        else f"{MODE_SOURCE}:{self.mode}"
                        if by_mode
                        else None
                    ),
                )
            )
            if rule is None and not by_mode:
                uncovered.append(f"> {text}")
            elif rule is not None:
                used.append(rule)
        extra["subcommands"] = tuple(verdicts)
        if problems:
            why = "the analyser cannot prove what this command runs (" + "; ".join(problems) + ")"
            if self.mode == "bypassPermissions":
                return self._done(
                    "allow",
                    why + "; the bypassPermissions mode allows it",
                    source=f"{MODE_SOURCE}:bypassPermissions",
                    fallback=True,
                    **extra,
                )
            b: Behavior = "deny" if self.mode == "dontAsk" else "ask"
            return self._done(
                b,
                why + ", so no rule can allow it",
                source="shell analysis",
                fallback=True,
                **extra,
            )
        if not analysis.commands and not writes:
            return self._mode_default(
                "Bash", False, "the command runs nothing a rule can name"
            ).model_copy(update={"subcommands": tuple(verdicts)})
        if not uncovered:
            names = list(dict.fromkeys(r.text for r in used))
            srcs = list(dict.fromkeys(r.source for r in used))
            return self._done(
                "allow",
                "every part is allowed: " + ", ".join(names),
                rule_text=", ".join(names) or None,
                source=", ".join(srcs) or f"{MODE_SOURCE}:{self.mode}",
                **extra,
            )
        exp = self._mode_default(
            "Bash", False, "no allow rule covers " + ", ".join(f"'{u}'" for u in uncovered)
        )
        return exp.model_copy(update=extra)
