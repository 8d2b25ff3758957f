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


def _hook(command: str, prints: tuple[tuple[str, str], ...], cwd: str = "neutral") -> HookCommand:
    hook = HookCommand(
        event="PreToolUse",
        matcher="Bash",
        command=command,
        timeout_s=10,
        source="user settings",
        trusted=True,
        cwd="workspace" if cwd == "workspace" else "neutral",
    )
    return HookSet(hooks=(hook,), script_prints=prints).matching("PreToolUse", "Bash")[0]


@pytest.mark.parametrize(
    ("command", "cwd", "rel"),
    [
        ('sh "$CLAUDE_PROJECT_DIR/tools/later.sh"', "neutral", "tools/later.sh"),
        ("sh tools/later.sh", "workspace", "tools/later.sh"),
        ("python3 later.py", "workspace", "later.py"),
    ],
)
async def test_a_script_absent_at_the_start_that_appears_is_not_run(
    ws: Path, command: str, cwd: str, rel: str
) -> None:
    """Recorded as absent when the run read its inputs; a sandbox creates it mid-run:
    it never runs on the host, and the call is denied naming it and `warden trust`."""
    planted = ws / rel
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.write_text(f'import os; open("{ws.parent}/ran", "w")\n' if rel.endswith(".py") else
                       'echo planted > "$CLAUDE_PROJECT_DIR/../ran"\n')  # fmt: skip
    (ws.parent / "ran").unlink(missing_ok=True)

    [outcome] = await run_hooks(
        [_hook(command, ((rel, "absent"),), cwd)], {}, tool_name="Bash", workspace_host=ws
    )

    assert not (ws.parent / "ran").exists()
    assert outcome.decision == "deny"
    assert outcome.reason is not None and rel in outcome.reason
    assert "has appeared" in outcome.reason and "warden trust" in outcome.reason


async def test_a_script_still_absent_runs_as_absent(ws: Path) -> None:
    """The hook runs; its script is as missing as it was (`sh` says so; dash exits 2,
    which blocks, exactly as with the workspace path)."""
    [outcome] = await run_hooks(
        [_hook('sh "$CLAUDE_PROJECT_DIR/tools/later.sh"', (("tools/later.sh", "absent"),))],
        {},
        tool_name="Bash",
        workspace_host=ws,
    )
    said = f"{outcome.reason} {outcome.error}"
    assert outcome.exit_code is not None and outcome.exit_code != 0
    assert "tools/later.sh" in said and "No such file" in said


async def test_a_workspace_path_the_run_never_recorded_is_not_run(ws: Path) -> None:
    """A host hook that spells a workspace file the run's inputs do not cover (a
    hook from somewhere the snapshot did not look) is refused, not run unbound."""
    (ws / "other.sh").write_text('echo ran > "$CLAUDE_PROJECT_DIR/../ran"\n')
    (ws.parent / "ran").unlink(missing_ok=True)
    [outcome] = await run_hooks(
        [_hook('sh "$CLAUDE_PROJECT_DIR/other.sh"', ())], {}, tool_name="Bash", workspace_host=ws
    )
    assert not (ws.parent / "ran").exists()
    assert outcome.decision == "deny" and outcome.reason and "other.sh" in outcome.reason


async def test_the_bytes_that_run_are_the_bytes_that_were_hashed(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check→exec window: the workspace script is swapped after warden hashed it
    and before the shell starts (a seam around the host runner, deterministic). What
    runs is the private copy of the checked bytes, not the swapped file."""
    from orchestrator.permissions.hooks import run as run_module

    real = run_module._run_on_host
    swapped: list[str] = []

    async def swap_then_run(command: str, *args: object, **kwargs: object) -> object:
        (ws / SCRIPT).write_text('echo swapped > "$CLAUDE_PROJECT_DIR/../swapped"\n')
        swapped.append(command)
        return await real(command, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(run_module, "_run_on_host", swap_then_run)
    decision, _, ran = await _run(ws)

    assert swapped, "the seam ran"
    assert ran and decision is None, "the checked bytes ran"
    assert not (ws.parent / "swapped").exists(), "the swapped file never ran"
    assert "$CLAUDE_PROJECT_DIR" not in swapped[0]


async def test_a_private_copy_still_finds_the_files_beside_it(ws: Path) -> None:
    """`$0` is the private copy; the entries of its directory are links to the
    workspace's, so a script that sources `$(dirname "$0")/lib.sh` keeps working."""
    script = b'. "$(dirname "$0")/lib.sh"\necho "$0" > "$CLAUDE_PROJECT_DIR/../zero"\nexit 0\n'
    (ws / SCRIPT).write_bytes(script)
    (ws / ".claude" / "hooks" / "lib.sh").write_text('echo lib > "$CLAUDE_PROJECT_DIR/../lib"\n')
    [outcome] = await run_hooks(
        [_hook(f"sh $CLAUDE_PROJECT_DIR/{SCRIPT} --flag", ((SCRIPT, _digest(script)),))],
        {},
        tool_name="Bash",
        workspace_host=ws,
    )
    assert outcome.error is None and outcome.decision is None
    assert (ws.parent / "lib").read_text() == "lib\n"
    zero = (ws.parent / "zero").read_text().strip()
    assert zero.endswith("/.warden-scripts/" + SCRIPT) and not zero.startswith(str(ws))


async def test_a_script_named_twice_runs_from_its_copy(ws: Path) -> None:
    """`[ -f X ] && sh X`: both spellings name the private copy."""
    script = f"$CLAUDE_PROJECT_DIR/{SCRIPT}"
    [outcome] = await run_hooks(
        [_hook(f'[ -f "{script}" ] && sh "{script}" || true', ((SCRIPT, _digest(GOOD)),))],
        {},
        tool_name="Bash",
        workspace_host=ws,
    )
    assert outcome.decision is None and outcome.error is None
    assert (ws.parent / "ran").exists()


async def test_inline_code_of_a_hook_run_in_the_workspace_is_not_taken_for_a_script(
    ws: Path,
) -> None:
    """Issue 33's hook shape, `python3 -c "import json, sys; …"` with `"cwd":
    "workspace"`: its code is no workspace path, so it is neither recorded nor
    rewritten, and the hook runs."""
    from orchestrator.workspace.trusted_content import hook_scripts

    command = 'python3 -c "import json, sys; json.load(sys.stdin); print(1)"'
    doc = {"hooks": {"PreToolUse": [{"hooks": [{"command": command, "cwd": "workspace"}]}]}}
    prints = tuple((rel, "absent") for rel in hook_scripts(ws, {"s": doc}))
    assert prints == ()
    [outcome] = await run_hooks(
        [_hook(command, prints, "workspace")], {"a": 1}, tool_name="Bash", workspace_host=ws
    )
    assert outcome.error is None and outcome.decision is None and outcome.exit_code == 0
