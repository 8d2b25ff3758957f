"""Approvals as a person meets them: `warden run` on a real pseudo-terminal, subagents
(one nested under another) asking through the scripted model. The prompt shows the
chain with its ancestors, the run and the asking task's description (container text
printed inert, never as markup or escapes); when questions queue it says how many
wait; each answer is echoed; "allow for the rest of this run" says what it covers and
is honoured without asking again; "always allow" shows the exact rule and its file
before anything is written, then writes exactly that rule; while a question waits the
task table stays on screen under the prompt and keeps redrawing, with what is typed
shown on the prompt line; and the live display leaves no duplicated fragment on the
final screen (rendered by a terminal emulator, so cursor movement and erasing count
as a terminal does them)."""

from __future__ import annotations

import getpass
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pyte
import pytest

from tests.conftest import warden_argv, warden_env, write_script
from tests.integration.harness import PARENT_MATCH, convo, text, tool
from tests.integration.terminal import run_on_a_terminal

pytestmark = pytest.mark.integration

COLUMNS, LINES = 320, 50
"""Wide enough that no line of the run wraps (long temp paths included)."""
DEADLINE_S = 300
QUESTIONS_BEFORE_FIRST_ANSWER = 3
"""Questions that must be waiting before the first is answered, so the queue shows."""
HOSTILE_DESCRIPTION = "ask one [bold]x[/bold] \x1b[31mred"
ANSWERS = {
    b"touch once.txt": [b"a"],
    b"touch always.txt": [b"w", b"y"],
    b"touch session.txt": [b"s"],
    b"touch denied.txt": [b"d", b"not that one"],
    b"touch third.txt": [b"a"],
}
"""What the person types for each command: the choice, then the follow-up if any."""
PROMPT_END = b"llow once  [s]"
FOLLOW_UPS = (b"[y/N] ", b"Reason (told to the agent): ")


def _task(prompt: str, subagent_type: str, description: str) -> dict[str, Any]:
    return tool("Task", description=description, prompt=prompt, subagent_type=subagent_type)


def _script(tmp_path: Path) -> Path:
    def asker(name: str, *commands: str) -> dict[str, Any]:
        turns = [[tool("Bash", command=c)] for c in commands]
        return convo(name, {"prompt_contains": name.upper()}, *turns, [text(f"{name} done")])

    return write_script(
        tmp_path / "script.yaml",
        [
            convo(
                "parent",
                PARENT_MATCH,
                [
                    _task("LEAD go", "general-purpose", "lead"),
                    _task("ASK2 go", "bash", "ask two"),
                    _task("ASK3 go", "bash", "ask three"),
                ],
                [text("all done")],
            ),
            convo(
                "lead",
                {"prompt_contains": "LEAD"},
                [_task("ASK1 go", "bash", HOSTILE_DESCRIPTION)],
                [text("lead done")],
            ),
            asker("ask1", "touch once.txt", "touch always.txt"),
            # The same input twice: the second is covered by the "session" answer.
            asker("ask2", "touch session.txt", "touch session.txt", "touch denied.txt"),
            asker("ask3", "touch third.txt"),
        ],
    )


def _requested(state: Path) -> int:
    return sum(
        line.count('"approval_requested"')
        for events in state.glob("runs/*/events.jsonl")
        for line in events.read_text().splitlines()
    )


class _Person:
    """Reads the terminal as a terminal draws it and answers each question by the
    command it shows, once the prompt (and the live table under it) is on screen."""

    def __init__(self, state: Path, settings_file: Path) -> None:
        self.state, self.settings_file = state, settings_file
        self.fd = -1
        self.out = b""
        self.screen = pyte.Screen(COLUMNS, LINES)
        self.stream = pyte.ByteStream(self.screen)
        self.answered: list[bytes] = []
        self.pending: list[bytes] = []
        self.follow_up_after = 0
        self.rule_file_before_confirm: bool | None = None
        self.first_prompt_frames: list[list[str]] = []
        """The screens seen while the first question waited, prompt and table both up."""

    def feed(self, fd: int, chunk: bytes) -> None:
        self.fd = fd
        self.out += chunk
        self.stream.feed(chunk)
        if self.pending:  # a follow-up question ("[y/N]", "Reason") is awaited
            if any(f in self.out[self.follow_up_after :] for f in FOLLOW_UPS):
                answer = self.pending.pop(0)
                if answer == b"y":  # the rule is on the screen: nothing may be written yet
                    self.rule_file_before_confirm = self.settings_file.exists()
                self._type(answer)
            return
        asked = self.out.count(b"approval needed") > len(self.answered)
        if not asked or PROMPT_END not in self.out[self.out.rfind(b"approval needed") :]:
            return
        if not self._live_prompt():
            return
        if not self.answered:  # let the others queue up behind the first question
            frame = [line.rstrip() for line in self.screen.display]
            if frame not in self.first_prompt_frames:
                self.first_prompt_frames.append(frame)
            if len(self.first_prompt_frames) < 2 or _requested(self.state) < (
                QUESTIONS_BEFORE_FIRST_ANSWER
            ):
                return
        # The question's panel only: the table under the prompt names commands too.
        start = self.out.rfind(b"approval needed")
        prompt = self.out[start : self.out.find(PROMPT_END, start)]
        command = next((c for c in ANSWERS if c in prompt), None)
        assert command is not None, prompt[-2000:]
        choice, *self.pending = ANSWERS[command]
        self.answered.append(command)
        self.follow_up_after = len(self.out)
        self._type(choice)

    def _live_prompt(self) -> bool:
        """The choices line is on screen with the task table drawn under it (a chunk
        may end mid-redraw: a frame counts once a running task's row is drawn)."""
        display = [line.rstrip() for line in self.screen.display]
        at = next((i for i, line in enumerate(display) if PROMPT_END.decode() in line), None)
        return (
            at is not None
            and any(line.strip() == "subagents" for line in display[at:])
            and any(RUNNING_ROW.search(line) for line in display[at:])
        )

    def _type(self, answer: bytes) -> None:
        os.write(self.fd, answer + b"\n")


RUNNING_ROW = re.compile(r"\bsa_[0-9a-f]{6,}\b.*│.*running")
"""A running subagent's row of the live task table."""


def _final_screen(raw: bytes) -> list[str]:
    """What a person sees after the run, scrollback included, as a terminal draws it."""
    screen = pyte.HistoryScreen(COLUMNS, LINES, history=10_000)
    stream = pyte.ByteStream(screen)
    stream.feed(raw)

    def row(line: Any) -> str:
        return "".join(line[x].data for x in range(COLUMNS)).rstrip()

    return [row(line) for line in screen.history.top] + [s.rstrip() for s in screen.display]


def test_a_person_answers_queued_nested_questions_on_a_terminal(
    tmp_path: Path, workspace: Path
) -> None:
    state = tmp_path / "state"
    settings_file = workspace / ".claude" / "settings.local.json"
    env = warden_env(WARDEN_STATE_DIR=str(state), COLUMNS=str(COLUMNS), LINES=str(LINES))
    env.pop("CI", None)
    argv = warden_argv(
        "run", "--replay", str(_script(tmp_path)), "--workspace", str(workspace),
        "--permission-mode", "default", "--max-depth", "2", "go",
    )  # fmt: skip
    person = _Person(state, settings_file)
    code, raw = run_on_a_terminal(argv, env, tmp_path, person.feed, DEADLINE_S)
    screen = _final_screen(raw)
    shown = "\n".join(screen)

    assert code == 0, shown[-4000:]
    # Five questions: the repeated session input was not asked again.
    assert sorted(person.answered) == sorted(ANSWERS), person.answered
    assert {p.name for p in workspace.iterdir() if p.suffix == ".txt"} == {
        "once.txt", "always.txt", "session.txt", "third.txt",
    }  # fmt: skip

    # The chain names the run, the parent agent and every ancestor of the asker, one
    # quoted line each with its description, the asker last.
    assert set(re.findall(r"chain \(run (run_\w+)\): parent agent →", shown)) == {_run_id(state)}
    hops = [line.strip("│ ") for line in screen if re.match(r"│\s+│ sa_", line)]
    assert any(re.fullmatch(r"sa_\w+ \(general-purpose\): lead →", h) for h in hops), hops
    nested = r"sa_\w+ \(bash\): ask one \[bold\]x\[/bold\] \\x1b\[31mred ← asks"
    assert any(re.fullmatch(nested, h) for h in hops), hops
    top = [i for i, line in enumerate(screen) if re.search(r"\(bash\): ask two ← asks", line)]
    assert top and all("parent agent →" in screen[i - 1] for i in top)
    # The asker's description, container text, is printed inert.
    assert "│ ask one [bold]x[/bold] \\x1b[31mred" in shown
    assert b"\x1b[31mred" not in raw and "│ ask two" in shown

    # The queue is announced, every answer echoed, each choice says what it covers.
    assert re.search(r"^warden: [12] more question\(s\) waiting after this one$", shown, re.M)
    # ... already while the first question is on screen, before it is answered.
    waiting = [i for i, line in enumerate(screen) if "more question(s) waiting" in line]
    echo = re.compile(r"warden: (allowed|denied|always allowed)")
    first_echo = next(i for i, line in enumerate(screen) if echo.match(line))
    assert waiting and waiting[0] < first_echo, screen
    assert "[s] allow this exact input again for the rest of this run" in shown
    echoes = [line for line in screen if line.startswith("warden: ")]
    assert sum("allowed once: Bash for sa_" in e for e in echoes) == 2
    denied = r"warden: denied: Bash for sa_\w+ \(bash\): not that one( \(\d more waiting\))?"
    assert any(re.fullmatch(denied, e) for e in echoes), echoes
    # The first answer was given with two more questions queued: its echo says so.
    # (Two, or one when the third question's event was written before it reached the
    # terminal's queue: the person waits on the events, the count is the queue's.)
    assert any(re.search(r" \([12] more waiting\)$", e) for e in echoes), echoes
    assert any("allowed this exact input for the rest of this run: Bash" in e for e in echoes)

    # "Always allow": the exact rule and its file, shown and confirmed before writing.
    rule = "Bash(touch always.txt)"
    assert f"[w] always allow: add {rule} to {settings_file}" in shown
    assert f"Always allow: add the rule {rule} to {settings_file}? [y/N]" in shown
    assert person.rule_file_before_confirm is False
    assert f"warden: always allowed (rule {rule} for {settings_file})" in shown
    assert json.loads(settings_file.read_text()) == {"permissions": {"allow": [rule]}}

    # While a question waits, the task table stays on screen under the prompt and keeps
    # redrawing (its elapsed times move); what is typed shows on the prompt line.
    frames = person.first_prompt_frames
    assert len(frames) >= 2, frames
    for frame in frames:
        at = next(i for i, line in enumerate(frame) if PROMPT_END.decode() in line)
        below = frame[at:]
        assert any(line.strip() == "subagents" for line in below), frame
        rows = [line for line in below if RUNNING_ROW.search(line)]
        assert rows, "\n".join(frame)
    assert re.search(r"\[d\]eny > a$", shown, re.M), shown[-3000:]
    assert "Reason (told to the agent): not that one" in shown

    # The audit names the channel and the person: the terminal and its OS user.
    audit = subprocess.run(
        warden_argv("audit", "--json"),
        env=warden_env(WARDEN_STATE_DIR=str(state)),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    asked = [r for r in json.loads(audit.stdout) if r["decision"] == "ask"]
    user = getpass.getuser()
    answered = [r for r in asked if r["decided_by"].startswith("terminal")]
    assert len(answered) == len(ANSWERS), asked
    assert {(r["decided_by"], r["channel"], r["person"]) for r in answered} == {
        (f"terminal:{user}", "terminal", user)
    }

    # The live table left nothing behind: each task is one row, of the summary.
    assert not any(line.strip() == "subagents" for line in screen)
    task_ids = set(re.findall(r"\bsa_[0-9a-f]{6,}\b", shown))
    assert len(task_ids) == 4
    for task_id in task_ids:
        rows = [line for line in screen if task_id in line and line.count("│") >= 6]
        assert len(rows) == 1, (task_id, rows)


def _run_id(state: Path) -> str:
    done = subprocess.run(
        warden_argv("ps", "--json"),
        env=warden_env(WARDEN_STATE_DIR=str(state)),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    run_id: str = json.loads(done.stdout)[0]["run_id"]
    return run_id
