"""Claude Code's settings files are found where Claude Code finds them and read
completely: a restriction in one of them is never dropped because the file is
unusual. Managed-only keys narrow every lower level."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.behavior import Behavior
from orchestrator.config import Settings
from orchestrator.errors import PolicyError
from orchestrator.permissions import ToolCall, evaluate, load_hooks, load_policy
from orchestrator.permissions.glob_reads import glob_operand


def write_json(path: Path, doc: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2))
    return path


def bash(pol, command: str) -> Behavior:  # type: ignore[no-untyped-def]
    return evaluate(
        pol, ToolCall(tool_name="Bash", tool_input={"command": command})
    ).decision.behavior


def read(pol, path: str) -> Behavior:  # type: ignore[no-untyped-def]
    return evaluate(
        pol, ToolCall(tool_name="Read", tool_input={"file_path": path})
    ).decision.behavior


@pytest.fixture
def managed(settings: Settings, tmp_path: Path) -> Settings:
    """Settings whose Claude Code managed file lives under tmp_path."""
    return replace(
        settings, claude_managed_settings=tmp_path / "etc/claude-code/managed-settings.json"
    )


def test_claude_user_settings_deny_protects(settings: Settings, workspace: Path) -> None:
    write_json(settings.claude_dir / "settings.json", {"permissions": {"deny": ["Bash(rm:*)"]}})
    pol = load_policy(settings, workspace, allow=["Bash"])
    assert bash(pol, "rm -rf x") == "deny"
    exp = evaluate(pol, ToolCall(tool_name="Bash", tool_input={"command": "rm x"}))
    assert exp.decision.source == f"user:{settings.claude_dir / 'settings.json'}"


def test_a_root_anchored_rule_in_the_user_settings_means_their_directory(
    managed: Settings, workspace: Path
) -> None:
    """As measured against Claude Code: `/x` in `~/.claude/settings.json` is
    `~/.claude/x`; in project and managed settings it is `x` at the project root."""
    user = {"permissions": {"deny": ["Read(/secret.txt)", "Read(//etc/shadow)"]}}
    write_json(managed.claude_dir / "settings.json", user)
    pol = load_policy(managed, workspace)
    assert read(pol, "/root/.claude/secret.txt") == "deny"
    assert read(pol, "/home/dev/.claude/secret.txt") == "deny"
    assert read(pol, "/workspace/secret.txt") == "allow"
    assert read(pol, "/etc/shadow") == "deny"
    for level in (managed.claude_managed_settings, workspace / ".claude/settings.json"):
        write_json(level, {"permissions": {"deny": ["Read(/.env)"]}})
        assert read(load_policy(managed, workspace), "/workspace/.env") == "deny"
        level.unlink()


def test_claude_config_dir_moves_the_user_directory(tmp_path: Path) -> None:
    moved = tmp_path / "elsewhere"
    s = Settings.from_env({"CLAUDE_CONFIG_DIR": str(moved), "HOME": str(tmp_path)})
    assert s.claude_dir == moved


def test_claude_managed_settings_are_read(managed: Settings, workspace: Path) -> None:
    write_json(managed.claude_managed_settings, {"permissions": {"deny": ["Bash(curl:*)"]}})
    write_json(workspace / ".claude/settings.json", {"permissions": {"allow": ["Bash(curl:*)"]}})
    assert bash(load_policy(managed, workspace), "curl example.test") == "deny"


def test_managed_file_without_permissions_block_is_fine(managed: Settings, workspace: Path) -> None:
    write_json(managed.claude_managed_settings, {"allowManagedHooksOnly": True, "model": "x"})
    assert bash(load_policy(managed, workspace), "ls") == "ask"
    warden_managed = managed.claude_managed_settings.with_name("warden.json")
    write_json(warden_managed, {"companyAnnouncements": ["hi"]})
    s = replace(managed, managed_policy=warden_managed)
    assert load_policy(s, workspace).mode == "default"


def test_disable_bypass_keeps_the_default_mode(managed: Settings, workspace: Path) -> None:
    write_json(
        managed.claude_managed_settings,
        {"permissions": {"disableBypassPermissionsMode": "disable"}},
    )
    pol = load_policy(managed, workspace, mode="bypassPermissions")
    assert pol.mode == "default"
    assert bash(pol, "touch x") == "ask"
    assert any("disableBypassPermissionsMode" in n for n in pol.notes)


def test_disable_bypass_with_a_wrong_value_is_refused(managed: Settings, workspace: Path) -> None:
    write_json(
        managed.claude_managed_settings, {"permissions": {"disableBypassPermissionsMode": True}}
    )
    with pytest.raises(PolicyError, match=r'managed-settings.json: .*line 3.*"disable"'):
        load_policy(managed, workspace)


def test_managed_rules_only_drops_lower_allow_rules(managed: Settings, workspace: Path) -> None:
    write_json(
        managed.claude_managed_settings,
        {"allowManagedPermissionRulesOnly": True, "permissions": {"allow": ["Bash(ls:*)"]}},
    )
    write_json(
        workspace / ".claude/settings.json",
        {"permissions": {"allow": ["Bash(make:*)"], "deny": ["Bash(rm:*)"]}},
    )
    pol = load_policy(managed, workspace, allow=["Bash(git:*)"])
    assert bash(pol, "ls") == "allow"
    assert bash(pol, "make all") == "ask"
    assert bash(pol, "git push") == "allow"  # the command line still counts (Claude Code too)
    assert bash(pol, "rm x") == "deny"  # lower deny rules still hold (stricter)
    assert any("Bash(make:*)" in n for n in pol.notes)


def test_managed_only_key_in_user_settings_does_not_restrict(
    settings: Settings, workspace: Path
) -> None:
    write_json(settings.claude_dir / "settings.json", {"allowManagedPermissionRulesOnly": True})
    write_json(workspace / ".claude/settings.json", {"permissions": {"allow": ["Bash(make:*)"]}})
    assert bash(load_policy(settings, workspace), "make") == "allow"


def test_restricting_key_of_the_wrong_type_is_refused(managed: Settings, workspace: Path) -> None:
    write_json(managed.claude_managed_settings, {"allowManagedPermissionRulesOnly": "yes"})
    with pytest.raises(PolicyError, match=r"allowManagedPermissionRulesOnly.*true or false"):
        load_policy(managed, workspace)


def test_managed_hooks_only(managed: Settings, workspace: Path) -> None:
    hook = {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "true"}]}]}
    write_json(managed.claude_managed_settings, {"allowManagedHooksOnly": True})
    write_json(workspace / ".claude/settings.json", {"hooks": hook})
    hooks = load_hooks(managed, workspace)
    assert hooks.hooks == ()
    assert any("allowManagedHooksOnly" in w for w in hooks.warnings)


def test_unknown_keys_are_kept_and_reported(settings: Settings, workspace: Path) -> None:
    write_json(
        workspace / ".claude/settings.json",
        {"permisions": {"allow": ["Bash"]}, "futureKey": 1, "permissions": {"deny": ["Read(x)"]}},
    )
    pol = load_policy(settings, workspace)
    assert read(pol, "x") == "deny"
    assert any("'permisions'" in n and "did you mean 'permissions'" in n for n in pol.notes)
    assert any("'futureKey'" in n for n in pol.notes)


@pytest.mark.parametrize("where", ["project", "local", "user"])
def test_a_settings_path_that_is_a_directory_refuses(
    settings: Settings, workspace: Path, where: str
) -> None:
    path = {
        "project": workspace / ".claude/settings.json",
        "local": workspace / ".claude/settings.local.json",
        "user": settings.claude_dir / "settings.json",
    }[where]
    path.mkdir(parents=True)
    with pytest.raises(PolicyError, match=f"{path}: a directory.*replace it"):
        load_policy(settings, workspace)
    with pytest.raises(PolicyError, match="a directory"):
        load_hooks(settings, workspace)


def test_a_dangling_link_refuses(settings: Settings, workspace: Path) -> None:
    (workspace / ".claude").mkdir()
    os.symlink("/nonexistent/settings.json", workspace / ".claude/settings.json")
    with pytest.raises(PolicyError, match=r"symbolic link to .*/nonexistent/settings\.json"):
        load_policy(settings, workspace)


def test_malformed_settings_refuse_with_the_line(settings: Settings, workspace: Path) -> None:
    path = workspace / ".claude/settings.json"
    path.parent.mkdir()
    path.write_text('{\n  "permissions": {\n    "deny": ["Read(.env)",]\n  }\n}\n')
    with pytest.raises(PolicyError, match=r"settings.json: line 3, column \d+: invalid JSON"):
        load_policy(settings, workspace)
    path.write_text('["Read(.env)"]')
    with pytest.raises(PolicyError, match="not an object"):
        load_policy(settings, workspace)


def test_unreadable_settings_refuse(settings: Settings, workspace: Path) -> None:
    path = write_json(workspace / ".claude/settings.json", {"permissions": {"deny": ["Bash"]}})
    path.write_bytes(b'{"permissions": {"deny": ["\xff"]}}')
    with pytest.raises(PolicyError, match="not UTF-8"):
        load_policy(settings, workspace)


def test_gitignore_style_dot_slash(settings: Settings, workspace: Path) -> None:
    write_json(workspace / ".claude/settings.json", {"permissions": {"deny": ["Read(./.env)"]}})
    pol = load_policy(settings, workspace)
    assert read(pol, ".env") == "deny"
    assert read(pol, "sub/.env") == "deny"
    assert read(pol, "sub/deeper/.env") == "deny"
    assert read(pol, "sub/.env.example") == "allow"


@pytest.mark.parametrize(
    "command",
    [
        "cat .env",
        "cat sub/.env",
        "head -n 5 .env",
        "tail -f .env",
        "less .env",
        "grep SECRET .env",
        "grep -e x -- .env",
        "wc -l < .env",
        "sort -o out .env",
        "cp .env /tmp/copy",
        "timeout 5 cat .env",
        "cat README.md .env",
    ],
)
def test_bash_reading_a_denied_file_is_denied(
    settings: Settings, workspace: Path, command: str
) -> None:
    write_json(
        workspace / ".claude/settings.json",
        {
            "permissions": {
                "deny": ["Read(./.env)"],
                "allow": [
                    f"Bash({w}:*)"
                    for w in ("cat", "head", "tail", "less", "grep", "wc", "sort", "cp", "timeout")
                ],
            }
        },
    )
    assert bash(load_policy(settings, workspace), command) == "deny"


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("cat README.md", "allow"),
        ("grep -e .env README.md", "allow"),  # .env is the pattern here
        ("grep .env README.md", "allow"),
        ("grep -r SECRET .", "ask"),  # may read .env below .
        ("cat *", "allow"),  # bash's * never matches a leading dot: not .env
        ("wc -l *.py sub/*.txt", "allow"),
        ("cat .*", "ask"),  # .* may be .env
        ("cat sub/.e*", "ask"),
        ("cat */.env", "ask"),  # a wildcard in a directory part: the tree it lies under
        ("cat [.]env", "allow"),  # a class never matches a leading dot; bash reads '[.]env'
        ("cp -r sub /tmp/x", "ask"),  # copies sub/.env
        ("cp -t /tmp README.md .env", "deny"),
        ("ls | xargs cat", "ask"),
    ],
)
def test_bash_reads_that_may_reach_a_denied_file(
    settings: Settings, workspace: Path, command: str, expected: Behavior
) -> None:
    write_json(
        workspace / ".claude/settings.json",
        {
            "permissions": {
                "deny": ["Read(./.env)"],
                "allow": [f"Bash({w}:*)" for w in ("cat", "grep", "ls", "xargs", "wc", "cp")],
            }
        },
    )
    assert bash(load_policy(settings, workspace), command) == expected


def test_a_glob_operand_is_decided_on_todays_matches(settings: Settings, workspace: Path) -> None:
    """`cat *.py` cannot name .env, but a match that is a symlink to it reads it."""
    (workspace / ".env").write_text("SECRET=1\n")
    (workspace / "app.py").write_text("x\n")
    write_json(
        workspace / ".claude/settings.json",
        {"permissions": {"deny": ["Read(./.env)"], "allow": ["Bash(cat:*)"]}},
    )
    pol = load_policy(settings, workspace)

    def decide(command: str) -> Behavior:
        call = ToolCall(tool_name="Bash", tool_input={"command": command})
        return evaluate(pol, call, workspace_host=workspace).decision.behavior

    assert decide("cat *.py") == "allow"
    (workspace / "notes.py").symlink_to(".env")
    assert decide("cat *.py") == "deny"
    assert decide("cat .e*") == "deny"  # today's match is .env itself


def test_a_glob_through_a_planted_link_lists_no_host_directory(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    """The host lists a glob's directory to decide it; a link a sandbox left there
    means the container's own directory, never one of the host's."""
    host_dir = tmp_path / "host-only"
    host_dir.mkdir()
    (host_dir / "id_rsa").write_text("host secret\n")
    (workspace / "out").symlink_to(host_dir)
    (workspace / "src").mkdir()
    (workspace / "src" / "app.py").write_text("x\n")
    (workspace / "inner").symlink_to("src")
    ws = Path(os.path.realpath(workspace))
    assert glob_operand("out/*", "/workspace", ws).matches == []  # type: ignore[union-attr]
    # a link that stays inside the workspace is still listed where it leads
    assert glob_operand("inner/*.py", "/workspace", ws).matches == [  # type: ignore[union-attr]
        "/workspace/inner/app.py"
    ]
