"""How a Bash call is decided from the rules: each part the analyser found (simple
commands, wrappers, files read and written, globs and trees) against deny, ask and
allow rules, as Claude Code does.

Owns the Bash decision order and its wording; which files a command reaches is
`bash_targets`, the rest of `evaluate` decides the other tools."""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar

from orchestrator.behavior import Behavior
from orchestrator.permissions import bash_targets, paths
from orchestrator.permissions.analyser_bound import analyse_bounded
from orchestrator.permissions.explanation import (
    BUILT_IN_ASK_SOURCE,
    MEMORY_SOURCE,
    MODE_SOURCE,
    Decider,
    Explanation,
    SubcommandVerdict,
)
from orchestrator.permissions.glob_reads import glob_may_read
from orchestrator.permissions.rules import Rule, bash_matches, could_reach, path_matches
from orchestrator.permissions.shell import SimpleCommand

TRANSPARENT_WRAPPERS = frozenset({"timeout", "time", "nice", "nohup", "stdbuf"})
"""Wrappers an allow rule looks through, as Claude Code does: `timeout 5 npm test` is
allowed by `Bash(npm test:*)`. Every other command that runs a command (`sh -c`,
`bash -c`, `xargs`, `env`, `flock`, ...) must be allowed itself, as well as what it
runs: Claude Code asks for `sh -c 'echo hi'` even with `Bash(echo:*)` allowed."""

_Target = TypeVar("_Target")
"""What a may-reach check holds against a rule: a glob operand, or a tree's roots."""


def _base(command: SimpleCommand) -> str:
    return posixpath.basename(command.words[0]) if command.words else ""


def _matched(kind: Literal["command", "write", "read"], text: str, rule: Rule) -> SubcommandVerdict:
    return SubcommandVerdict(
        kind=kind, text=text, verdict=rule.behavior, rule=rule.text, source=rule.source
    )


def decide_bash(ev: Decider) -> Explanation:
    """A Bash call: deny and ask rules for any part (a command, a file it reads or
    writes), then files that a glob or a tree may reach, then allow rules for every
    part; what the analyser cannot prove is never allowed by a rule."""
    command = ev.call.tool_input.get("command")
    if not isinstance(command, str):
        return ev.done("deny", "Bash input has no 'command' string", source="input")
    analysis = analyse_bounded(command)
    found = bash_targets.collect(analysis, ev.host, ev.cwd)
    problems, writes, reads = found.problems, found.writes, found.reads
    verdicts: list[SubcommandVerdict] = []

    def scan(behavior: str, strict: bool) -> SubcommandVerdict | None:
        for rule in ev.policy.rules_for(behavior):
            for cmd in [*analysis.commands, *analysis.wrappers]:
                if rule.tool == "Bash" and bash_matches(rule, cmd, strict=strict):
                    return _matched("command", cmd.display(), rule)
            for text, spell in [*writes, *found.changed]:
                if (
                    rule.source == BUILT_IN_ASK_SOURCE
                    and (text, spell) in writes
                    and ev.in_memory(spell)
                ):
                    continue  # a redirection into its own memory: as Claude Code
                if rule.tool in ("Edit", "Write") and path_matches(rule, spell, strict=strict):
                    return _matched("write", text, rule)
            for text, spell in reads:
                if rule.tool == "Read" and path_matches(rule, spell, strict=strict):
                    return _matched("read", text, rule)
        return None

    extra: dict[str, Any] = {"problems": tuple(problems)}

    def decided(behavior: Behavior, hit: SubcommandVerdict, verb: str) -> Explanation:
        return ev.done(
            behavior,
            f"{hit.kind} '{hit.text}' {verb} {hit.rule} ({hit.source})",
            rule_text=hit.rule,
            source=hit.source,
            subcommands=(hit,),
            **extra,
        )

    hit = scan("deny", strict=True)
    if hit:
        return decided("deny", hit, "is denied by")
    if ev.mode == "plan":
        return ev.done("deny", "the plan mode is read-only", source=f"{MODE_SOURCE}:plan", **extra)
    hit = scan("ask", strict=True)
    if hit:
        return decided("ask", hit, "needs approval:")

    write_under = "the command may write files under '{}'"
    read_under = "the command may read files under '{}'"
    near = (
        _may_reach(ev, found.globs, "read", glob_may_read, "'{}' may match files", extra)
        or _may_reach(ev, found.write_trees, "write", could_reach, write_under, extra)
        or _may_reach(ev, found.trees, "read", could_reach, read_under, extra)
    )
    if near is not None:
        return near

    allow_rules = [r for r in ev.policy.rules_for("allow")]
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
        by_mode = ev.mode in ("acceptEdits", "bypassPermissions") and all(
            paths.inside(p, ev.edit_roots()) for p in spell
        )
        memory = rule is None and not by_mode and ev.in_memory(spell)
        by_mode = by_mode or memory
        verdicts.append(
            SubcommandVerdict(
                kind="write",
                text=text,
                verdict="allow" if rule or by_mode else None,
                rule=rule.text if rule else None,
                source=rule.source
                if rule
                else (MEMORY_SOURCE if memory else f"{MODE_SOURCE}:{ev.mode}" if by_mode else None),
            )
        )
        if rule is None and not by_mode:
            uncovered.append(f"> {text}")
        elif rule is not None:
            used.append(rule)
    extra["subcommands"] = tuple(verdicts)
    if problems:
        why = "the analyser cannot prove what this command runs (" + "; ".join(problems) + ")"
        if ev.mode == "bypassPermissions":
            return ev.done(
                "allow",
                why + "; the bypassPermissions mode allows it",
                source=f"{MODE_SOURCE}:bypassPermissions",
                fallback=True,
                **extra,
            )
        b: Behavior = "deny" if ev.mode == "dontAsk" else "ask"
        return ev.done(
            b,
            why + ", so no rule can allow it",
            source="shell analysis",
            fallback=True,
            **extra,
        )
    if not analysis.commands and not writes:
        return ev.mode_default(
            "Bash", False, "the command runs nothing a rule can name"
        ).model_copy(update={"subcommands": tuple(verdicts)})
    if not uncovered:
        names = list(dict.fromkeys(r.text for r in used))
        srcs = list(dict.fromkeys(r.source for r in used))
        return ev.done(
            "allow",
            "every part is allowed: " + ", ".join(names),
            rule_text=", ".join(names) or None,
            source=", ".join(srcs) or f"{MODE_SOURCE}:{ev.mode}",
            **extra,
        )
    exp = ev.mode_default(
        "Bash", False, "no allow rule covers " + ", ".join(f"'{u}'" for u in uncovered)
    )
    return exp.model_copy(update=extra)


def _may_reach(
    ev: Decider,
    targets: Sequence[tuple[str, _Target]],
    kind: Literal["read", "write"],
    reaches: Callable[[Rule, _Target], bool],
    what: str,
    extra: dict[str, Any],
) -> Explanation | None:
    """Ask when a target not decided exactly (a glob, a whole tree) may reach a
    file a deny or ask rule names: only naming the files can decide it. `what`
    says what the command may do, with `{}` for the target's text."""
    tools = ("Edit", "Write") if kind == "write" else ("Read",)
    near_rules = [*ev.policy.rules_for("deny"), *ev.policy.rules_for("ask")]
    for text, target in targets:
        for near in near_rules:
            if near.tool in tools and reaches(near, target):
                hit = SubcommandVerdict(
                    kind=kind, text=text, verdict="ask", rule=near.text, source=near.source
                )
                return ev.done(
                    "ask",
                    f"{what.format(text)} that {near.text} ({near.source}) "
                    f"{near.behavior}s; name the files to decide it",
                    rule_text=near.text,
                    source=near.source,
                    subcommands=(hit,),
                    **extra,
                )
    return None
