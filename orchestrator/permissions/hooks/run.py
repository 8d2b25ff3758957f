"""Running hooks and reading what they said (Claude Code's hook protocol).

A hook gets the event as JSON on stdin (`hook_input`) and runs with `sh -c`: in a
sandbox (the run's `sandbox.HookSandbox`, the default), or, when the person marked
it trusted in a file no subagent can write (`definitions`), on the host in its own
process group (an allowlisted environment, a fixed PATH, an empty directory; see
`trust`). A host hook whose command names a workspace script that is no longer
the content the run's trust covered (`scripts`; a script that was absent and has
appeared included) is not run: its outcome is a deny naming the script and
`warden trust` (fail closed); one that is runs a private copy of the bytes checked
(`scripts.stage`), so `sh` never reopens the workspace file. An untrusted hook with no
sandbox to run in does not run: its outcome is an error naming both ways out. Exit 2 blocks with stderr as the reason; exit 0 may print JSON with
`hookSpecificOutput.permissionDecision`; anything else, a timeout (the whole group
is killed) or malformed JSON is a non-blocking error that never counts as allow.
Output is read up to MAX_HOOK_OUTPUT_BYTES per stream and the cut is announced.
Which hooks exist is `definitions`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TypedDict, get_args

from orchestrator.behavior import Behavior
from orchestrator.jsontypes import JSONObject
from orchestrator.permissions.hooks.definitions import HookCommand, HookEvent
from orchestrator.permissions.hooks.sandbox import NO_SANDBOX_ERROR, HookSandbox
from orchestrator.permissions.hooks.scripts import ScriptRefused, stage
from orchestrator.permissions.hooks.trust import hook_environment
from orchestrator.permissions.models import (
    REQUIRED_INPUT_KEYS,
    CallContext,
    HookOutcome,
    ToolCall,
)
from sandbox_tools.wire import MAX_TOOL_INPUT_BYTES, WORKSPACE

log = logging.getLogger(__name__)

MAX_HOOK_OUTPUT_BYTES = 64 * 1024
"""Bytes of stdout and of stderr kept per hook; the rest is dropped and announced."""
SANDBOX_CWD = {"neutral": "/tmp", "workspace": WORKSPACE}
"""A sandboxed hook's working directory: its own empty /tmp, or the workspace."""
NEUTRAL_CWD_PREFIX = "warden-hook-"
"""Host hooks run in a fresh empty directory with this prefix, unless they ask for the workspace."""
MAX_REASON_CHARS = 4000
"""Longest hook reason passed on to the model."""

UNTRUSTED_ALLOW = (
    "its allow (or updatedInput) is ignored: the workspace that configured this hook is not "
    "trusted (trust it with --trust-workspace)"
)

_LEGACY_DECISIONS = {"approve": "allow", "block": "deny"}


class _HookId(TypedDict):
    """Which hook an outcome is about (the first fields of every HookOutcome)."""

    hook: str
    event: HookEvent
    source: str


def hook_input(
    event: HookEvent, call: ToolCall, ctx: CallContext, response: JSONObject | None = None
) -> JSONObject:
    """The JSON a hook receives on stdin."""
    data: JSONObject = {
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
    payload: JSONObject,
    *,
    tool_name: str,
    workspace_host: Path | None,
    sandbox: HookSandbox | None = None,
) -> list[HookOutcome]:
    """Run hooks concurrently; one outcome per hook, in configuration order. `sandbox`
    runs the hooks that ask for one (without it they are error outcomes)."""
    stdin = json.dumps(payload).encode()
    return list(
        await asyncio.gather(
            *(run_hook(h, stdin, tool_name, workspace_host, sandbox) for h in hooks)
        )
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
    hook: HookCommand,
    stdin: bytes,
    tool_name: str,
    workspace_host: Path | None,
    sandbox: HookSandbox | None = None,
) -> HookOutcome:
    """Run one hook and interpret what it said; never raises for a misbehaving hook."""
    outcome = await _run_hook(hook, stdin, tool_name, workspace_host, sandbox)
    return _restricted(outcome) if hook.restrict_only else outcome


def _restricted(outcome: HookOutcome) -> HookOutcome:
    """A hook of an untrusted workspace: its allow and new input are dropped, said so."""
    if outcome.decision != "allow" and outcome.updated_input is None:
        return outcome
    return outcome.model_copy(
        update={
            "decision": None if outcome.decision == "allow" else outcome.decision,
            "updated_input": None,
            "error": UNTRUSTED_ALLOW,
        }
    )


async def _run_hook(
    hook: HookCommand,
    stdin: bytes,
    tool_name: str,
    workspace_host: Path | None,
    sandbox: HookSandbox | None,
) -> HookOutcome:
    base = _HookId(hook=hook.command, event=hook.event, source=hook.source)
    if hook.sandbox or not hook.trusted:
        if sandbox is None:
            return HookOutcome(**base, error=NO_SANDBOX_ERROR)
        ran = await sandbox.run(
            hook.command,
            stdin,
            hook.timeout_s,
            cwd=SANDBOX_CWD[hook.cwd],
            output_limit=MAX_HOOK_OUTPUT_BYTES,
        )
        if ran.error is not None:
            return HookOutcome(**base, error=ran.error, duration_s=ran.duration_s)
        return _conclude(base, ran.exit_code, ran.stdout, ran.stderr, tool_name, ran.duration_s)
    with tempfile.TemporaryDirectory(prefix=NEUTRAL_CWD_PREFIX) as neutral:
        command = hook.command
        if hook.script_prints is not None and workspace_host is not None:
            try:
                command = stage(
                    hook.command,
                    str(workspace_host),
                    dict(hook.script_prints),
                    neutral,
                    cwd_workspace=hook.cwd == "workspace",
                )
            except ScriptRefused as refused:
                log.warning("hook %r: %s", hook.command, refused)
                return HookOutcome(**base, decision="deny", reason=str(refused))
        cwd = Path(neutral)
        if hook.cwd == "workspace" and workspace_host is not None:
            cwd = workspace_host
        env = hook_environment(workspace_host, hook.env_names, home=Path(neutral))
        return await _run_on_host(command, hook, base, stdin, tool_name, str(cwd), env)


async def _run_on_host(
    command: str,
    hook: HookCommand,
    base: _HookId,
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
            command,
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
    base: _HookId,
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


def _interpret(base: _HookId, out: bytes, tool_name: str, took: float) -> HookOutcome:
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
    if decision is not None and decision not in get_args(Behavior):
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


def validate_updated_input(tool_name: str, updated: object) -> str | None:
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
