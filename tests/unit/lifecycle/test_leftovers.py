"""Temporary files of Write/Edit calls a killed sandbox left are removed by the
commands that clean up after a death, and nothing else is: only regular files whose
whole name is warden's, never through a link; `warden ps` after a crash sweeps the
dead run's workspace."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from orchestrator import owner
from orchestrator.config import Settings
from orchestrator.lifecycle.leftovers import TEMP_NAME, remove_temp_leftovers
from orchestrator.lifecycle.recovery import open_store
from orchestrator.store import DB_FILENAME, Store
from sandbox_tools.tools import replace


def test_the_pattern_is_the_tools_own() -> None:
    made = f"{replace.TEMP_PREFIX}{os.urandom(6).hex()}"
    assert TEMP_NAME.fullmatch(made)
    assert not TEMP_NAME.fullmatch(f"{replace.TEMP_PREFIX}{os.urandom(7).hex()}")


def test_only_warden_temporary_files_go_and_no_link_is_followed(tmp_path: Path) -> None:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    (ws / "sub").mkdir(parents=True)
    outside.mkdir()
    mine = [ws / ".warden-tmp-0123456789ab", ws / "sub" / ".warden-tmp-abcdefabcdef"]
    for path in mine:
        path.write_text("half")
    kept = [ws / ".warden-tmp-xyz", ws / "notes.warden-tmp-0123456789ab", ws / "a.txt"]
    for path in kept:
        path.write_text("keep")
    target = outside / "secret"
    target.write_text("secret")
    (ws / ".warden-tmp-aaaaaaaaaaaa").symlink_to(target)  # a link: not a file of ours
    (outside / ".warden-tmp-bbbbbbbbbbbb").write_text("outside")
    (ws / "elsewhere").symlink_to(outside, target_is_directory=True)
    os.mkfifo(ws / ".warden-tmp-cccccccccccc")

    removed = remove_temp_leftovers(ws)

    assert sorted(removed) == sorted(str(p) for p in mine)
    assert not any(p.exists() for p in mine)
    assert all(p.exists() for p in kept)
    assert (ws / ".warden-tmp-aaaaaaaaaaaa").is_symlink() and target.read_text() == "secret"
    assert (outside / ".warden-tmp-bbbbbbbbbbbb").exists()
    assert (ws / ".warden-tmp-cccccccccccc").exists()


def test_ps_after_a_crash_sweeps_the_dead_runs_workspace(
    settings: Settings, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    leftover = ws / ".warden-tmp-0123456789ab"
    leftover.write_text("half")
    child = subprocess.Popen(["sleep", "0"])  # the run's owner: a process that has exited
    start = owner.process_start(child.pid) or 1
    child.wait()
    dead = owner.Owner(owner.host_id(), owner.boot_id(), child.pid, start, "st_gone")
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    with Store.open(settings.state_dir / DB_FILENAME) as store:
        store.create_run(
            "run_dead", prompt="p", workspace=str(ws), model="m", pid=child.pid,
            owner=dead.to_json(),
        )  # fmt: skip
    with open_store(settings) as store:  # what `warden ps` does first
        assert store.get_run("run_dead").status == "interrupted"
    assert not leftover.exists()
