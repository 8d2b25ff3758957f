"""Faults at the edges, injected for real and answered without losing anything: a
model whose tool input is not an object (the parent answers with an error it can act
on, and the run goes on), a sandbox killed or stopped from outside (`docker kill`,
`docker stop`: reported as killed from outside, by whom when the engine says), and a
workspace whose file system is full or read-only (Write and Edit keep every file
whole and say what happened)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.backend.contract import DiskLimits
from orchestrator.config import Settings
from orchestrator.lifecycle import socket_dirs
from orchestrator.runtime.caps import TaskManagerConfig
from orchestrator.runtime.tasks import TaskInput, TaskStatus
from orchestrator.store import DB_FILENAME, Store
from sandbox_tools.tools.replace import TEMP_PREFIX
from tests.conftest import (
    UNPRIVILEGED,
    result_document,
    run_warden,
    warden_argv,
    warden_env,
    write_script,
)
from tests.integration.harness import (
    PARENT_MATCH,
    a_victim_running,
    containers_of,
    convo,
    requests_of,
    scripted_run,
    task,
    text,
    tool,
    until,
    until_made,
)

pytestmark = pytest.mark.integration


async def test_a_tool_input_that_is_a_string_gets_an_error_result_and_the_run_goes_on(
    settings: Settings, workspace: Path
) -> None:
    malformed = {"type": "tool_use", "name": "Task", "input": '{"prompt": "cut off'}
    script = [
        convo(
            "parent",
            PARENT_MATCH,
            [malformed],
            [text("parent saw: {last_tool_result}")],
        )
    ]
    async with scripted_run(settings, workspace, script) as (run, server):
        result = await run.parent.run("go")
    assert "parent saw: Invalid Task call: its input must be a JSON object" in result.text
    assert "it was not run" in result.text
    second = requests_of(server, "parent")[1].body["messages"]
    [echoed] = [b for b in second[1]["content"] if b["type"] == "tool_use"]
    assert echoed["input"] == {}  # what the API accepts; the string was not sent back
    assert not run.manager.tasks


@pytest.mark.parametrize(
    ("command", "said"),
    [
        (["docker", "kill"], "killed from outside warden by `docker kill` (SIGKILL"),
        (["docker", "stop", "-t", "1"], "stopped from outside warden by `docker stop` (SIGTERM"),
        (warden_argv("stop"), None),
    ],
    ids=["docker-kill", "docker-stop", "warden-stop"],
)
async def test_a_sandbox_killed_from_outside_says_by_what(
    settings: Settings, workspace: Path, command: list[str], said: str | None
) -> None:
    async with a_victim_running(settings, workspace) as victim:
        run, running = victim.run, victim.running
        target = victim.task_id if said is None else victim.container_id
        env = warden_env(WARDEN_STATE_DIR=str(settings.state_dir))
        await asyncio.to_thread(
            subprocess.run, [*command, target], check=True, capture_output=True, env=env
        )
        killed_at = time.monotonic()
        result = await asyncio.wait_for(running, 60)
        clean_s = time.monotonic() - killed_at
        stored = run.store.get_task(result.task_id)
        transcript = run.store.get_transcript(result.task_id)
    if said is None:  # warden's own stop, from another process: a stop, as asked
        assert result.status is TaskStatus.STOPPED and stored.status == "stopped"
    else:
        assert result.status is TaskStatus.FAILED and stored.status == "failed"
        assert result.error is not None and said in result.error
        assert "resume the session" in result.error and stored.error == result.error
    assert transcript, "the transcript so far is kept"
    assert containers_of(run.session) == []
    assert clean_s < 30


async def test_warden_stop_of_a_task_still_queued_stops_it_before_it_runs(
    settings: Settings, workspace: Path
) -> None:
    """`warden stop` from another process, of a task that is queued (or starting): it
    has no container to kill yet. It said "stopped 1 task(s)", and the task then
    started and ran to the end."""
    script = [
        convo(
            "first",
            {"prompt_contains": "FIRST"},
            [tool("Bash", command="touch first.txt; sleep 300", timeout=600000)],
            [text("never")],
        ),
        convo(
            "second",
            {"prompt_contains": "SECOND"},
            [tool("Bash", command="touch second.txt")],
            [text("second ran")],
        ),
    ]
    one_at_a_time = replace(settings, max_concurrent=1)
    env = warden_env(WARDEN_STATE_DIR=str(settings.state_dir))

    def warden_stop(task_id: str) -> str:
        done = subprocess.run(
            warden_argv("stop", task_id), capture_output=True, text=True, env=env, timeout=120
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    async with scripted_run(one_at_a_time, workspace, script) as (run, _):
        first = asyncio.create_task(
            run.manager.run_task(TaskInput(description="1", prompt="FIRST", subagent_type="bash"))
        )
        await until_made(workspace / "first.txt", first)
        second = asyncio.create_task(
            run.manager.run_task(TaskInput(description="2", prompt="SECOND", subagent_type="bash"))
        )
        # Queued behind the first: recorded `pending`, no container.
        await until(
            lambda: second.done()
            or any(t.description == "2" for t in run.store.list_tasks(run_id=run.run_id)),
            120,
            "the second task being recorded",
        )
        assert not second.done()
        queued = next(c for c in run.manager.tasks.values() if c.description == "2")
        assert run.store.get_task(queued.task_id).status == "pending"
        said = await asyncio.to_thread(warden_stop, queued.task_id)
        assert f"stopped 1 task(s): {queued.task_id}" in said
        running = next(c for c in run.manager.tasks.values() if c.description == "1")
        await asyncio.to_thread(warden_stop, running.task_id)  # the slot frees
        stopped = await asyncio.wait_for(second, 120)
        await asyncio.wait_for(first, 60)
        stored = run.store.get_task(stopped.task_id)
    assert stopped.status is TaskStatus.STOPPED and stored.status == "stopped"
    assert not (workspace / "second.txt").exists(), "the stopped task ran its command"
    assert containers_of(run.session) == []


RESUMED_TURNS = (
    [text("first answer")],
    [tool("Bash", command="true")],
    [text("resumed and done")],
)


def test_two_resumes_of_one_session_at_once_one_runs_the_other_is_refused(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    first = write_script(
        tmp_path / "first.yaml",
        [
            convo("parent", PARENT_MATCH, [task("KEEPER start", "bash")], [text("started")]),
            convo("keeper", {"prompt_contains": "KEEPER"}, *RESUMED_TURNS),
        ],
    )
    ran = run_warden(
        settings, "run", "go", "--replay", str(first), "--workspace", str(workspace), "--json"
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    (keeper,) = result_document(ran)["tasks"]
    # The continuation's first model call takes a while, so the two overlap for sure.
    slow = convo("keeper", {"prompt_contains": "KEEPER"}, *RESUMED_TURNS)
    slow["turns"][1]["delay_s"] = 8
    again = write_script(tmp_path / "again.yaml", [slow])
    argv = warden_argv("resume", keeper["task_id"], "go on", "--replay", str(again), "--json")
    env = warden_env(
        WARDEN_STATE_DIR=str(settings.state_dir),
        WARDEN_CONFIG_DIR=str(settings.config_dir),
        CLAUDE_CONFIG_DIR=str(settings.claude_dir),
        CI="true",
    )
    procs = [
        subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]  # fmt: skip
    done = [p.communicate(timeout=300) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 1], done
    winner, loser = (done[0], done[1]) if procs[0].returncode == 0 else (done[1], done[0])
    assert json.loads(winner[0].splitlines()[-1])["result"] == "resumed and done"
    refused = json.loads(loser[0].splitlines()[-1])
    assert "is already being continued by task" in refused["error"]
    assert "warden pid" in refused["error"] and "Traceback" not in loser[1]
    with Store.open(settings.state_dir / DB_FILENAME) as store:
        session = store.list_tasks(session_id=keeper["task_id"])
        bash_calls = [a for a in store.audit() if a.tool_name == "Bash"]
    assert len(session) == 2  # the first task and one continuation
    assert len(bash_calls) == 1  # the resumed tool call was put to the gate once
    assert containers_of(keeper["task_id"]) == []
    # Whichever made the .git placeholder, it stayed while the other was live (the
    # loser's end did not pull it from under the winner's sandbox) and went after.
    assert not (workspace / ".git").exists()


FILL_MIDRUN = """
set -u
mount -t tmpfs -o size=8m tmpfs "$STATE_FS"
mkdir "$STATE_FS/state"
WARDEN_STATE_DIR="$STATE_FS/state" "$@" >"$OUT" 2>"$ERR" &
pid=$!
while [ ! -e "$WORKSPACE/started" ]; do sleep 0.05; done
dd if=/dev/zero of="$STATE_FS/fill" bs=4k 2>/dev/null
date +%s.%N >"$FILLED"
wait $pid
"""
"""Runs warden with its state dir on a small tmpfs in a private mount namespace, and
fills that file system while a subagent's command runs."""


@pytest.mark.parametrize("json_mode", [True, False], ids=["json", "text"])
def test_a_state_disk_that_fills_mid_run_ends_with_one_error_exit_1_and_a_result(
    settings: Settings, workspace: Path, tmp_path: Path, json_mode: bool
) -> None:
    script = write_script(
        tmp_path / "fill.yaml",
        [
            convo("parent", PARENT_MATCH, [task("FILLER go", "bash")], [text("parent done")]),
            convo(
                "filler",
                {"prompt_contains": "FILLER"},
                [tool("Bash", command="touch started; sleep 3")],
                [tool("Bash", command="echo second")],
                [text("filler done")],
            ),
        ],
    )
    state_fs, out, err, filled = (tmp_path / n for n in ("statefs", "out", "err", "filled"))
    state_fs.mkdir()
    argv = warden_argv("run", "go", "--replay", str(script), "--workspace", str(workspace))
    argv += ["--allow", "Bash", *(["--json"] if json_mode else [])]
    sockets_before = set(socket_dirs.socket_root().glob("warden-sock-*"))
    env = warden_env(
        STATE_FS=str(state_fs), OUT=str(out), ERR=str(err), FILLED=str(filled),
        WORKSPACE=str(workspace), CI="true", WARDEN_CONFIG_DIR=str(settings.config_dir),
        CLAUDE_CONFIG_DIR=str(settings.claude_dir), TMPDIR="/tmp",
    )  # fmt: skip
    proc = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", FILL_MIDRUN, "sh", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    clean_s = time.time() - float(filled.read_text())
    stderr, stdout = err.read_text(), out.read_text()
    assert proc.returncode == 1, (proc.stderr, stderr)
    errors = [line for line in stderr.splitlines() if line.startswith("warden: error:")]
    assert len(errors) == 1 and "free disk space" in errors[0], stderr
    assert "Traceback" not in stderr and "could not" not in stderr, stderr
    if json_mode:
        final = json.loads(stdout.splitlines()[-1])
        assert final["type"] == "result" and final["status"] == "failed"
        assert final["exit_code"] == 1 and "free disk space" in final["error"]
        run_id = final["run_id"]
    else:
        both = stdout + stderr
        assert ": failed" in both, both
        run_id = "run_" + both.split("run run_", 1)[1].split(":", 1)[0].split(";")[0]
    assert containers_of(run_id) == []
    # The run's socket directories are gone. Others made meanwhile belong to live
    # processes (the tests running beside this one); one whose owner is dead was left.
    made = set(socket_dirs.socket_root().glob("warden-sock-*")) - sockets_before
    left = {d for d in made if d.is_dir() and socket_dirs._dead_owners(socket_dirs.marker_of(d), d)}
    assert left == set()
    assert clean_s < 60


ORIGINAL = "original line\n" * 2000  # 28 KB: more than the 4 KB a truncation used to keep


@pytest.fixture
def full_workspace(tmp_path: Path) -> Iterator[Path]:
    """A workspace on its own 1 MiB tmpfs (mounted where the engine sees it, unmounted
    after), holding a.txt and b.txt, then filled to the last block."""
    ws = tmp_path / "fullws"
    ws.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size=1m,uid={UNPRIVILEGED},gid={UNPRIVILEGED}",
         "tmpfs", str(ws)],
        check=True,
    )  # fmt: skip
    try:
        for name in ("a.txt", "b.txt"):
            (ws / name).write_text(ORIGINAL)
            os.chown(ws / name, UNPRIVILEGED, UNPRIVILEGED)
        with contextlib.suppress(OSError), (ws / "filler").open("wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
        yield ws
    finally:
        subprocess.run(["umount", "-l", str(ws)], check=False)


async def test_write_and_edit_on_a_full_workspace_keep_every_file_whole(
    settings: Settings, full_workspace: Path
) -> None:
    ws = full_workspace
    script = [
        convo(
            "writer",
            {"prompt_contains": "WRITER"},
            [
                tool("Write", file_path="/workspace/a.txt", content="new " * 20000),
                tool(
                    "Edit",
                    file_path="/workspace/b.txt",
                    old_string="original",
                    new_string="x" * 40,
                    replace_all=True,
                ),
            ],
            [text("writer saw: {tool_results}")],
        )
    ]
    config = TaskManagerConfig(disk=DiskLimits(free_floor_bytes=0))
    async with scripted_run(settings, ws, script, config=config) as (run, _):
        result = await run.manager.run_task(
            TaskInput(description="w", prompt="WRITER", subagent_type="general-purpose")
        )
        session = run.session
    assert result.status is TaskStatus.COMPLETED, result.error
    assert result.text.count("no space left on the device") == 2, result.text
    assert "a.txt is unchanged" in result.text and "b.txt is unchanged" in result.text
    assert "internal error" not in result.text and "bug in the runner" not in result.text
    assert (ws / "a.txt").read_text() == ORIGINAL
    assert (ws / "b.txt").read_text() == ORIGINAL
    assert [p.name for p in ws.iterdir() if p.name.startswith(TEMP_PREFIX)] == []
    assert containers_of(session) == []


def test_a_build_killed_midway_leaves_nothing_the_next_build_keeps(tmp_path: Path) -> None:
    """SIGKILL between the probe container's create and remove, or while a build
    context sits in the temp dir: both carry the dead builder's identity, and the next
    build removes them (a live builder's are kept)."""
    import docker

    from orchestrator import owner
    from orchestrator.images.build import CONTEXT_PREFIX, _remove_leftovers
    from orchestrator.labels import warden_labels

    client = docker.from_env()
    dead = subprocess.Popen(["sleep", "0"])
    dead_owner = owner.Owner(**{**owner.current(tmp_path).__dict__, "pid": dead.pid})
    dead.wait()  # the builder is gone; its pid is not reused this soon
    image = next(t for i in client.images.list() for t in i.tags if t.startswith("warden-agent:"))
    probe = client.containers.create(
        image, command=["true"], labels={**warden_labels("images-probe-x", images="probe"),
                                         **dead_owner.labels()},
    )  # fmt: skip
    assert probe.id is not None
    tmp = Path(os.environ.get("TMPDIR", "/tmp"))
    left = tmp / (CONTEXT_PREFIX.format(kind="agent", pid=dead.pid) + "x")
    mine = tmp / (CONTEXT_PREFIX.format(kind="agent", pid=os.getpid()) + "y")
    left.mkdir()
    mine.mkdir()
    said: list[str] = []
    try:
        _remove_leftovers(client, said.append)
        remaining = [
            c.id
            for c in client.containers.list(ignore_removed=True, all=True, filters={"id": probe.id})
        ]
        assert remaining == [] and not left.exists() and mine.exists()
        assert any("probe container" in s for s in said) and any("context" in s for s in said)
    finally:
        with contextlib.suppress(Exception):
            probe.remove(force=True)
        for path in (left, mine):
            if path.exists():
                path.rmdir()
        client.close()
