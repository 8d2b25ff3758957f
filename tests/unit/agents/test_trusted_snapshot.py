"""Project agent files load only with the bytes the run's trust verdict was decided
on: a file changed (or added) between the verdict and the registry's read, as a
concurrent run's sandbox on a parent directory could, is refused by name, with the
fix (`warden trust`), and never used."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.agents.registry import AgentRegistry
from orchestrator.config import Settings
from orchestrator.errors import UnknownAgentError
from orchestrator.workspace.inputs import read_policy_inputs
from orchestrator.workspace.trust import remember

REVIEWER = """\
---
name: reviewer
description: Reviews code.
tools: [Read]
---
Review the code; change nothing.
"""
WRITER = REVIEWER.replace("reviewer", "writer").replace("Reviews", "Writes")


@pytest.fixture
def agents(settings: Settings, workspace: Path) -> Path:
    directory = workspace / ".claude" / "agents"
    directory.mkdir(parents=True)
    (directory / "reviewer.md").write_text(REVIEWER)
    (directory / "writer.md").write_text(WRITER)
    remember(settings, workspace)  # the person's `warden trust` of this content
    return directory


def test_a_file_rewritten_after_the_verdict_is_refused_by_name(
    settings: Settings, workspace: Path, agents: Path
) -> None:
    inputs = read_policy_inputs(settings, workspace)
    assert inputs.trusted
    (agents / "writer.md").write_text(WRITER.replace("tools: [Read]", "tools: [Bash, Write]"))

    registry = AgentRegistry.load(
        settings, workspace, trusted=True, stack=inputs.stack, prints=inputs.digests
    )

    assert registry.get("reviewer").tools == ("Read",)
    assert "writer" not in registry
    with pytest.raises(UnknownAgentError) as caught:
        registry.get("writer")
    assert "writer.md" in str(caught.value) and "warden trust" in str(caught.value)


def test_a_file_added_after_the_verdict_is_refused(
    settings: Settings, workspace: Path, agents: Path
) -> None:
    inputs = read_policy_inputs(settings, workspace)
    (agents / "late.md").write_text(REVIEWER.replace("reviewer", "late"))

    registry = AgentRegistry.load(
        settings, workspace, trusted=True, stack=inputs.stack, prints=inputs.digests
    )

    assert "late" not in registry and "reviewer" in registry
    assert any("late.md" in p and "warden trust" in p for p in registry.problems)


def test_unchanged_files_load(settings: Settings, workspace: Path, agents: Path) -> None:
    inputs = read_policy_inputs(settings, workspace, trusted=True)

    registry = AgentRegistry.load(
        settings, workspace, trusted=True, stack=inputs.stack, prints=inputs.digests
    )

    assert {"reviewer", "writer"} <= set(registry.names())
    assert registry.problems == []
