"""What running a hook in a sandbox (every hook not trusted) needs from the run.

The permission layer does not build containers: the run hands its engine a
`HookSandbox` (`runtime.hook_sandbox.HookSandboxPool`), and `run.run_hook`
calls it for each hook that is not trusted or asks for a sandbox. Without one,
such a hook does not run: its outcome is an error (never an allow) naming both
ways out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

NO_SANDBOX_ERROR = (
    "refused: this hook could read or run files a subagent can write, so it runs only in "
    "a sandbox, and this permission engine was given none (hook sandboxes exist inside "
    "`warden run`). Run it there, or, if you vouch for everything it runs, list its command "
    'under warden.trustedHooks in your user settings (or mark it "trusted": true there) to '
    "run it on the host; counts as an error, not an allow"
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
        self, command: str, stdin: bytes, timeout_s: float, *, cwd: str, output_limit: int
    ) -> SandboxedHookRun:
        """Run `command` with `sh -c`, `stdin` on its stdin and `cwd` (a path inside the
        sandbox) as its directory; never raises for a failing hook."""
        ...
