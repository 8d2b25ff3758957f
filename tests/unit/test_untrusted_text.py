"""Container text reaches the terminal as inert plain text in every renderer (live
table and event lines, approval prompt, `ps`, `logs`, `audit`, the run summary): rich
markup is never parsed, terminal control sequences are shown escaped, and a display
failure never silently turns an approval question into a deny."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from click.testing import CliRunner
from rich.console import Console
from rich.live import Live

from orchestrator.jsontypes import JSONObject, input_hash
from orchestrator.permissions.approvers import ApprovalAnswer, ApprovalQuestion
from orchestrator.runtime.events import Event
from orchestrator.store import AuditRecord, Store, TaskRecord
from orchestrator.ui.approval_prompt import TerminalApprover
from orchestrator.ui.progress import Progress
from orchestrator.untrusted_text import as_data, plain, printable

CLOSE_TAG = "[/bold]"
LINK = "[link=http://127.0.0.1/]x[/link]"
OSC8 = "\x1b]8;;http://127.0.0.1/\x07click\x1b]8;;\x07"
CLEAR = "\x1b[2J"
HOSTILE = f"{CLOSE_TAG} {LINK} {OSC8} {CLEAR} [bold red]loud[/] \x9b31m \u202eevil \ud800"
RAW_CONTROLS = ("\x1b", "\x07", "\x9b", "\u202e", "\ud800")


def assert_inert(shown: str) -> None:
    """The hostile text is there literally, and nothing of it acts on a terminal."""
    for raw in RAW_CONTROLS:
        assert raw not in shown, f"raw {raw!r} reached the terminal"
    assert CLOSE_TAG in shown
    assert "[link=http://127.0.0.1/]x[/link]" in shown
    assert "\\x1b]8;;http://127.0.0.1/\\x07" in shown
    assert "\\x1b[2J" in shown
    assert "[bold red]loud[/]" in shown


def render(renderable: Any) -> str:
    out = io.StringIO()
    Console(file=out, width=400, color_system=None, force_terminal=False).print(renderable)
    return out.getvalue()


def test_as_data_makes_every_control_visible() -> None:
    assert as_data(OSC8) == "\\x1b]8;;http://127.0.0.1/\\x07click\\x1b]8;;\\x07"
    assert as_data(CLEAR + "\r\x00\x7f\x85") == "\\x1b[2J\\x0d\\x00\\x7f\\x85"
    assert as_data("a\u2028b\u061c\ud800") == "a\\u2028b\\u061c\\ud800"
    assert as_data("naïve ✓ 漢字\nnext") == "naïve ✓ 漢字\nnext"
    assert as_data(42) == "42"


def test_printable_cuts_and_announces() -> None:
    assert printable("x" * 100, 10) == "x" * 9 + "…"
    assert printable("a\nb") == "a\\nb"
    assert printable("a\nb", None, multiline=True) == "a\nb"


def test_plain_is_never_parsed_as_markup() -> None:
    text = plain(HOSTILE)
    assert text.plain == printable(HOSTILE, None)
    assert text.spans == []
    assert_inert(render(text))


def event(kind: str, **data: Any) -> Event:
    return Event(kind=kind, run_id="r1", task_id="sa_1", agent_type=f"agent{CLOSE_TAG}", data=data)


HOSTILE_EVENTS = [
    event("task_started", description=HOSTILE),
    event("task_running", event="tool_started", tool_name=f"Bash{LINK}", detail=HOSTILE),
    event("broker_rejected", endpoint=CLOSE_TAG, reason=HOSTILE),
    event("task_failed", status=CLOSE_TAG, duration_s=1.0, error=HOSTILE),
]


def test_live_table_renders_hostile_rows_as_text() -> None:
    progress = Progress(json_mode=False, stream=io.StringIO())
    for e in HOSTILE_EVENTS[:2]:
        progress(e)
    shown = render(progress._table())
    assert "agent[/bold]" in shown and "Bash[link=" in shown
    assert "\\x1b[2J" in shown or "[/bold]" in shown  # the detail column is cut at 60
    for raw in RAW_CONTROLS:
        assert raw not in shown


def test_live_table_failure_is_contained(monkeypatch: pytest.MonkeyPatch) -> None:
    progress = Progress(json_mode=False, stream=io.StringIO())
    progress(HOSTILE_EVENTS[0])

    def broken() -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(progress, "_draw_table", broken)
    assert "subagent table unavailable" in render(progress._table())


def test_event_lines_are_inert() -> None:
    stream = io.StringIO()
    progress = Progress(json_mode=False, stream=stream)
    for e in HOSTILE_EVENTS:
        progress(e)
    shown = stream.getvalue()
    for raw in RAW_CONTROLS:
        assert raw not in shown
    assert "agent[/bold]" in shown and "Bash[link=http://127.0.0.1/]x[/link]" in shown
    assert "\\x1b[2J" in shown


class _ExplodingLive:
    def stop(self) -> None:
        raise RuntimeError("display broke")

    def start(self) -> None:
        raise RuntimeError("display broke")


class _Recorder:
    def __init__(self) -> None:
        self.asked: list[ApprovalQuestion] = []

    async def approve(self, q: ApprovalQuestion) -> ApprovalAnswer:
        self.asked.append(q)
        return ApprovalAnswer(behavior="allow", decided_by="terminal:alice")


def question(text: str = HOSTILE) -> ApprovalQuestion:
    tool_input: JSONObject = {"command": text}
    return ApprovalQuestion(
        task_id="sa_2",
        agent_type=f"general{CLOSE_TAG}",
        description=text,
        tool_name="Bash",
        tool_input=tool_input,
        input_hash=input_hash("Bash", tool_input),
        asked_by=f"Bash(make:*) {LINK}",
        reason=text,
    )


async def test_a_broken_live_display_still_asks() -> None:
    progress = Progress(json_mode=False, stream=io.StringIO())
    progress.live = cast(Live, _ExplodingLive())
    inner = _Recorder()
    answer = await progress.pausing(inner).approve(question())
    assert answer.behavior == "allow" and len(inner.asked) == 1
    assert progress.live is None  # falls back to one line per event


async def test_approval_prompt_shows_markup_and_escapes_literally() -> None:
    out = io.StringIO()
    approver = TerminalApprover(stdin=io.StringIO("a\n"), stdout=out, user="terminal:alice")
    answer = await approver.approve(question())
    assert answer.behavior == "allow"
    shown = out.getvalue()
    assert "general[/bold]" in shown and "Bash(make:*) [link=" in shown
    assert "\x1b]8" not in shown  # no hyperlink escape from the asked_by text either
    for raw in RAW_CONTROLS:
        assert raw not in shown
    assert "[a]llow once" in shown


async def test_approval_prompt_falls_back_to_plain_text(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    approver = TerminalApprover(stdin=io.StringIO("d\nnot now\n"), stdout=out, user="terminal:a")

    def broken(q: ApprovalQuestion) -> None:
        raise RuntimeError("rich broke")

    monkeypatch.setattr(approver, "_show_rich", broken)
    answer = await approver.approve(question())
    assert (answer.behavior, answer.reason) == ("deny", "not now")  # the person answered
    shown = out.getvalue()
    assert "approval needed" in shown and "[a]llow once" in shown
    assert "general[/bold]" in shown and "\x1b" not in shown


async def test_a_prompt_that_cannot_be_shown_says_so() -> None:
    class DeadTerminal(io.StringIO):
        def write(self, s: str) -> int:
            raise OSError("terminal gone")

    approver = TerminalApprover(stdin=io.StringIO("a\n"), stdout=DeadTerminal(), user="terminal")
    answer = await approver.approve(question())
    assert answer.behavior == "deny"
    assert "display failed" in answer.reason and "could not be shown" in answer.reason


# -- ps, logs, audit over a store holding hostile records -----------------------------


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    state_dir = tmp_path / "state"
    with Store.open(state_dir / "warden.db") as store:
        store.create_run("run1", prompt=HOSTILE, workspace="/ws", model="m", pid=os.getpid())
        store.create_task(
            TaskRecord(
                task_id="sa_1",
                run_id="run1",
                agent_type=f"evil{CLOSE_TAG}",
                description=HOSTILE,
                prompt="p",
            )
        )
        store.append_event("run1", "sa_1", "task_running", {"detail": HOSTILE})
        store.checkpoint_transcript(
            "sa_1",
            [
                {"role": f"assistant{CLOSE_TAG}{CLEAR}", "content": HOSTILE},
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "t", "content": HOSTILE}],
                },
            ],
            1,
        )
        store.record_audit(
            AuditRecord(
                run_id="run1",
                task_id="sa_1",
                agent_type=f"evil{CLOSE_TAG}",
                tool_name=f"Bash{CLOSE_TAG}",
                input_hash="abc",
                tool_input={"command": HOSTILE},
                decision="ask",
                final="deny",
                decided_by=f"hook {LINK}",
                source="cli",
            )
        )
    yield state_dir


def cli(state_dir: Path, *args: str) -> str:
    from orchestrator.cli import cli as warden

    result = CliRunner().invoke(
        warden, list(args), env={"WARDEN_STATE_DIR": str(state_dir), "COLUMNS": "400"}
    )
    assert result.exit_code == 0, result.output
    return result.output


def test_ps_shows_literal_text(state: Path) -> None:
    shown = cli(state, "ps")
    assert "evil[/bold]" in shown
    assert "[/bold] [link=http://127.0.0.1/]x[/link]" in shown  # the prompt, cut at 60
    for raw in RAW_CONTROLS:
        assert raw not in shown


def test_logs_shows_literal_text(state: Path) -> None:
    shown = cli(state, "logs", "sa_1")
    assert f"[assistant{CLOSE_TAG}\\x1b[2J]" in shown  # the role is container text too
    assert_inert(shown)  # the transcript blocks
    assert "\\u001b[2J" in shown  # event data is shown as its JSON


def test_audit_shows_literal_text(state: Path) -> None:
    shown = cli(state, "audit", "run1")
    assert "evil[/bold]" in shown and "Bash[/bold]" in shown
    assert "hook [link=http://127.0.0.1/]x[/link]" in shown
    assert "[/bold]" in shown
    for raw in RAW_CONTROLS:
        assert raw not in shown


def test_run_summary_table_shows_literal_text() -> None:
    from orchestrator.results.models import RunResult, TaskSummary
    from orchestrator.results.summary import print_summary

    task = TaskSummary(
        task_id="sa_1", parent_id=None, depth=1, agent_type=f"evil{CLOSE_TAG}",
        description=f"{LINK} {OSC8}", status="disk_limit", duration_s=1.0, tokens=1, turns=1,
        tool_calls=1, denials=0, asks=0, files_written=[], error=HOSTILE,
    )  # fmt: skip
    result = RunResult(
        run_id="run_1", status="completed", exit_code=0, result=HOSTILE, duration_s=1.0,
        tokens=1, tasks=[task], denials=[], fail_on=[], failed_on=[],
    )  # fmt: skip
    out = io.StringIO()
    print_summary(result, out)
    shown = out.getvalue()
    assert "evil[/bold]" in shown and "[link=http://127.0.0.1/]x[/link]" in shown
    for raw in RAW_CONTROLS:
        assert raw not in shown
