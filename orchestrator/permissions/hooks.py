"""PreToolUse / PostToolUse hooks, with Claude Code's protocol, run on the host.

Configured in a settings file as Claude Code does it:

    {"hooks": {"PreToolUse": [{"matcher": "Bash",
                               "hooks": [{"type": "command", "command": "...", "timeout": 60}]}]}}

Each matching command runs with `sh -c` in its own process group, with the
event as JSON on stdin, an environment built from an allowlist and a fixed PATH,
in an empty temporary directory (`CLAUDE_PROJECT_DIR` names the workspace); see
`hook_trust` for why, and for the commands refused because they would run
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
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from orchestrator.config import Settings
from orchestrator.errors import PolicyError
from orchestrator.permissions.hook_trust import hook_environment, workspace_code
from orchestrator.permissions.models import (
    REQUIRED_INPUT_KEYS,
    CallContext,
    HookOutcome,
    ToolCall,
)
from orchestrator.permissions.sources import read_document
from sandbox_tools.wire import MAX_TOOL_INPUT_BYTES

DEFAULT_HOOK_TIMEOUT_S = 60.0
"""Claude Code's default hook timeout."""
MAX_HOOK_TIMEOUT_S = 600.0
"""Longest timeout a hook may ask for."""
MAX_HOOK_OUTPUT_BYTES = 64 * 1024
"""Bytes of stdout and of stderr kept per hook; the rest is dropped and announced."""
NEUTRAL_CWD_PREFIX = "warden-hook-"
"""Host hooks run in a fresh empty directory with this prefix, unless they ask for the workspace."""
MAX_REASON_CHARS = 4000
"""Longest hook reason passed on to the model."""

HookEvent = Literal["PreToolUse", "PostToolUse"]
EVENTS: tuple[HookEvent, ...] = ("PreToolUse", "PostToolUse")
_LEGACY_DECISIONS = {"approve": "allow", "block": "deny"}


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


def load_hooks(settings: Settings, workspace: Path) -> HookSet:
    """Hooks from the managed policy, the workspace's settings and the user's settings."""
    files: list[tuple[Path, str]] = []
    if settings.managed_policy is not None and settings.managed_policy.is_file():
        files.append((settings.managed_policy, "managed"))
    files.append((workspace / ".claude" / "settings.local.json", "project-local"))
    files.append((workspace / ".claude" / "settings.json", "project"))
    files.append((settings.config_dir / "settings.json", "user"))
    hooks: list[HookCommand] = []
    warnings: list[str] = []
    env_names: list[str] = []
    for path, kind in files:
        if path.is_file():
            doc = read_document(path)
            if isinstance(doc, dict):
                found, warned = parse_hooks(doc.get("hooks"), f"{kind}:{path}")
                hooks.extend(found)
                warnings.extend(warned)
                env_names += _hook_env(doc, path)
    names = tuple(dict.fromkeys(env_names))
    return HookSet(tuple(replace(h, env_names=names) for h in hooks), tuple(warnings))


def _hook_env(doc: dict[str, Any], path: Path) -> list[str]:
    block = doc.get("warden")
    value = block.get("hookEnv", []) if isinstance(block, dict) else []
    if not isinstance(value, list) or not all(
        isinstance(v, str) and v.isidentifier() for v in value
    ):
        raise PolicyError(f"{path}: warden.hookEnv must be a list of environment variable names")
    return value


def parse_hooks(block: Any, source: str) -> tuple[list[HookCommand], list[str]]:
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


def _options(spec: dict[str, Any], where: str) -> dict[str, Any]:
    """warden's own keys on a hook entry."""
    cwd = spec.get("cwd", "neutral")
    if cwd not in ("neutral", "workspace"):
        raise PolicyError(f'{where}.cwd must be "workspace" (or absent for an empty directory)')
    options: dict[str, Any] = {"cwd": cwd}
    for key in ("trusted", "sandbox"):
        value = spec.get(key, False)
        if not isinstance(value, bool):
            raise PolicyError(f"{where}.{key} must be true or false")
        options[key] = value
    return options


def hook_input(
    event: HookEvent, call: ToolCall, ctx: CallContext, response: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The JSON a hook receives on stdin."""
    data: dict[str, Any] = {
        "session_id": ctx.session_id,
        "transcript_path": ctx.transcript_path,
        "cwd": ctx.cwd,
        "permission_mode": ctx.permission_mode,
        "hook_event_name": event,
        "tool_name": call.tool_name,
        "tool_input": call.tool_input,
        "tool_use_id": call.tool_use_id,
    }
    if ctx.agent_id is not None:
        data["agent_id"] = ctx.agent_id
    if ctx.agent_type is not None:
        data["agent_type"] = ctx.agent_type
    if response is not None:
        data["tool_response"] = response
    return data


async def run_hooks(
    hooks: Sequence[HookCommand],
    payload: dict[str, Any],
    *,
    tool_name: str,
    workspace_host: Path | None,
) -> list[HookOutcome]:
    """Run hooks concurrently; one outcome per hook, in configuration order."""
    stdin = json.dumps(payload).encode()
    return list(
        await asyncio.gather(*(run_hook(h, stdin, tool_name, workspace_host) for h in hooks))
    )


async def _read_bounded(stream: asyncio.StreamReader) -> tuple[bytes, bool]:
    kept = bytearray()
    dropped = False
    while chunk := await stream.read(65536):
        room = MAX_HOOK_OUTPUT_BYTES - len(kept)
        if len(chunk) > room:
            dropped = True
        kept += chunk[: max(room, 0)]
    return bytes(kept), dropped


async def run_hook(
    hook: HookCommand, stdin: bytes, tool_name: str, workspace_host: Path | None
) -> HookOutcome:
    """Run one hook and interpret what it said; never raises for a misbehaving hook."""
    base: dict[str, Any] = {"hook": hook.command, "event": hook.event, "source": hook.source}
    if hook.sandbox:
        from orchestrator.permissions.hook_sandbox import run_in_sandbox

        ran = await run_in_sandbox(
            hook.command, stdin, hook.timeout_s, workspace_host, MAX_HOOK_OUTPUT_BYTES
        )
        if ran.error is not None:
            return HookOutcome(**base, error=ran.error, duration_s=ran.duration_s)
        return _conclude(base, ran.exit_code, ran.stdout, ran.stderr, tool_name, ran.duration_s)
    with tempfile.TemporaryDirectory(prefix=NEUTRAL_CWD_PREFIX) as neutral:
        cwd = Path(neutral)
        if hook.cwd == "workspace" and workspace_host is not None:
            cwd = workspace_host
        env = hook_environment(workspace_host, hook.env_names)
        if workspace_host is not None and not hook.trusted:
            why = workspace_code(hook.command, workspace_host, cwd, env)
            if why is not None:
                return HookOutcome(
                    **base,
                    error=f'refused: {why}. Mark the hook "trusted": true if you vouch for '
                    'that file, or run it in a sandbox with "sandbox": true',
                )
        return await _run_on_host(hook, base, stdin, tool_name, str(cwd), env)


async def _run_on_host(
    hook: HookCommand,
    base: dict[str, Any],
    stdin: bytes,
    tool_name: str,
    cwd: str,
    env: dict[str, str],
) -> HookOutcome:
    started = time.monotonic()
    try:
        proc = await asyncio.create_subprocess_exec(
            "sh",
            "-c",
            hook.command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
    except OSError as exc:
        return HookOutcome(**base, error=f"could not start the hook: {exc}")
    assert proc.stdin and proc.stdout and proc.stderr

    async def talk() -> tuple[tuple[bytes, bool], tuple[bytes, bool]]:
        assert proc.stdin and proc.stdout and proc.stderr
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            proc.stdin.write(stdin)
            await proc.stdin.drain()
        with contextlib.suppress(OSError):
            proc.stdin.close()
        out, err = await asyncio.gather(_read_bounded(proc.stdout), _read_bounded(proc.stderr))
        await proc.wait()
        return out, err

    try:
        (out, out_cut), (err, err_cut) = await asyncio.wait_for(talk(), hook.timeout_s)
    except TimeoutError:
        _kill_group(proc.pid)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(proc.wait(), 5)
        return HookOutcome(
            **base,
            error=f"timed out after {hook.timeout_s:g}s; killed (counts as an error, not an allow)",
            duration_s=time.monotonic() - started,
        )
    finally:
        _kill_group(proc.pid)  # stragglers the hook left behind
    took = time.monotonic() - started
    return _conclude(base, proc.returncode, (out, out_cut), (err, err_cut), tool_name, took)


def _conclude(
    base: dict[str, Any],
    code: int | None,
    stdout: tuple[bytes, bool],
    stderr_bytes: tuple[bytes, bool],
    tool_name: str,
    took: float,
) -> HookOutcome:
    """An outcome from how a hook ended and what it printed."""
    out, out_cut = stdout
    stderr = _text(*stderr_bytes)
    if code == 2:
        reason = stderr.strip() or "blocked by a hook (exit 2, no message)"
        return HookOutcome(
            **base, exit_code=2, decision="deny", reason=reason[:MAX_REASON_CHARS], duration_s=took
        )
    if code != 0:
        return HookOutcome(
            **base,
            exit_code=code,
            duration_s=took,
            error=f"exited with {code}: {stderr.strip()[:MAX_REASON_CHARS]}".rstrip(": "),
        )
    if out_cut:
        return HookOutcome(
            **base,
            exit_code=0,
            duration_s=took,
            error=f"stdout longer than {MAX_HOOK_OUTPUT_BYTES} bytes; output ignored",
        )
    return _interpret(base, out, tool_name, took)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _text(data: bytes, cut: bool) -> str:
    text = data.decode("utf-8", errors="replace")
    return text + (f"\n[output truncated at {MAX_HOOK_OUTPUT_BYTES} bytes]" if cut else "")


def _interpret(base: dict[str, Any], out: bytes, tool_name: str, took: float) -> HookOutcome:
    text = out.decode("utf-8", errors="replace").strip()
    if not text.startswith("{"):
        return HookOutcome(**base, exit_code=0, duration_s=took)  # plain output: no opinion
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        return HookOutcome(
            **base, exit_code=0, duration_s=took, error=f"malformed JSON output: {exc}"
        )
    if not isinstance(doc, dict):
        return HookOutcome(
            **base, exit_code=0, duration_s=took, error="JSON output is not an object"
        )
    specific = doc.get("hookSpecificOutput") or {}
    if not isinstance(specific, dict):
        return HookOutcome(
            **base, exit_code=0, duration_s=took, error="hookSpecificOutput is not an object"
        )
    decision = specific.get("permissionDecision")
    reason = specific.get("permissionDecisionReason", "")
    if decision is None and doc.get("decision") in _LEGACY_DECISIONS:
        decision = _LEGACY_DECISIONS[doc["decision"]]
        reason = doc.get("reason", "")
    if base["event"] == "PostToolUse" and doc.get("decision") == "block":
        decision, reason = "deny", doc.get("reason", "")
    if decision is not None and decision not in ("allow", "deny", "ask"):
        return HookOutcome(
            **base,
            exit_code=0,
            duration_s=took,
            error=f"permissionDecision {decision!r} is not allow, deny or ask",
        )
    if not isinstance(reason, str):
        reason = json.dumps(reason)
    updated = specific.get("updatedInput")
    if updated is not None:
        problem = validate_updated_input(tool_name, updated)
        if problem:
            return HookOutcome(
                **base, exit_code=0, duration_s=took, error=f"updatedInput rejected: {problem}"
            )
    return HookOutcome(
        **base,
        exit_code=0,
        duration_s=took,
        decision=decision,
        reason=reason[:MAX_REASON_CHARS],
        updated_input=updated,
    )


def validate_updated_input(tool_name: str, updated: Any) -> str | None:
    """Why a hook's replacement input is unusable, or None when it is fine."""
    if not isinstance(updated, dict):
        return "it must be a JSON object"
    size = len(json.dumps(updated))
    if size > MAX_TOOL_INPUT_BYTES:
        return f"it is {size} bytes, more than {MAX_TOOL_INPUT_BYTES}"
    missing = [k for k in REQUIRED_INPUT_KEYS.get(tool_name, ()) if k not in updated]
    if missing:
        return f"{tool_name} input needs {', '.join(missing)}"
    if tool_name == "Bash" and not isinstance(updated.get("command"), str):
        return "Bash 'command' must be a string"
    for key in ("file_path", "pattern", "content", "old_string", "new_string"):
        if key in updated and not isinstance(updated[key], str):
            return f"'{key}' must be a string"
    return None
