"""A host hook runs only while the workspace scripts its command names are the
content the run's trust covered: a rewritten, replaced-by-a-link or removed script
is not run on the host, and the hook's outcome is a deny naming the script and
`warden trust` (fail closed)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from orchestrator.permissions import HookSet
from orchestrator.permissions.hooks.definitions import HookCommand
from orchestrator.permissions.hooks.run import run_hooks

SCRIPT = ".claude/hooks/check.sh"
GOOD = b'echo ran >> "$CLAUDE_PROJECT_DIR/../ran"\nexit 0\n'


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / ".claude" / "hooks").mkdir(parents=True)
    (root / SCRIPT).write_bytes(GOOD)
    return root


def _host_hook(ws: Path) -> list[HookCommand]:
    hook = HookCommand(
        event="PreToolUse",
        matcher="Bash",
        command=f'sh "$CLAUDE_PROJECT_DIR/{SCRIPT}"',
        timeout_s=10,
        source="user settings",
        trusted=True,
    )
    hooks = HookSet(hooks=(hook,), script_prints=((SCRIPT, _digest(GOOD)),))
    return hooks.matching("PreToolUse", "Bash")


async def _run(ws: Path) -> tuple[str | None, str | None, bool]:
    ran = ws.parent / "ran"
    ran.unlink(missing_ok=True)
    [outcome] = await run_hooks(_host_hook(ws), {}, tool_name="Bash", workspace_host=ws)
    return outcome.decision, outcome.reason, ran.exists()


async def test_the_trusted_script_runs_on_the_host(ws: Path) -> None:
    decision, _, ran = await _run(ws)
    assert ran and decision is None


@pytest.mark.parametrize("change", ["rewritten", "link", "removed", "parent link"])
async def test_a_changed_script_is_not_run_and_the_call_is_denied(ws: Path, change: str) -> None:
    script = ws / SCRIPT
    if change == "rewritten":
        script.write_bytes(GOOD + b"# rewritten\n")
    elif change == "link":
        (ws.parent / "same.sh").write_bytes(GOOD)  # even the same bytes, through a link
        script.unlink()
        os.symlink(ws.parent / "same.sh", script)
    elif change == "removed":
        script.unlink()
    else:  # .claude/hooks replaced by a link to a directory with the same script
        (ws.parent / "elsewhere").mkdir()
        (ws.parent / "elsewhere" / "check.sh").write_bytes(GOOD)
        script.unlink()
        script.parent.rmdir()
        os.symlink(ws.parent / "elsewhere", script.parent)

    decision, reason, ran = await _run(ws)

    assert not ran
    assert decision == "deny"
    assert reason is not None and SCRIPT in reason and "warden trust" in reason
