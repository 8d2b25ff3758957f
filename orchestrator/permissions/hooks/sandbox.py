"""What running a hook in a sandbox (`"sandbox": true`) needs from the run.

The permission layer does not build containers: the run hands its engine a
`HookSandbox` (`runtime.hook_sandbox.ContainerHookSandbox`), and `run.run_hook`
calls it for each sandboxed hook. Without one, a sandboxed hook is an error
outcome (never an allow).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

NO_SANDBOX_ERROR = (
    "this hook asks for a sandbox, and this permission engine was given none "
    "(sandboxed hooks run only inside `warden run`); counts as an error, not an allow"
)


@dataclass(frozen=True)
class SandboxedHookRun:
    """How a sandboxed hook ended: its exit code and bounded output, or why it could not run."""

    exit_code: int | None = None
    stdout: tuple[bytes, bool] = (b"", False)
    stderr: tuple[bytes, bool] = (b"", False)
    duration_s: float = 0.0
    error: str | None = None


class HookSandbox(Protocol):
    """Runs one hook command in a fresh hardened sandbox."""

    async def run(
        self,
        command: str,
        stdin: bytes,
        timeout_s: float,
        workspace: Path | None,
        output_limit: int,
    ) -> SandboxedHookRun:
        """Run `command` with `sh -c` and `stdin` on its stdin; never raises for a failing hook."""
        ...
