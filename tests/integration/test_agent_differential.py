"""A warden subagent's first model request carries what the pinned Claude Code's
subagent's first request carries, for the same agent files and project: the same
tools (names and input schemas, apart from a documented list), the same system
prompt parts and first-message parts in the same order, the same model.

Claude Code (2.1.197, from npm) runs offline in a network namespace with only
`lo`, against warden's scripted model; warden runs for real (engine, images,
runner, broker, real anthropic SDK), against the scripted model too. The figure
(parts agreeing / checked) is printed; every disagreement is listed on failure."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import Settings
from tests.differential import agents as diff
from tests.differential import compare as differential
from tests.integration.harness import PARENT_MATCH, convo, requests_of, scripted_run, text, tool

pytestmark = pytest.mark.integration

MIN_AGREEMENT = 0.9


def _lay_out(case: dict[str, Any], ws: Path, claude_dir: Path) -> None:
    owner = ws.stat()
    for rel, content in case.get("files", {}).items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(content)
    for rel, content in case.get("home_files", {}).items():
        path = claude_dir / Path(rel).relative_to(".claude")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    if case.get("git"):
        env = {"PATH": "/usr/bin:/bin", "HOME": str(ws.parent), "GIT_CONFIG_NOSYSTEM": "1"}
        for argv in (["git", "init", "-q", "-b", "main"], ["git", "add", "-A"],
                     ["git", "-c", "user.name=d", "-c", "user.email=d@e", "commit", "-qm",
                      "initial commit"]):  # fmt: skip
            argv = [argv[0], "-c", "safe.directory=*", *argv[1:]]
            subprocess.run(argv, cwd=ws, env=env, check=True, capture_output=True)
        for rel, content in case.get("dirty_files", {}).items():
            (ws / rel).write_text(content)
    for root, dirs, files in os.walk(ws):
        for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
            os.lchown(name, owner.st_uid, owner.st_gid)


async def _warden_requests(case: dict[str, Any], tmp_path: Path) -> list[dict[str, Any]]:
    ws = tmp_path / case["id"] / "workspace"
    ws.mkdir(parents=True)
    os.chown(ws, 1000, 1000)
    settings = Settings(
        state_dir=tmp_path / case["id"] / "state",
        config_dir=tmp_path / case["id"] / "config",
        claude_dir=tmp_path / case["id"] / "claude",
    )
    _lay_out(case, ws, settings.claude_dir)
    task_input = {**case["task"], "prompt": f"{diff.CHILD_MARK} {case['task']['prompt']}"}
    script = [
        convo("parent", PARENT_MATCH, [tool("Task", **task_input)], [text("parent done")]),
        convo(
            "child",
            {"prompt_contains": diff.CHILD_MARK},
            *[t["content"] for t in case.get("child_turns", [])] or [[text("child done")]],
        ),
    ]
    async with scripted_run(settings, ws, script, model=case["parent_model"]) as (run, server):
        await run.parent.run("delegate it")
    child = requests_of(server, "child")
    assert child, f"{case['id']}: warden's subagent made no request"
    return [r.body for r in child]


async def test_subagent_first_requests_agree_with_claude_code(tmp_path: Path) -> None:
    assert os.geteuid() == 0, "the differential needs root for unshare -n -m"
    claude = differential.claude_binary()
    day = diff.today()
    results = []
    for case in diff.all_cases():
        claude_out = diff.claude_request(case, claude)
        claude_parts = diff.parts(claude_out["child"], day, claude_out.get("children"))
        bodies = await _warden_requests(case, tmp_path)
        warden_parts = diff.parts(bodies[0], day, bodies)
        results.append(diff.compare_parts(case["id"], claude_parts, warden_parts))
    checked = sum(r.checked for r in results)
    agreed = sum(r.agreed for r in results)
    report = "\n".join(
        f"{r.id}: {r.agreed}/{r.checked}" + "".join(f"\n  - {d}" for d in r.differences)
        for r in results
    )
    print(f"\nsubagent request agreement: {agreed}/{checked} ({agreed / checked:.1%})\n{report}")
    assert agreed / checked >= MIN_AGREEMENT, report
