"""PreToolUse / PostToolUse hooks, with Claude Code's protocol, run on the host.

Configured in a settings file as Claude Code does it:

    {"hooks": {"PreToolUse": [{"matcher": "Bash",
                               "hooks": [{"type": "command", "command": "...", "timeout": 60}]}]}}

Each matching command runs with `sh -c` in its own process group, with the
event as JSON on stdin, an environment built from an allowlist and a fixed PATH,
in an empty temporary directory (`CLAUDE_PROJECT_DIR` names the workspace); see
`trust` for why, and for the commands refused because they would run
workspace content. warden's own keys on a hook entry:

    {"type": "command", "command": "...",
     "cwd": "workspace",   # run in the workspace instead of an empty directory
     "trusted": true,      # run it even if it runs files a subagent can write
     "sandbox": true}      # run it in a hardened sandbox, not on the host

and in a settings file, `{"warden": {"hookEnv": ["MY_TOKEN"]}}` passes those
host variables to every hook.
Exit 2 blocks (stderr is the reason the model sees); exit 0 may print JSON with
`hookSpecificOutput.permissionDecision`; any other exit, a timeout (the whole
process group is killed), or malformed JSON is a non-blocking error that is
reported in the outcome and never counts as an allow.

Running a hook and reading what it said is `run`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, TypedDict

from orchestrator.config import Settings
from orchestrator.errors import PolicyError
from orchestrator.jsontypes import JSONObject
from orchestrator.permissions.settings_files import load_stack
from orchestrator.permissions.sources import MAX_POLICY_BYTES

DEFAULT_HOOK_TIMEOUT_S = 60.0
"""Claude Code's default hook timeout."""
MAX_HOOK_TIMEOUT_S = 600.0
"""Longest timeout a hook may ask for."""

HookEvent = Literal["PreToolUse", "PostToolUse"]
EVENTS: tuple[HookEvent, ...] = ("PreToolUse", "PostToolUse")


@dataclass(frozen=True)
class HookCommand:
    """One configured hook command."""

    event: HookEvent
    matcher: str
    command: str
    timeout_s: float
    source: str
    cwd: Literal["neutral", "workspace"] = "neutral"
    """Where it runs: an empty temporary directory, or the host workspace."""
    trusted: bool = False
    """Run it even when its command runs files a subagent can write."""
    sandbox: bool = False
    """Run it in a hardened sandbox (the workspace mounted as for a subagent)."""
    env_names: tuple[str, ...] = ()
    """Host environment variables passed to it (`warden.hookEnv`)."""

    def matches(self, tool_name: str) -> bool:
        if self.matcher in ("", "*"):
            return True
        return re.fullmatch(self.matcher, tool_name) is not None


@dataclass(frozen=True)
class HookSet:
    """All hooks of a workspace; `warnings` lists configured hooks warden skips."""

    hooks: tuple[HookCommand, ...] = ()
    warnings: tuple[str, ...] = field(default_factory=tuple)

    def matching(self, event: HookEvent, tool_name: str) -> list[HookCommand]:
        seen: set[str] = set()
        out: list[HookCommand] = []
        for hook in self.hooks:
            if hook.event == event and hook.matches(tool_name) and hook.command not in seen:
                seen.add(hook.command)  # Claude Code runs identical commands once
                out.append(hook)
        return out


def load_hooks(settings: Settings, workspace: Path, *, trusted: bool = True) -> HookSet:
    """Hooks from every settings file (`settings_files`), highest first. Managed
    `allowManagedHooksOnly` or `strictPluginOnlyCustomization` keep only managed
    hooks, managed `disableAllHooks` none; an untrusted workspace's own hooks are
    skipped (and said so)."""
    stack = load_stack(settings, workspace, MAX_POLICY_BYTES)
    locked = stack.managed.hooks_only or "hooks" in stack.managed.plugin_only
    hooks: list[HookCommand] = []
    warnings: list[str] = []
    env_names: list[str] = []
    for f in stack.files:
        if stack.managed.disable_all_hooks:
            break
        found, warned = parse_hooks(f.doc.get("hooks"), f.source)
        if found and locked and not f.managed:
            warnings.append(f"{f.path}: its hooks are not run: managed settings allow only "
                            "managed hooks (allowManagedHooksOnly)")
            continue
        if found and not trusted and f.kind in ("project", "project-local"):
            warnings.append(f"{f.path}: its hooks are not run: the workspace is not trusted "
                            "(trust it with --trust-workspace)")
            continue
        hooks.extend(found)
        warnings.extend(warned)
        env_names += _hook_env(f.doc, f.path)
    names = tuple(dict.fromkeys(env_names))
    return HookSet(tuple(replace(h, env_names=names) for h in hooks), tuple(warnings))


def _hook_env(doc: JSONObject, path: Path) -> list[str]:
    block = doc.get("warden")
    value = block.get("hookEnv", []) if isinstance(block, dict) else []
    if not isinstance(value, list) or not all(
        isinstance(v, str) and v.isidentifier() for v in value
    ):
        raise PolicyError(f"{path}: warden.hookEnv must be a list of environment variable names")
    return [v for v in value if isinstance(v, str)]


def parse_hooks(block: object, source: str) -> tuple[list[HookCommand], list[str]]:
    """Parse a settings file's `hooks` block (events other than tool hooks are skipped)."""
    if block is None:
        return [], []
    if not isinstance(block, dict):
        raise PolicyError(f"{source}: `hooks` must be an object keyed by event name")
    hooks: list[HookCommand] = []
    warnings: list[str] = []
    for event, groups in block.items():
        if event not in EVENTS:
            warnings.append(f"{source}: {event} hooks are not run by warden")
            continue
        if not isinstance(groups, list):
            raise PolicyError(f"{source}: hooks.{event} must be a list of {{matcher, hooks}}")
        for i, group in enumerate(groups):
            where = f"{source}: hooks.{event}[{i}]"
            if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
                raise PolicyError(f'{where} must be {{"matcher": ..., "hooks": [...]}}')
            matcher = group.get("matcher") or ""
            if not isinstance(matcher, str):
                raise PolicyError(f"{where}.matcher must be a string (a regex on the tool name)")
            if matcher not in ("", "*"):
                try:
                    re.compile(matcher)
                except re.error as exc:
                    raise PolicyError(
                        f"{where}.matcher {matcher!r} is not a valid regex: {exc}"
                    ) from exc
            for j, spec in enumerate(group["hooks"]):
                hw = f"{where}.hooks[{j}]"
                if not isinstance(spec, dict):
                    raise PolicyError(f'{hw} must be {{"type": "command", "command": ...}}')
                if spec.get("type", "command") != "command":
                    warnings.append(
                        f"{hw}: hooks of type {spec.get('type')!r} are not run by warden"
                    )
                    continue
                command = spec.get("command")
                if not isinstance(command, str) or not command.strip():
                    raise PolicyError(f"{hw}.command must be a non-empty string")
                timeout = spec.get("timeout", DEFAULT_HOOK_TIMEOUT_S)
                if (
                    not isinstance(timeout, int | float)
                    or isinstance(timeout, bool)
                    or not 0 < timeout <= MAX_HOOK_TIMEOUT_S
                ):
                    raise PolicyError(
                        f"{hw}.timeout must be seconds in (0, {MAX_HOOK_TIMEOUT_S:g}]"
                    )
                hooks.append(
                    HookCommand(
                        event, matcher, command, float(timeout), source, **_options(spec, hw)
                    )
                )
    return hooks, warnings


class _Options(TypedDict):
    cwd: Literal["neutral", "workspace"]
    trusted: bool
    sandbox: bool


def _options(spec: JSONObject, where: str) -> _Options:
    """warden's own keys on a hook entry."""
    cwd = spec.get("cwd", "neutral")
    if cwd != "neutral" and cwd != "workspace":
        raise PolicyError(f'{where}.cwd must be "workspace" (or absent for an empty directory)')
    flags = {key: spec.get(key, False) for key in ("trusted", "sandbox")}
    for key, value in flags.items():
        if not isinstance(value, bool):
            raise PolicyError(f"{where}.{key} must be true or false")
    return _Options(
        cwd="workspace" if cwd == "workspace" else "neutral",
        trusted=flags["trusted"] is True,
        sandbox=flags["sandbox"] is True,
    )
