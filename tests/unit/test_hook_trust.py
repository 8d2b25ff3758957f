"""A host hook sees an allowlisted environment with a fixed PATH, runs in an empty
directory unless it asks for the workspace, and is refused when its command
would run a file a subagent can write (unless the settings mark it trusted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.config import Settings
from orchestrator.errors import PolicyError
from orchestrator.permissions import CallContext, ToolCall, load_hooks
from orchestrator.permissions.hooks.definitions import parse_hooks
from orchestrator.permissions.hooks.run import hook_input, run_hooks
from orchestrator.permissions.hooks.trust import HOOK_PATH, hook_environment, workspace_code


def refused(command: str, ws: Path, cwd: Path) -> str | None:
    return workspace_code(command, ws, cwd)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "node_modules" / ".bin").mkdir(parents=True)
    (root / "node_modules" / ".bin" / "prettier").write_text("#!/bin/sh\n")
    (root / "bin").mkdir()
    (root / "bin" / "lint").write_text("#!/bin/sh\n")
    (root / ".claude" / "hooks").mkdir(parents=True)
    (root / ".claude" / "hooks" / "check.sh").write_text("#!/bin/sh\n")
    return root


@pytest.mark.parametrize(
    ("command", "in_workspace"),
    [
        ("./bin/lint", True),
        ("bin/lint --fix", True),
        ("$CLAUDE_PROJECT_DIR/bin/lint", False),
        ('"${CLAUDE_PROJECT_DIR}"/bin/lint', False),
        ("bash -c 'exec $CLAUDE_PROJECT_DIR/bin/lint'", False),
        ("jq -r .x | xargs $CLAUDE_PROJECT_DIR/node_modules/.bin/prettier", False),
        ("cd $CLAUDE_PROJECT_DIR && npx --no-install prettier --write x", False),
        ("cd $CLAUDE_PROJECT_DIR && ./bin/lint", False),
        ("$UNKNOWN/tool", False),
    ],
)
def test_commands_that_run_workspace_files_are_refused(
    ws: Path, tmp_path: Path, command: str, in_workspace: bool
) -> None:
    assert refused(command, ws, ws if in_workspace else tmp_path) is not None


@pytest.mark.parametrize(
    "command", ["npx --no-install prettier --write x", "make fmt", "python3 -m black ."]
)
def test_project_runners_are_refused_in_the_workspace_but_not_elsewhere(
    ws: Path, tmp_path: Path, command: str
) -> None:
    assert "working directory" in (refused(command, ws, ws) or "")
    assert refused(command, ws, tmp_path) is None


@pytest.mark.parametrize(
    "command",
    [
        "cat >> /tmp/log",
        "jq -r .tool_input.command | grep -q rm && exit 2 || exit 0",
        "$CLAUDE_PROJECT_DIR/.claude/hooks/check.sh",
        "sh .claude/hooks/check.sh",
    ],
)
def test_ordinary_hooks_and_read_only_workspace_files_are_fine(
    ws: Path, tmp_path: Path, command: str
) -> None:
    cwd = ws if command.startswith("sh ") else tmp_path
    assert refused(command, ws, cwd) is None


def test_hook_variables_are_expanded_before_the_check(ws: Path, tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path)}
    assert workspace_code("$HOME/bin/tool --x", ws, tmp_path, env) is None
    assert workspace_code("${HOME}/x", ws, tmp_path, {"HOME": str(ws)}) is not None
    assert workspace_code("$UNSET_THING/x", ws, tmp_path, env) is not None


def test_a_link_out_of_the_read_only_dirs_is_followed(ws: Path, tmp_path: Path) -> None:
    (ws / ".claude" / "hooks" / "sneaky.sh").symlink_to(ws / "bin" / "lint")
    assert refused("$CLAUDE_PROJECT_DIR/.claude/hooks/sneaky.sh", ws, tmp_path) is not None


def test_the_environment_is_an_allowlist_with_a_fixed_path(tmp_path: Path) -> None:
    host = {
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "PATH": f"{tmp_path}:/usr/bin",
        "ANTHROPIC_API_KEY": "sk-secret",
        "AWS_SECRET_ACCESS_KEY": "x",
        "MY_TOKEN": "t",
    }
    env = hook_environment(tmp_path, ["MY_TOKEN", "ABSENT"], host)
    assert env == {
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "PATH": HOOK_PATH,
        "MY_TOKEN": "t",
        "CLAUDE_PROJECT_DIR": str(tmp_path),
    }


def test_hook_entry_options_and_hook_env_are_read_from_settings(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path / "s", config_dir=tmp_path / "c")
    ws = tmp_path / "ws"
    (ws / ".claude").mkdir(parents=True)
    doc = {
        "warden": {"hookEnv": ["MY_TOKEN"]},
        "hooks": {
            "PostToolUse": [
                {
                    "matcher": "Write",
                    "hooks": [
                        {"type": "command", "command": "a", "cwd": "workspace", "trusted": True},
                        {"type": "command", "command": "b", "sandbox": True},
                    ],
                }
            ]
        },
    }
    (ws / ".claude" / "settings.json").write_text(json.dumps(doc))
    a, b = load_hooks(settings, ws).hooks
    assert (a.cwd, a.trusted, a.sandbox, a.env_names) == ("workspace", True, False, ("MY_TOKEN",))
    assert (b.cwd, b.trusted, b.sandbox) == ("neutral", False, True)
    for bad in ({"cwd": "/tmp"}, {"trusted": "yes"}):
        block = {"PreToolUse": [{"hooks": [{"type": "command", "command": "x", **bad}]}]}
        with pytest.raises(PolicyError):
            parse_hooks(block, "test")


async def test_a_refused_hook_reports_why_and_never_runs(ws: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    (ws / "bin" / "lint").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (ws / "bin" / "lint").chmod(0o755)
    block = {
        "PreToolUse": [
            {"hooks": [{"type": "command", "command": "./bin/lint", "cwd": "workspace"}]}
        ]
    }
    hooks, _ = parse_hooks(block, "test")
    call = ToolCall(tool_name="Bash", tool_input={"command": "ls"}, tool_use_id="t")
    payload = hook_input("PreToolUse", call, CallContext(session_id="s"))
    (outcome,) = await run_hooks(hooks, payload, tool_name="Bash", workspace_host=ws)
    assert outcome.error is not None and outcome.error.startswith("refused:")
    assert '"trusted": true' in outcome.error and not marker.exists()
    trusted, _ = parse_hooks(
        {"PreToolUse": [{"hooks": [{"type": "command", "command": "./bin/lint",
                                     "cwd": "workspace", "trusted": True}]}]},
        "test",
    )  # fmt: skip
    (outcome,) = await run_hooks(trusted, payload, tool_name="Bash", workspace_host=ws)
    assert outcome.error is None and marker.exists()
