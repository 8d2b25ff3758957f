"""Locks in that a command writing a file is held to the Edit deny and ask rules,
as Claude Code holds `cp`, `touch`, `mv` and `sed -i` to its Edit deny rules
(measured): `Bash(cp:*)` does not let `cp x src/gen/a.py` past `Edit(./src/gen/**)`.
Operands known only at run time ask when such a rule could lie under them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.behavior import Behavior
from orchestrator.config import Settings
from orchestrator.permissions import ToolCall, evaluate, load_policy

PROGRAMS = ("cp", "mv", "touch", "sed", "tee", "rm", "dd", "install", "ln", "echo", "xargs", "ls")


@pytest.fixture
def policy(settings: Settings, workspace: Path):  # type: ignore[no-untyped-def]
    (workspace / ".claude").mkdir()
    perms = {"allow": [f"Bash({p}:*)" for p in PROGRAMS], "deny": ["Edit(./src/gen/*)"]}
    (workspace / ".claude/settings.json").write_text(json.dumps({"permissions": perms}))
    return load_policy(settings, workspace)


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("cp README.md src/gen/a.py", "deny"),
        ("cp -t src/gen README.md setup.py", "deny"),
        ("cp --target-directory=src/gen README.md", "deny"),
        ("cp README.md src/ok.py", "allow"),
        ("mv src/app.py src/gen/app.py", "deny"),
        ("mv src/gen/out.py src/out.py", "deny"),  # removes it from there
        ("touch -d yesterday src/gen/c.py", "deny"),
        ("sed -i s/1/2/ src/gen/out.py", "deny"),
        ("sed -e s/1/2/ -i src/gen/out.py", "deny"),
        ("sed s/1/2/ src/gen/out.py", "allow"),  # prints; writes nothing
        ("echo x | tee src/gen/b.py", "deny"),
        ("rm -f src/gen/out.py", "deny"),
        ("dd if=README.md of=src/gen/x", "deny"),
        ("install -m 644 README.md src/gen/r", "deny"),
        ("ln -s ../README.md src/gen/link", "deny"),
        ("rm src/gen/*.py", "ask"),
        ("touch src/gen/$NAME", "ask"),
        ("ls | xargs rm", "ask"),
        ("cp README.md src/", "allow"),
        ("cp out.py src/gen", "deny"),  # src/gen is a directory: src/gen/out.py
    ],
)
def test_commands_that_write_a_denied_path(policy, command: str, expected: Behavior) -> None:  # type: ignore[no-untyped-def]
    call = ToolCall(tool_name="Bash", tool_input={"command": command})
    assert evaluate(policy, call).decision.behavior == expected


def test_paths_that_tools_execute_ask_for_command_writes_too(
    settings: Settings, workspace: Path
) -> None:
    pol = load_policy(settings, workspace, allow=["Bash(touch:*)", "Bash(cp:*)"])
    for command in ("touch .vscode/tasks.json", "cp x .claude/settings.json"):
        call = ToolCall(tool_name="Bash", tool_input={"command": command})
        assert evaluate(pol, call).decision.behavior == "ask", command
