"""Attacks on files from inside a real sandbox, through commands and paths the
policy allows: a write through `/dev/stdin` or `/dev/fd/N` reopens the file a
redirection gave that descriptor (the same commands rewrite the files when the
policy lets them run, so the attack is real), and in acceptEdits a Write to a
file git or an editor runs later (a nested `.git/config`, a `.git` file, a
`.vscode/tasks.json`, a sub-package `.npmrc`) asks, while an ordinary file is
written. Questions go to the non-interactive approver, which denies them."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import Settings
from orchestrator.permissions.approvers import NonInteractiveApprover
from orchestrator.runtime.tasks import TaskInput
from tests.integration.harness import convo, scripted_run, text, tool

pytestmark = pytest.mark.integration

UNPRIVILEGED = 1000
REOPEN = [
    "echo pwned 3<a.txt >/dev/fd/3",
    "ls <b.txt >/dev/stdin",
    "{ printf pwned >/dev/stdin; } <c.txt",
    "sh -c 'echo pwned >/dev/fd/4' 4<d.txt",
]
ALLOW = ("Bash(echo:*)", "Bash(ls:*)", "Bash(printf:*)")


def _plant(workspace: Path, names: list[str]) -> None:
    for name in names:
        path = workspace / name
        path.write_text("original\n")
        os.chown(path, UNPRIVILEGED, UNPRIVILEGED)


async def _run(
    settings: Settings, workspace: Path, calls: list[dict[str, object]], **kw: Any
) -> str:
    script = [convo("attacker", {"prompt_contains": "ATTACK"}, calls, [text("done")])]
    async with scripted_run(
        settings, workspace, script, approver=NonInteractiveApprover(), **kw
    ) as (run, _):
        result = await asyncio.wait_for(
            run.manager.run_task(TaskInput(description="t", prompt="ATTACK", subagent_type="bash")),
            timeout=120,
        )
    return result.text


@pytest.mark.parametrize("mode", ["default", "acceptEdits"])
async def test_a_write_through_a_descriptor_path_asks_and_the_file_is_kept(
    settings: Settings, workspace: Path, mode: str
) -> None:
    files = ["a.txt", "b.txt", "c.txt", "d.txt", ".gitconfig"]
    _plant(workspace, files)
    calls = [tool("Bash", command=c) for c in REOPEN]
    # in acceptEdits a workspace write is allowed, unless the file is one git runs
    if mode == "acceptEdits":
        calls = [tool("Bash", command="printf '[core]\\n\\tpager = touch x\\n' <.gitconfig >/dev/stdin")]
    await _run(settings, workspace, calls, mode=mode, allow=ALLOW)
    for name in files:
        assert (workspace / name).read_text() == "original\n", name


async def test_the_same_commands_do_rewrite_the_files_when_they_run(
    settings: Settings, workspace: Path
) -> None:
    files = ["a.txt", "b.txt", "c.txt", "d.txt"]
    _plant(workspace, files)
    await _run(
        settings, workspace, [tool("Bash", command=c) for c in REOPEN], mode="bypassPermissions"
    )
    changed = [n for n in files if (workspace / n).read_text() != "original\n"]
    assert changed == files


async def test_accept_edits_asks_before_writing_what_git_or_an_editor_runs(
    settings: Settings, workspace: Path
) -> None:
    for directory in ("sub/.git", "lib", "pkg", "src"):
        (workspace / directory).mkdir(parents=True)
    for root, dirs, _ in os.walk(workspace):
        for d in dirs:
            os.chown(os.path.join(root, d), UNPRIVILEGED, UNPRIVILEGED)
    writes = {
        "sub/.git/config": "[core]\n\tfsmonitor = touch pwned\n",
        "lib/.git": "gitdir: ../sub/.git\n",
        ".vscode/tasks.json": '{"tasks": [{"runOptions": {"runOn": "folderOpen"}}]}\n',
        "pkg/.npmrc": "script-shell=/tmp/x\n",
        "src/ok.py": "print('fine')\n",
    }
    calls = [tool("Write", file_path=p, content=c) for p, c in writes.items()]
    await _run(settings, workspace, calls, mode="acceptEdits")
    assert (workspace / "src" / "ok.py").read_text() == writes["src/ok.py"]
    for path in ("sub/.git/config", "lib/.git", ".vscode/tasks.json", "pkg/.npmrc"):
        assert not (workspace / path).exists(), path
