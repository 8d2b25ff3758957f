"""The Bash tool: runs `bash -c` in the workspace, reports output and exit code,
takes its timeout in milliseconds, kills the whole process group on timeout
(a backgrounded child does not survive), stops leftover background processes,
and caps its output with an announcement."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from sandbox_tools.tools import ToolContext, run_tool
from sandbox_tools.tools import bash as b


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(root=tmp_path.resolve(), bash_timeout_s=30)


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def test_runs_in_the_workspace_and_reports_output_and_exit_code(ctx: ToolContext) -> None:
    out = run_tool("Bash", {"command": "pwd; echo err >&2; exit 3"}, ctx)
    assert out.is_error
    assert out.text == f"{ctx.root}\nerr\n[exit code 3]"
    assert out.summary == "exit code 3"


def test_success_is_not_an_error(ctx: ToolContext) -> None:
    out = run_tool("Bash", {"command": "true", "description": "do nothing"}, ctx)
    assert not out.is_error
    assert out.text == "(no output)\n[exit code 0]"


def test_stdin_is_empty(ctx: ToolContext) -> None:
    out = run_tool("Bash", {"command": "cat; echo end"}, ctx)
    assert out.text.startswith("end")


def test_timeout_in_milliseconds_kills_the_whole_process_group(ctx: ToolContext) -> None:
    pidfile = ctx.root / "child.pid"
    started = time.monotonic()
    out = run_tool(
        "Bash",
        {"command": f"sleep 300 & echo $! > {pidfile}; echo started; sleep 300", "timeout": 500},
        ctx,
    )
    elapsed = time.monotonic() - started
    assert out.is_error
    assert "started" in out.text and "timed out after 0.5 s" in out.text
    assert elapsed < 2.0  # the timeout, not the drain timeout, decides
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child), "the backgrounded child survived the timeout"


def test_default_timeout_comes_from_the_spec(tmp_path: Path) -> None:
    ctx = ToolContext(root=tmp_path.resolve(), bash_timeout_s=0.3)
    out = run_tool("Bash", {"command": "sleep 10"}, ctx)
    assert out.is_error and "timed out after 0.3 s" in out.text


def test_background_processes_do_not_outlive_the_command(ctx: ToolContext) -> None:
    started = time.monotonic()
    out = run_tool("Bash", {"command": "sleep 300 & echo $!"}, ctx)
    assert time.monotonic() - started < 5
    assert not out.is_error
    assert "left running in the background were stopped" in out.text
    child = int(out.text.splitlines()[0])
    deadline = time.monotonic() + 5
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child)


@pytest.mark.parametrize("timeout", [0, -5, 600_001])
def test_timeout_outside_the_allowed_range_is_refused(ctx: ToolContext, timeout: int) -> None:
    out = run_tool("Bash", {"command": "true", "timeout": timeout}, ctx)
    assert out.is_error and "invalid input for Bash" in out.text and "timeout" in out.text


def test_output_is_capped_keeping_head_and_tail(ctx: ToolContext) -> None:
    out = run_tool(
        "Bash",
        {"command": "echo FIRST; head -c 1000000 /dev/zero | tr '\\0' x; echo; echo LAST"},
        ctx,
    )
    assert out.text.startswith("FIRST")
    assert "LAST\n[exit code 0]" in out.text
    assert "[output truncated:" in out.text and "bytes omitted from the middle" in out.text
    assert len(out.text) < b.BASH_OUTPUT_LIMIT + 500


def test_killed_by_signal_is_reported(ctx: ToolContext) -> None:
    out = run_tool("Bash", {"command": "kill -9 $$"}, ctx)
    assert out.is_error and "killed by signal 9" in out.text


def test_environment_is_inherited_but_cwd_is_the_workspace(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WARDEN_TEST_VAR", "v1")
    out = run_tool("Bash", {"command": "echo $WARDEN_TEST_VAR; ls"}, ctx)
    assert out.text.startswith("v1")
    assert os.getcwd() != str(ctx.root)


def test_closing_stdout_does_not_escape_the_timeout(ctx: ToolContext) -> None:
    started = time.monotonic()
    out = run_tool(
        "Bash", {"command": "echo before; exec >&- 2>&-; sleep 300", "timeout": 400}, ctx
    )
    assert time.monotonic() - started < 5
    assert out.is_error and "before" in out.text and "timed out" in out.text


def test_without_pidfd_the_fallback_still_works(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(b, "_pidfd", lambda _pid: None)
    assert run_tool("Bash", {"command": "echo ok"}, ctx).text == "ok\n[exit code 0]"
    out = run_tool("Bash", {"command": "sleep 300", "timeout": 300}, ctx)
    assert out.is_error and "timed out after 0.3 s" in out.text


def test_commands_are_the_oom_killers_first_choice_not_the_runner(ctx: ToolContext) -> None:
    """Under memory pressure the kernel kills a tool's process, never the runner that
    reports it: commands start with the highest oom_score_adj, the runner keeps its."""
    mine = Path("/proc/self/oom_score_adj").read_text().strip()
    out = run_tool(
        "Bash", {"command": "cat /proc/$$/oom_score_adj; cat /proc/$PPID/oom_score_adj"}, ctx
    )
    assert out.text.split("\n")[:2] == ["1000", mine]
    assert Path("/proc/self/oom_score_adj").read_text().strip() == mine


def test_the_shell_sets_its_own_oom_score_and_the_runner_never_carries_it(
    ctx: ToolContext,
) -> None:
    """The score is set in the child: while a command runs (and reads its parent's),
    the runner's own value is never raised, not even for a moment after the fork."""
    score = Path("/proc/self/oom_score_adj")
    own = score.read_text().strip()
    seen: set[str] = set()
    done = threading.Event()

    def watch() -> None:  # what the runner's own score was while it started commands
        while not done.is_set():
            seen.add(score.read_text().strip())

    watcher = threading.Thread(target=watch)
    watcher.start()
    command = (
        "cat /proc/$$/oom_score_adj /proc/$PPID/oom_score_adj; "
        "bash -c 'cat /proc/$$/oom_score_adj; echo \"env:${BASH_ENV-unset}\"'"
    )
    try:
        outs = [run_tool("Bash", {"command": command}, ctx) for _ in range(20)]
    finally:
        done.set()
        watcher.join()
    for out in outs:
        assert out.text.splitlines()[:4] == ["1000", own, "1000", "env:unset"], out.text
    assert seen == {own}
