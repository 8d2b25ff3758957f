"""A subagent's hostile terminal text (rich markup, OSC 8 hyperlinks, screen clears)
is shown as literal text by `warden run` on a real terminal: the live table keeps
drawing, another subagent's approval question is still shown and answered by the
person, and `ps`, `logs` and `audit` print the same text literally."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import warden_argv, warden_env
from tests.integration.terminal import run_on_a_terminal

pytestmark = pytest.mark.integration

MARKUP = "[/bold] [link=http://127.0.0.1/]x[/link]"
ESCAPES = "\x1b]8;;http://127.0.0.1/\x07click\x1b]8;;\x07 \x1b[2J"
NOISY_COMMAND = f"sleep 4; echo '{MARKUP} {ESCAPES}'"
RUN_DEADLINE_S = 240


def _script() -> dict[str, object]:
    def tool_use(name: str, **tool_input: object) -> dict[str, object]:
        return {"type": "tool_use", "name": name, "input": tool_input}

    def turns(*contents: list[dict[str, object]]) -> list[dict[str, object]]:
        return [{"content": c} for c in contents]

    return {
        "conversations": [
            {
                "name": "parent",
                "match": {"system_contains": "lead agent of warden"},
                "turns": turns(
                    [
                        tool_use(
                            "Task",
                            description=f"noisy {MARKUP}",
                            subagent_type="bash",
                            prompt="NOISY",
                        ),
                        tool_use("Task", description="asker", subagent_type="bash", prompt="ASKER"),
                    ],
                    [{"type": "text", "text": "parent saw: {tool_results}"}],
                ),
            },
            {
                "name": "noisy",
                "match": {"prompt_contains": "NOISY"},
                "turns": turns(
                    [tool_use("Bash", command=NOISY_COMMAND)],
                    [{"type": "text", "text": f"noisy done {MARKUP}"}],
                ),
            },
            {
                # Asks while the noisy command is on the live table.
                "name": "asker",
                "match": {"prompt_contains": "ASKER"},
                "turns": turns(
                    [tool_use("Bash", command="sleep 2")],
                    [tool_use("Bash", command="touch asked.txt")],
                    [{"type": "text", "text": "asker: {last_tool_result}"}],
                ),
            },
        ]
    }


def _run_on_a_terminal(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[int, bytes, int]:
    """Run argv on a pseudo-terminal, answer `a` to each approval prompt; return the
    exit status, everything printed, and how many questions were answered."""
    seen = b""
    answered = 0

    def answer(fd: int, chunk: bytes) -> None:
        nonlocal seen, answered
        seen += chunk
        # Answer every question (the hostile command itself may ask too).
        while seen.count(b"llow once") > answered:
            os.write(fd, b"a\n")
            answered += 1

    code, out = run_on_a_terminal(argv, env, cwd, answer, RUN_DEADLINE_S)
    return code, out, answered


def test_hostile_text_is_literal_and_the_approval_is_still_asked(
    tmp_path: Path, workspace: Path
) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(_script()))
    env = warden_env(WARDEN_STATE_DIR=str(tmp_path / "state"), COLUMNS="200", LINES="60")
    env.pop("CI", None)
    argv = warden_argv(
        "run", "--replay", str(script), "--workspace", str(workspace),
        "--permission-mode", "default", "--allow", "Bash(sleep:*)", "--allow", "Bash(echo:*)",
        "go",
    )  # fmt: skip
    code, out, answered = _run_on_a_terminal(argv, env, tmp_path)

    assert answered, f"the approval question was never shown:\n{out[-3000:]!r}"
    assert code == 0, out[-3000:]
    assert (workspace / "asked.txt").exists()  # the person's "allow" reached the call
    assert b"approval needed" in out and b"MarkupError" not in out
    assert b"approver error" not in out
    assert MARKUP[:20].encode() in out  # the live table shows the command literally
    assert b"\x1b]8;" not in out and b"\x1b[2J" not in out  # no hyperlink, no clear

    def warden(*args: str) -> str:
        done = subprocess.run(
            warden_argv(*args), env=env, capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    runs = json.loads(warden("ps", "--json"))
    noisy = next(t for t in runs[0]["tasks"] if t["description"].startswith("noisy"))
    assert MARKUP in warden("ps")
    logs = warden("logs", noisy["task_id"])
    assert MARKUP in logs and "\\x1b]8;;http://127.0.0.1/\\x07click" in logs
    assert "\x1b" not in logs and "\x07" not in logs
    audit = warden("audit")
    assert "sleep 4; echo '[/bold] [link=" in audit and "\x1b" not in audit
    assert "touch asked.txt" in audit
