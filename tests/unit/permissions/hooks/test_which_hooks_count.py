"""Locks in which configured hooks take part in a decision, as the differential test
measured Claude Code: `disableAllHooks: true` in the user's or a trusted workspace's
settings switches off every hook but the managed ones (the highest file that sets
the key decides), and a hook of an untrusted workspace still denies or asks but its
allow counts for nothing."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import Settings
from orchestrator.errors import PolicyError
from orchestrator.permissions import (
    CallContext,
    PermissionEngine,
    ToolCall,
    load_hooks,
    load_policy,
)

BLOCK = "cat >/dev/null; echo 'blocked by the hook' >&2; exit 2"
ALLOW = (
    "cat >/dev/null; echo '"
    + json.dumps(
        {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"}}
    )
    + "'"
)


def hooks(command: str) -> dict[str, Any]:
    entry = {"matcher": "Bash", "hooks": [{"type": "command", "command": command}]}
    return {"hooks": {"PreToolUse": [entry]}}


def write(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def layout(
    settings: Settings,
    workspace: Path,
    *,
    managed: dict[str, Any] | None = None,
    user: dict[str, Any] | None = None,
    project: dict[str, Any] | None = None,
    local: dict[str, Any] | None = None,
) -> Settings:
    """Settings files where warden finds them; every hook command here is trusted by
    warden's own user settings, so the hooks run on the host."""
    managed_path = settings.config_dir.parent / "managed-settings.json"
    settings = replace(settings, claude_managed_settings=managed_path)
    for path, doc in (
        (managed_path, managed),
        (settings.claude_dir / "settings.json", user),
        (workspace / ".claude/settings.json", project),
        (workspace / ".claude/settings.local.json", local),
    ):
        if doc is not None:
            write(path, doc)
    write(settings.config_dir / "settings.json", {"warden": {"trustedHooks": [BLOCK, ALLOW]}})
    return settings


async def decide(
    settings: Settings,
    workspace: Path,
    command: str,
    *,
    trusted: bool = True,
    mode: str | None = None,
) -> str:
    policy = load_policy(settings, workspace, trusted=trusted, mode=mode)
    engine = PermissionEngine(
        policy, load_hooks(settings, workspace, trusted=trusted), workspace_host=workspace
    )
    call = ToolCall(tool_name="Bash", tool_input={"command": command}, tool_use_id="t1")
    decision = await engine.evaluate(call, CallContext(permission_mode=policy.mode))
    return decision.behavior


async def test_disable_all_hooks_in_the_user_settings_switches_off_their_allow(
    settings: Settings, workspace: Path
) -> None:
    s = layout(settings, workspace, user={"disableAllHooks": True, **hooks(ALLOW)})
    assert await decide(s, workspace, "touch x") == "ask"  # as without the hook
    assert any("disableAllHooks" in w for w in load_hooks(s, workspace).warnings)


async def test_disable_all_hooks_below_managed_keeps_the_managed_hooks(
    settings: Settings, workspace: Path
) -> None:
    s = layout(settings, workspace, managed=hooks(BLOCK), user={"disableAllHooks": True})
    assert await decide(s, workspace, "echo hi") == "deny"


async def test_the_highest_file_that_sets_disable_all_hooks_decides(
    settings: Settings, workspace: Path
) -> None:
    s = layout(settings, workspace, user=hooks(ALLOW), project={"disableAllHooks": True})
    assert await decide(s, workspace, "touch x") == "ask"
    s = layout(
        settings,
        workspace,
        user={"disableAllHooks": True, **hooks(BLOCK)},
        local={"disableAllHooks": False},
    )
    assert await decide(s, workspace, "echo hi") == "deny"


async def test_an_untrusted_workspace_cannot_switch_off_the_users_hooks(
    settings: Settings, workspace: Path
) -> None:
    s = layout(settings, workspace, user=hooks(BLOCK), project={"disableAllHooks": True})
    assert await decide(s, workspace, "echo hi", trusted=False) == "deny"


def test_disable_all_hooks_of_the_wrong_type_is_refused(
    settings: Settings, workspace: Path
) -> None:
    s = layout(settings, workspace, user={"disableAllHooks": "yes", **hooks(BLOCK)})
    with pytest.raises(PolicyError, match="disableAllHooks is 'yes', not true or false"):
        load_hooks(s, workspace)


@pytest.mark.parametrize("level", ["project", "local"])
async def test_an_untrusted_workspaces_hook_still_blocks(
    settings: Settings, workspace: Path, level: str
) -> None:
    s = layout(settings, workspace, **{level: hooks(BLOCK)})
    assert await decide(s, workspace, "echo hi", trusted=False, mode="bypassPermissions") == "deny"


async def test_an_untrusted_workspaces_hook_cannot_allow(
    settings: Settings, workspace: Path
) -> None:
    s = layout(settings, workspace, project=hooks(ALLOW))
    assert await decide(s, workspace, "touch x", trusted=False) == "ask"
    assert await decide(s, workspace, "touch x", trusted=True) == "allow"
    loaded = load_hooks(s, workspace, trusted=False)
    assert any("never allow" in w for w in loaded.warnings)


async def test_the_same_command_in_the_users_settings_keeps_its_allow(
    settings: Settings, workspace: Path
) -> None:
    s = layout(settings, workspace, project=hooks(ALLOW), user=hooks(ALLOW))
    assert await decide(s, workspace, "touch x", trusted=False) == "allow"
