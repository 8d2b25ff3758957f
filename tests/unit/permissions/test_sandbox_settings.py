"""Locks in that Claude Code's `sandbox.filesystem.denyRead` / `denyWrite` are never
dropped: each path becomes a Read / Edit deny rule of its file (for the file tools
and for commands), from every level, in an untrusted workspace too; a misspelt key
or a malformed list refuses the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.behavior import Behavior
from orchestrator.config import Settings
from orchestrator.errors import PolicyError
from orchestrator.permissions import ToolCall, evaluate, load_policy


def write(path: Path, doc: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def decide(pol, tool: str, **tool_input: str) -> Behavior:  # type: ignore[no-untyped-def]
    return evaluate(pol, ToolCall(tool_name=tool, tool_input=dict(tool_input))).decision.behavior


def filesystem(**keys: object) -> dict[str, object]:
    return {
        "sandbox": {"filesystem": keys},
        "permissions": {"allow": ["Bash(cat:*)", "Read", "Edit", "Bash(cp:*)"]},
    }


def test_deny_read_and_deny_write_hold_for_tools_and_commands(
    settings: Settings, workspace: Path
) -> None:
    write(
        workspace / ".claude/settings.json",
        filesystem(denyRead=["~/.aws/credentials", "./secrets"], denyWrite=["/etc", "build/out"]),
    )
    pol = load_policy(settings, workspace)
    assert decide(pol, "Read", file_path="/root/.aws/credentials") == "deny"
    assert decide(pol, "Bash", command="cat ~/.aws/credentials") == "deny"
    assert decide(pol, "Read", file_path="/workspace/secrets/token") == "deny"
    assert decide(pol, "Bash", command="cat secrets/token") == "deny"
    assert decide(pol, "Read", file_path="/workspace/README.md") == "allow"
    assert decide(pol, "Write", file_path="/etc/passwd", content="x") == "deny"
    assert (
        decide(pol, "Edit", file_path="/workspace/build/out/a.o", old_string="a", new_string="b")
        == "deny"
    )
    assert decide(pol, "Bash", command="cat README.md > /etc/x") == "deny"


def test_an_untrusted_workspace_keeps_its_sandbox_denies(
    settings: Settings, workspace: Path
) -> None:
    write(workspace / ".claude/settings.json", filesystem(denyRead=[".env"]))
    pol = load_policy(settings, workspace, trusted=False)
    assert decide(pol, "Read", file_path="/workspace/sub/.env") == "deny"


def test_relative_paths_in_the_user_settings_cover_their_directory_too(
    settings: Settings, workspace: Path
) -> None:
    write(settings.claude_dir / "settings.json", filesystem(denyRead=["history.jsonl"]))
    pol = load_policy(settings, workspace)
    assert decide(pol, "Read", file_path="/root/.claude/history.jsonl") == "deny"
    assert decide(pol, "Read", file_path="/workspace/history.jsonl") == "deny"


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"denyread": ["x"]}, "did you mean 'denyRead'"),
        ({"deny_write": ["x"]}, "did you mean 'denyWrite'"),
        ({"denyRead": "x"}, "denyRead must be a list of paths"),
        ({"denyRead": [""]}, "denyRead must be a list of paths"),
    ],
)
def test_a_malformed_filesystem_block_refuses(
    settings: Settings, workspace: Path, block: dict[str, object], message: str
) -> None:
    write(workspace / ".claude/settings.json", {"sandbox": {"filesystem": block}})
    with pytest.raises(PolicyError, match=message):
        load_policy(settings, workspace)


@pytest.mark.parametrize("key", ["filesytem", "netwrok", "Network"])
def test_a_misspelt_sandbox_block_refuses(settings: Settings, workspace: Path, key: str) -> None:
    write(workspace / ".claude/settings.json", {"sandbox": {key: {"denyRead": [".env"]}}})
    with pytest.raises(PolicyError, match=f"sandbox key '{key}'"):
        load_policy(settings, workspace)


def test_widening_keys_are_accepted_and_widen_nothing(settings: Settings, workspace: Path) -> None:
    write(
        workspace / ".claude/settings.json",
        {"sandbox": {"filesystem": {"allowWrite": ["/tmp/build"], "allowRead": ["."]}}},
    )
    pol = load_policy(settings, workspace)
    assert decide(pol, "Write", file_path="/tmp/build/x", content="x") == "ask"
