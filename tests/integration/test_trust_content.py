"""Locks in that trust binds to content: what a sandbox writes where a dev container
lives is refused by the read-only mount, and what changes beside it (by a sandbox
or anyone) unlocks nothing in the next run until a person says yes again (issue 33's
attack: run 1's subagent plants a dev container, run 2 would build and use it)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from orchestrator.config import Settings
from orchestrator.workspace.trust import is_trusted, remember
from tests.integration.harness import scripted_run
from tests.integration.project_fixtures import chown_tree, project_workspace
from tests.integration.test_project_images import PERSON_ALLOWS, delegate

pytestmark = pytest.mark.integration

PLANT = (
    "mkdir -p /workspace/.devcontainer 2>/dev/null; "
    '(printf \'{"build": {"dockerfile": "Dockerfile"}}\' '
    "> /workspace/.devcontainer/devcontainer.json) 2>/dev/null && echo WROTE-DIR || echo REFUSED-DIR; "
    "(printf 'FROM x\\nRUN python3 plant.py\\n' > /workspace/.devcontainer/Dockerfile) 2>/dev/null "
    "&& echo WROTE-DOCKERFILE || echo REFUSED-DOCKERFILE; "
    '(printf \'{"image": "warden-planted-never-exists"}\' > /workspace/.devcontainer.json) '
    "2>/dev/null && echo WROTE-ROOT || echo REFUSED-ROOT"
)
"""Run 1's subagent: every place a dev container is looked for (`images.devcontainer`)."""


async def test_a_dev_container_planted_by_run_one_is_not_used_by_run_two(
    settings: Settings, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    project_workspace(workspace)
    (workspace / ".claude" / "settings.json").write_text(
        json.dumps({"permissions": {"allow": ["Bash(echo:*)"]}})
    )
    chown_tree(workspace)
    remember(settings, workspace)  # the person's yes, to this content
    assert is_trusted(settings, workspace)

    # Run 1: trusted by the record; the person even says yes to the command.
    async with scripted_run(
        settings, workspace, delegate(PLANT), trusted=None, approver=PERSON_ALLOWS
    ) as (run, _):
        result = await run.parent.run("plant")
        assert run.watch is not None
        report = run.watch.report()
    assert "REFUSED-DIR" in result.text and "REFUSED-DOCKERFILE" in result.text, result.text
    assert not (workspace / ".devcontainer" / "devcontainer.json").exists()
    # The root file is not there to mount read-only: the sandbox could write it ...
    assert "WROTE-ROOT" in result.text, result.text
    # ... and the end of the run says it needs a person's review.
    assert report.trust_review == [".devcontainer.json"]
    assert any("needs your review before it takes effect" in line for line in report.render())

    # Run 2, no flag: the record's content no longer matches, so nothing of the
    # workspace's unlocks, and the planted dev container is neither built nor used
    # (used, its image would not exist and the run would not start).
    assert not is_trusted(settings, workspace)
    caplog.set_level(logging.WARNING)
    async with scripted_run(settings, workspace, delegate("echo ran"), trusted=None) as (run, _):
        result = await run.parent.run("run it")
    assert "ran" in result.text, result.text
    assert "the dev container is not used: the workspace is not trusted" in caplog.text


async def test_a_run_reads_each_settings_file_once(
    settings: Settings, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One snapshot per run (`workspace.inputs`): the policy, hooks, agent registry,
    egress rules, protected paths and trust verdict all decide from one read of each
    settings file, so a file changed while a run starts is never seen two ways."""
    from orchestrator.permissions import settings_files

    project_workspace(workspace)
    (workspace / ".claude" / "settings.json").write_text(
        json.dumps(
            {
                "permissions": {"allow": ["Bash(echo:*)"], "deny": ["Read(./.env)"]},
                "warden": {"protect": ["keep"]},
                "sandbox": {"network": {"allowedDomains": ["docs.test"]}},
            }
        )
    )
    (workspace / ".claude" / "settings.local.json").write_text('{"permissions": {}}')
    settings.config_dir.mkdir(parents=True, exist_ok=True)
    (settings.config_dir / "settings.json").write_text('{"warden": {"protect": ["keep"]}}')
    chown_tree(workspace)
    remember(settings, workspace)
    reads: list[str] = []
    real = settings_files.read_settings

    def counted(path: Path, *args: object, **kwargs: object) -> object:
        reads.append(str(path))
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(settings_files, "read_settings", counted)
    async with scripted_run(settings, workspace, delegate("echo ran"), trusted=None) as (run, _):
        result = await run.parent.run("run it")
    assert "ran" in result.text, result.text
    existing = [p for p in reads if Path(p).exists()]
    assert existing and len(existing) == len(set(existing)), reads
