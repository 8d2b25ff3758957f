"""Run a hook in a hardened sandbox instead of on the host (`"sandbox": true`):
the `permissions.hooks.HookSandbox` the run gives its permission engines.

The hook gets what a subagent's sandbox gets: no network, no capabilities, a
read-only root, resource limits, the workspace at `/workspace` with `.claude/`,
`.git` and the settings' `warden.protect` paths read-only (not `--protect`
ones: hooks do not see the command line), and nothing else from the host (no key, no home). Its
input JSON is mounted read-only and fed to its stdin; its stdout, stderr and
exit code are read back as for a host hook, and its timeout kills the
container. It goes through the same backend as `warden exec`, in the `agent`
image (Python, git, coreutils).
"""

from __future__ import annotations

import asyncio
import secrets
import tempfile
import time
from pathlib import Path

from orchestrator import labels
from orchestrator.backend.base import Mount, SandboxSpec, SandboxStatus
from orchestrator.errors import WardenError
from orchestrator.permissions.hooks import SandboxedHookRun

HOOK_IMAGE = "agent"
"""The image sandboxed hooks run in."""
HOOK_INPUT_DIR = "/run/warden-hook"
HOOK_SHELL = 'exec sh -c "$1" < ' + HOOK_INPUT_DIR + "/input.json"
"""Runs the hook's command (`$1`) with the event JSON on stdin."""


class ContainerHookSandbox:
    """Runs sandboxed hooks in containers of the `agent` image."""

    async def run(
        self,
        command: str,
        stdin: bytes,
        timeout_s: float,
        workspace: Path | None,
        output_limit: int,
    ) -> SandboxedHookRun:
        """Run `command` with `sh -c` in a fresh sandbox; never raises for a failing hook."""
        return await asyncio.to_thread(_run, command, stdin, timeout_s, workspace, output_limit)


def _run(
    command: str, stdin: bytes, timeout_s: float, workspace: Path | None, output_limit: int
) -> SandboxedHookRun:
    from orchestrator.backend.connect import connect
    from orchestrator.backend.docker import DockerBackend
    from orchestrator.config import Settings
    from orchestrator.images import resolve_image
    from orchestrator.workspace import WorkspaceGuard
    from orchestrator.workspace.settings import protected_paths

    started = time.monotonic()
    hook_id = secrets.token_hex(6)
    with tempfile.TemporaryDirectory(prefix="warden-hook-input-") as tmp:
        Path(tmp).chmod(0o755)
        (Path(tmp) / "input.json").write_bytes(stdin)
        (Path(tmp) / "input.json").chmod(0o644)
        try:
            client = connect()
        except WardenError as exc:
            return SandboxedHookRun(error=f"could not run the hook in a sandbox: {exc}")
        try:
            mounts = [Mount(source=Path(tmp), target=HOOK_INPUT_DIR, read_only=True)]
            if workspace is not None:
                settings = Settings.from_env()
                protect = protected_paths(settings, workspace)
                mounts += WorkspaceGuard.prepare(workspace, optional=protect).mounts()
            spec = SandboxSpec(
                image=resolve_image(client, HOOK_IMAGE),
                command=["sh", "-c", HOOK_SHELL, "warden-hook", command],
                workspace=workspace,
                mounts=mounts,
                env={"CLAUDE_PROJECT_DIR": "/workspace"},
                warden_labels=labels.warden_labels(f"hook-{hook_id}", exec=hook_id),
                timeout_s=timeout_s,
                output_limit_bytes=output_limit,
            )
            result = DockerBackend(client, Settings.from_env()).run(spec)
        except WardenError as exc:
            return SandboxedHookRun(
                error=f"could not run the hook in a sandbox: {exc}",
                duration_s=time.monotonic() - started,
            )
        finally:
            client.close()
    took = time.monotonic() - started
    if result.status is SandboxStatus.TIMED_OUT:
        return SandboxedHookRun(
            error=f"timed out after {timeout_s:g}s in its sandbox; killed (counts as an "
            "error, not an allow)",
            duration_s=took,
        )
    if result.status is SandboxStatus.OOM_KILLED:
        return SandboxedHookRun(error="ran out of memory in its sandbox", duration_s=took)
    return SandboxedHookRun(
        exit_code=result.exit_code,
        stdout=(result.stdout.encode(), result.truncated),
        stderr=(result.stderr.encode(), result.truncated),
        duration_s=took,
    )
