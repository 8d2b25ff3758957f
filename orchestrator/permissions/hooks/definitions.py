"""PreToolUse / PostToolUse hooks, with Claude Code's protocol.

Configured in a settings file as Claude Code does it:

    {"hooks": {"PreToolUse": [{"matcher": "Bash",
                               "hooks": [{"type": "command", "command": "...", "timeout": 60}]}]}}

**Where a hook runs.** A hook's command may read or run anything a subagent can
write (`make -C "$CLAUDE_PROJECT_DIR"`, `python3 FILE`, `sh < FILE`, a tool that
loads its configuration from the project...), and no reading of a shell command
can list everything a tool will load. So every hook runs in a hardened sandbox
(the run's `sandbox.HookSandbox`) unless the person marked it trusted in a file
no subagent can write: a managed settings file or the user's own settings
(`~/.claude/settings.json`, warden's `settings.json`), and only while that file
lies outside the workspace. There a hook entry may say `"trusted": true`, and
`{"warden": {"trustedHooks": ["COMMAND", ...]}}` trusts hooks of any source
(project settings, agent files) by their exact command. A trusted hook runs on
the host, in its own process group, with an allowlisted environment and a fixed
PATH, in an empty temporary directory (see `trust`). `"trusted": true` or
`trustedHooks` in a project's settings is ignored with a warning: a subagent of
a run on a parent directory could have written that file.

warden's own keys on a hook entry:

    {"type": "command", "command": "...",
     "cwd": "workspace",   # run in the workspace instead of an empty directory
     "trusted": true,      # run it on the host (honoured in managed and user settings)
     "sandbox": true}      # run it in a sandbox even when trusted

and in a settings file, `{"warden": {"hookEnv": ["MY_TOKEN"]}}` passes those
host variables to every host hook (never to a sandboxed one).
Exit 2 blocks (stderr is the reason the model sees); exit 0 may print JSON with
`hookSpecificOutput.permissionDecision`; any other exit, a timeout (the whole
process group, or the sandbox, is killed), or malformed JSON is a non-blocking
error that is reported in the outcome and never counts as an allow.

Running a hook and reading what it said is `run`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, TypedDict

from orchestrator.config import Settings
from orchestrator.errors import PolicyError
from orchestrator.jsontypes import JSONObject
from orchestrator.permissions.hooks.trust import steers
from orchestrator.permissions.settings_files import SettingsFile, SettingsStack, load_stack
from orchestrator.permissions.sources import MAX_POLICY_BYTES

DEFAULT_HOOK_TIMEOUT_S = 60.0
"""Claude Code's default hook timeout."""
MAX_HOOK_TIMEOUT_S = 600.0
"""Longest timeout a hook may ask for."""

TRUSTING_KINDS = ("managed", "user", "warden-user")
"""Settings files whose trust marks count (while they lie outside the workspace)."""
IGNORED_TRUST = (
    "is ignored: a subagent could have written this file, so its hooks run in a sandbox. "
    "To run one on the host, list its command under warden.trustedHooks in your user "
    "settings (~/.claude/settings.json or warden's settings.json) or a managed settings file"
)

PROJECT_KINDS = ("project", "project-local")
"""Settings files that belong to the workspace (and count only once it is trusted)."""
DISABLE_ALL_HOOKS = "disableAllHooks"

HookEvent = Literal["PreToolUse", "PostToolUse", "PreApply"]
EVENTS: tuple[HookEvent, ...] = ("PreToolUse", "PostToolUse", "PreApply")
"""`PreApply` is warden's own event (a change set of an isolated subagent, before anyone
is asked: `orchestrator.apply.hook`), in the same protocol shape."""


CLAUDE_CODE_NAMES: dict[str, tuple[str, ...]] = {"Task": ("Agent",)}
"""warden's tools the pinned Claude Code (2.1.197) names otherwise: its delegation tool is
`Agent`, so a hook whose matcher is `Agent` (as a Claude Code setup writes it) runs for
warden's `Task` too. The hook's input still names the tool as warden does."""


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
    """Marked trusted in a file no subagent can write: it runs on the host."""
    sandbox: bool = False
    """Run it in a hardened sandbox even when it is trusted."""
    env_names: tuple[str, ...] = ()
    """Host environment variables passed to it (`warden.hookEnv`)."""
    restrict_only: bool = False
    """Configured by a workspace the person has not trusted: its deny and ask count,
    its allow and `updatedInput` do not (as with the workspace's rules)."""
    script_prints: tuple[tuple[str, str], ...] | None = None
    """(workspace-relative path, digest) of the workspace scripts as the run's trust
    saw them: on the host it runs only while the ones it names match (`scripts`).
    None: outside a run, nothing to compare with."""

    def matches(self, tool_name: str) -> bool:
        """Whether the matcher (a regular expression over the whole name) names the
        tool, by warden's name or the pinned Claude Code's (`CLAUDE_CODE_NAMES`)."""
        if self.matcher in ("", "*"):
            return True
        names = (tool_name, *CLAUDE_CODE_NAMES.get(tool_name, ()))
        return any(re.fullmatch(self.matcher, name) is not None for name in names)


@dataclass(frozen=True)
class HookSet:
    """All hooks of a workspace; `warnings` lists configured hooks warden skips."""

    hooks: tuple[HookCommand, ...] = ()
    warnings: tuple[str, ...] = field(default_factory=tuple)
    trusted_commands: frozenset[str] = frozenset()
    """Commands the managed or the user's settings trust (`warden.trustedHooks`)."""
    script_prints: tuple[tuple[str, str], ...] | None = None
    """The run's hook scripts as trust saw them (`HookCommand.script_prints`)."""

    def matching(self, event: HookEvent, tool_name: str) -> list[HookCommand]:
        """The hooks to run, once per command, each marked trusted when it is."""
        found: dict[str, HookCommand] = {}
        for hook in self.hooks:
            if hook.event != event or not hook.matches(tool_name):
                continue
            trusted = hook.trusted or hook.command in self.trusted_commands
            first = found.get(hook.command)  # Claude Code runs identical commands once
            if first is None:
                found[hook.command] = replace(
                    hook, trusted=trusted, script_prints=self.script_prints
                )
            elif first.restrict_only and not hook.restrict_only:
                found[hook.command] = replace(first, restrict_only=False)
        return list(found.values())

    def needs_sandbox(self) -> bool:
        """True when some hook here runs in a sandbox (not trusted, or asks for one)."""
        return any(
            h.sandbox or not (h.trusted or h.command in self.trusted_commands) for h in self.hooks
        )

    def with_hooks(self, extra: tuple[HookCommand, ...]) -> HookSet:
        """These hooks and `extra` (an agent file's), under the same trust."""
        return replace(self, hooks=self.hooks + extra)


def load_hooks(
    settings: Settings,
    workspace: Path,
    *,
    trusted: bool = True,
    stack: SettingsStack | None = None,
) -> HookSet:
    """Hooks from every settings file (`settings_files`), highest first. Managed
    `allowManagedHooksOnly` or `strictPluginOnlyCustomization` keep only managed
    hooks, managed `disableAllHooks` none; `disableAllHooks: true` in the user's or
    (trusted) workspace's settings switches off every hook but the managed ones, as
    in Claude Code, when it is the highest such file that sets the key. An untrusted
    workspace's own hooks may only restrict: their deny and ask count, their allow
    and `updatedInput` do not (and the run says so)."""
    stack = load_stack(settings, workspace, MAX_POLICY_BYTES) if stack is None else stack
    locked = stack.managed.hooks_only or "hooks" in stack.managed.plugin_only
    switched_off = _disabled_by(stack.files, trusted)
    hooks: list[HookCommand] = []
    warnings: list[str] = []
    env_names: list[str] = []
    trusted_commands: set[str] = set()
    for f in stack.files:
        if stack.managed.disable_all_hooks:
            break
        may_trust = f.kind in TRUSTING_KINDS and not _inside(f.path, workspace)
        commands = _trusted_hooks(f.doc, f.path)
        if commands and not may_trust:
            warnings.append(f"{f.source}: warden.trustedHooks {IGNORED_TRUST}")
        elif may_trust:
            trusted_commands.update(commands)
        found, warned = parse_hooks(f.doc.get("hooks"), f.source, may_trust=may_trust)
        if found and locked and not f.managed:
            warnings.append(
                f"{f.path}: its hooks are not run: managed settings allow only "
                "managed hooks (allowManagedHooksOnly)"
            )
            continue
        if found and switched_off is not None and not f.managed:
            warnings.append(f"{f.path}: its hooks are not run: disableAllHooks in {switched_off}")
            continue
        if found and not trusted and f.kind in PROJECT_KINDS:
            warnings.append(
                f"{f.path}: the workspace is not trusted, so its hooks may deny or ask but "
                "never allow a call or change its input (trust it with --trust-workspace)"
            )
            found = [replace(h, restrict_only=True) for h in found]
        hooks.extend(found)
        warnings.extend(warned)
        env_names += _hook_env(f.doc, f.path)
    names = tuple(dict.fromkeys(env_names))
    steering = [n for n in names if steers(n)]
    if steering:
        warnings.append(
            f"warden.hookEnv: {', '.join(steering)} not passed to hooks: they point an "
            "interpreter, a shell or the loader at other code (see permissions.hooks.trust)"
        )
    return HookSet(
        tuple(replace(h, env_names=names) for h in hooks),
        tuple(warnings),
        frozenset(trusted_commands),
    )


def _disabled_by(files: tuple[SettingsFile, ...], trusted: bool) -> str | None:
    """The non-managed file whose `disableAllHooks: true` switches off the hooks of
    every non-managed file: the highest one that sets the key (Claude Code merges
    settings so; `false` higher up turns them back on). An untrusted workspace's
    files have no say."""
    for f in files:
        if f.managed or (not trusted and f.kind in PROJECT_KINDS):
            continue
        value = f.doc.get(DISABLE_ALL_HOOKS)
        if value is None:
            continue
        if not isinstance(value, bool):
            raise PolicyError(
                f"{f.path}{f.line_of(DISABLE_ALL_HOOKS)}: {DISABLE_ALL_HOOKS} is {value!r}, "
                f'not true or false; write "{DISABLE_ALL_HOOKS}": true (or remove it)'
            )
        return f.source if value else None
    return None


def _inside(path: Path, workspace: Path) -> bool:
    real, root = Path(os.path.realpath(path)), Path(os.path.realpath(workspace))
    return real == root or root in real.parents


def _trusted_hooks(doc: JSONObject, path: Path) -> list[str]:
    block = doc.get("warden")
    value = block.get("trustedHooks", []) if isinstance(block, dict) else []
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise PolicyError(
            f"{path}: warden.trustedHooks must be a list of hook commands, each exactly as "
            "it appears in a hook entry"
        )
    return [v for v in value if isinstance(v, str)]


def _hook_env(doc: JSONObject, path: Path) -> list[str]:
    block = doc.get("warden")
    value = block.get("hookEnv", []) if isinstance(block, dict) else []
    if not isinstance(value, list) or not all(
        isinstance(v, str) and v.isidentifier() for v in value
    ):
        raise PolicyError(f"{path}: warden.hookEnv must be a list of environment variable names")
    return [v for v in value if isinstance(v, str)]


def parse_hooks(
    block: object, source: str, *, may_trust: bool = False
) -> tuple[list[HookCommand], list[str]]:
    """Parse a settings file's `hooks` block (events other than tool hooks are skipped).
    `may_trust`: the file is one no subagent can write, so `"trusted": true` counts."""
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
                options = _options(spec, hw)
                if options["trusted"] and not may_trust:
                    warnings.append(f'{hw}: "trusted": true {IGNORED_TRUST}')
                    options["trusted"] = False
                hooks.append(
                    HookCommand(event, matcher, command, float(timeout), source, **options)
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
