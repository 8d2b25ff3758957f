"""Background shells: `Bash` with `run_in_background` returns a shell id at once and
the command keeps running after the call; `TaskOutput` hands over only what is new
(waiting for the end when asked, never past its timeout) and how the shell ended;
unread output is bounded with an announcement; `TaskStop` kills the whole process
group; the watchdog's `kill_running_tools` ends every background shell."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_tools.tools import ToolContext, kill_running_tools, run_tool, shells
from tests.unit.sandbox_tools.test_bash import alive


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[ToolContext]:
    yield ToolContext(root=tmp_path.resolve(), bash_timeout_s=30)
    shells.kill_running()
    for shell in shells._table.shells.values():
        shell.proc.wait()
        shell.eof.wait()
    shells._table.shells.clear()


def wait_for(path: Path) -> str:
    deadline = time.monotonic() + 30
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < deadline, f"{path} never written"
        time.sleep(0.01)
    return path.read_text().strip()


def test_background_command_outlives_the_call_and_its_output_is_read_later(
    ctx: ToolContext,
) -> None:
    gate = ctx.root / "go"
    started = run_tool(
        "Bash",
        {
            "command": f"echo first; while [ ! -e {gate} ]; do sleep 0.01; done; echo second",
            "run_in_background": True,
            "description": "wait for the gate",
        },
        ctx,
    )
    assert not started.is_error
    assert "ID: bash_1" in started.text
    first = run_tool("TaskOutput", {"task_id": "bash_1", "block": True, "timeout": 300}, ctx)
    assert first.text.splitlines() == ["first", "[bash_1: running; still running after 0 s]"]
    assert first.summary == "running" and not first.is_error
    gate.touch()
    done = run_tool("TaskOutput", {"task_id": "bash_1"}, ctx)
    assert done.text.splitlines() == ["second", "[bash_1: exit code 0]"]
    again = run_tool("TaskOutput", {"task_id": "bash_1", "block": False}, ctx)
    assert again.text.splitlines() == ["(no new output)", "[bash_1: exit code 0]"]


def test_a_failing_background_command_reports_its_exit_code(ctx: ToolContext) -> None:
    run_tool("Bash", {"command": "echo oops >&2; exit 4", "run_in_background": True}, ctx)
    out = run_tool("TaskOutput", {"task_id": "bash_1"}, ctx)
    assert out.is_error and out.text.splitlines() == ["oops", "[bash_1: exit code 4]"]


def test_task_stop_kills_the_whole_process_group(ctx: ToolContext) -> None:
    pidfile = ctx.root / "child.pid"
    run_tool(
        "Bash",
        {"command": f"sleep 300 & echo $! > {pidfile}; sleep 300", "run_in_background": True},
        ctx,
    )
    child = int(wait_for(pidfile))
    assert alive(child)
    out = run_tool("TaskStop", {"task_id": "bash_1"}, ctx)
    assert not out.is_error and out.text.startswith("Successfully stopped task: bash_1")
    deadline = time.monotonic() + 10
    while alive(child):
        assert time.monotonic() < deadline, "the shell's child survived TaskStop"
        time.sleep(0.01)
    status = run_tool("TaskOutput", {"task_id": "bash_1", "block": False}, ctx)
    assert status.text.endswith("[bash_1: stopped]")
    assert run_tool("TaskStop", {"shell_id": "bash_1"}, ctx).is_error  # already ended


def test_kill_running_tools_ends_every_background_shell(ctx: ToolContext) -> None:
    pidfile = ctx.root / "pid"
    run_tool(
        "Bash", {"command": f"echo $$ > {pidfile}; exec sleep 300", "run_in_background": True}, ctx
    )
    pid = int(wait_for(pidfile))
    kill_running_tools()
    deadline = time.monotonic() + 10
    while alive(pid):
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_unread_output_is_bounded_and_the_loss_announced(ctx: ToolContext) -> None:
    run_tool(
        "Bash", {"command": "head -c 100000 /dev/zero | tr '\\0' x", "run_in_background": True}, ctx
    )
    out = run_tool("TaskOutput", {"task_id": "bash_1"}, ctx)
    assert f"{100_000 - shells.UNREAD_OUTPUT_LIMIT} earlier bytes were dropped unread" in out.text
    assert out.text.splitlines()[1] == "x" * shells.UNREAD_OUTPUT_LIMIT


def test_blocking_read_stops_at_its_timeout(ctx: ToolContext) -> None:
    run_tool("Bash", {"command": "sleep 300", "run_in_background": True}, ctx)
    started = time.monotonic()
    out = run_tool("TaskOutput", {"task_id": "bash_1", "timeout": 100}, ctx)
    assert time.monotonic() - started < 20
    assert out.summary == "running"


def test_unknown_ids_and_the_shell_cap_are_refused_clearly(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = run_tool("TaskOutput", {"task_id": "bash_9"}, ctx)
    assert out.is_error and "no background shell 'bash_9' (this agent's shells: none)" in out.text
    assert "give the task_id" in run_tool("TaskStop", {}, ctx).text
    monkeypatch.setattr(shells, "MAX_BACKGROUND_SHELLS", 1)
    run_tool("Bash", {"command": "true", "run_in_background": True}, ctx)
    refused = run_tool("Bash", {"command": "true", "run_in_background": True}, ctx)
    assert refused.is_error and "already started 1 background shells" in refused.text
