"""Locks in the one table of paths that tools execute: an edit of a row that asks
(git metadata at any depth, a `.git` file, `commondir`, editor, shell, hook-manager
and package-manager configuration) asks in acceptEdits, in bypassPermissions and
past an `Edit(**)` allow rule, by the Write/Edit tools and by Bash redirections,
while ordinary files stay allowed; every row is documented in policies/README.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config import Settings
from orchestrator.permissions import ToolCall, evaluate, load_policy
from orchestrator.permissions.executed_paths import (
    EXECUTED_PATHS,
    ask_rules,
    hooks_path_pattern,
)

ASKS = [
    "sub/.git/config",
    "sub/.git",  # a .git file: `gitdir: ../elsewhere`
    ".git/commondir",
    "vendor/lib/.git/hooks/post-checkout",
    ".vscode/settings.json",
    ".vscode/tasks.json",
    ".idea/workspace.xml",
    "packages/web/.npmrc",
    ".husky/pre-commit",
    "app/.envrc",
    ".yarn/releases/yarn-4.cjs",
    ".cargo/config.toml",
    "gradle/wrapper/gradle-wrapper.properties",
    ".devcontainer/devcontainer.json",
    ".claude/settings.json",
    "tools/.claude/agents/x.md",
    "/root/.bashrc",
]
ALLOWED = ["src/app.py", "notes/.gitignore", ".github/README.md", "docs/vscode.md", "a.git"]


def _decide(tmp_path: Path, mode: str, call: ToolCall, allow: tuple[str, ...] = ()) -> str:
    settings = Settings(state_dir=tmp_path / "s", config_dir=tmp_path / "c")
    policy = load_policy(settings, tmp_path, mode=mode, allow=list(allow))
    return evaluate(policy, call).decision.behavior


def _write(path: str) -> ToolCall:
    return ToolCall(
        tool_name="Write", tool_input={"file_path": path, "content": "x"}, tool_use_id="t"
    )


@pytest.mark.parametrize("path", ASKS)
def test_an_edit_of_a_path_tools_execute_asks_in_every_mode(tmp_path: Path, path: str) -> None:
    assert _decide(tmp_path, "acceptEdits", _write(path)) == "ask"
    assert _decide(tmp_path, "bypassPermissions", _write(path)) == "ask"
    assert _decide(tmp_path, "default", _write(path), allow=("Edit(**)", "Edit(//**)")) == "ask"
    assert _decide(tmp_path, "dontAsk", _write(path), allow=("Edit(**)",)) == "deny"
    bash = ToolCall(tool_name="Bash", tool_input={"command": f"echo x > {path}"}, tool_use_id="t")
    assert _decide(tmp_path, "acceptEdits", bash, allow=("Bash(echo:*)",)) == "ask"


@pytest.mark.parametrize("path", ALLOWED)
def test_ordinary_files_stay_allowed_in_accept_edits(tmp_path: Path, path: str) -> None:
    assert _decide(tmp_path, "acceptEdits", _write(path)) == "allow"


def test_every_row_is_documented_in_the_policies_readme() -> None:
    readme = (Path(__file__).resolve().parents[3] / "policies" / "README.md").read_text()
    missing = [row.pattern for row in EXECUTED_PATHS if f"`{row.pattern}`" not in readme]
    assert not missing
    assert all(row.runs for row in EXECUTED_PATHS)
    assert len(ask_rules()) == sum(row.asks for row in EXECUTED_PATHS)


def test_core_hooks_path_inside_the_workspace_is_read(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    config = tmp_path / ".git" / "config"
    for value, expect in [
        ('"tools/hooks"', "/tools/hooks"),
        (".husky/_", "/.husky/_"),
        (f"{tmp_path}/ci/hooks", "/ci/hooks"),
        ("/workspace/h", "/h"),
        ("/etc/hooks", None),
        ("../outside", None),
    ]:
        config.write_text(f"[core]\n\tbare = false\n\thooksPath = {value}\n")
        assert hooks_path_pattern(tmp_path) == expect, value
    config.write_text("not [ a config")
    assert hooks_path_pattern(tmp_path) is None


MEMORY = "/workspace/.claude/agent-memory/keeper"


def test_an_agents_own_memory_is_written_without_asking(tmp_path: Path) -> None:
    """As in Claude Code: `.md` files in the agent's own memory directory are allowed
    for writing in every mode but plan; anything else under `.claude` still asks, a
    deny rule still wins, and another agent's memory is not the agent's."""
    from orchestrator.permissions.evaluate import BUILT_IN_ASK_SOURCE
    from orchestrator.permissions.sources import BUILT_IN_SOURCE

    assert BUILT_IN_ASK_SOURCE == BUILT_IN_SOURCE
    settings = Settings(state_dir=tmp_path / "s", config_dir=tmp_path / "c")

    def decide(path: str, mode: str = "default", deny: tuple[str, ...] = ()) -> str:
        policy = load_policy(settings, tmp_path, mode=mode, deny=list(deny))
        policy = policy.model_copy(update={"memory_dir": MEMORY})
        return evaluate(policy, _write(path)).decision.behavior

    assert decide(f"{MEMORY}/MEMORY.md") == "allow"
    assert decide(f"{MEMORY}/topics/style.md", "bypassPermissions") == "allow"
    assert decide(f"{MEMORY}/run.sh") == "ask"
    assert decide("/workspace/.claude/agent-memory/other/MEMORY.md") == "ask"
    assert decide("/workspace/.claude/settings.md") == "ask"
    assert decide(f"{MEMORY}/../../settings.md") == "ask"
    assert decide(f"{MEMORY}/MEMORY.md", "plan") == "deny"
    assert decide(f"{MEMORY}/MEMORY.md", deny=("Edit(.claude/**)",)) == "deny"


def test_a_shell_redirection_into_its_own_memory_is_as_a_write_there(tmp_path: Path) -> None:
    """Claude Code 2.1.197 (measured): `echo x > MEMORY_DIR/n.md` and `>>` need no
    question about the path, while `touch`, `tee`, `cp`, `mkdir`, `rm`, `sed -i` there
    still ask; the command itself still needs its rule (warden has no read-only list),
    and a `.txt`, another agent's memory or a deny rule are not covered."""
    settings = Settings(state_dir=tmp_path / "s", config_dir=tmp_path / "c")

    def bash(command: str, deny: tuple[str, ...] = ()) -> str:
        policy = load_policy(settings, tmp_path, allow=["Bash(echo:*)", "Bash(touch:*)",
                                                        "Bash(tee:*)"], deny=list(deny))  # fmt: skip
        policy = policy.model_copy(update={"memory_dir": MEMORY})
        call = ToolCall(tool_name="Bash", tool_input={"command": command}, tool_use_id="t")
        return evaluate(policy, call).decision.behavior

    assert bash(f"echo x > {MEMORY}/n.md") == "allow"
    assert bash(f"echo x >> {MEMORY}/MEMORY.md") == "allow"
    assert bash(f"echo x > {MEMORY}/n.txt") == "ask"
    assert bash(f"touch {MEMORY}/t.md") == "ask"
    assert bash(f"echo x | tee {MEMORY}/t.md") == "ask"
    assert bash("echo x > /workspace/.claude/agent-memory/other/n.md") == "ask"
    assert bash(f"echo x > {MEMORY}/n.md", deny=("Edit(.claude/**)",)) == "deny"
