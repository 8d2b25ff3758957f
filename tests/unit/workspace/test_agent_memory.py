"""Agent memory on the host: its directory is made where Claude Code keeps it, never
through a link, owned by the sandbox's user and mounted read-write at the same
path; its index is read without following a symbolic link or a second name (hard
link), bounded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.errors import UnsafeMountError
from orchestrator.workspace import agent_memory


def test_project_and_local_memory_are_made_and_mounted_where_claude_code_keeps_them(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    (ws / ".claude").mkdir(parents=True)
    mount = agent_memory.memory_mount(ws, "project", "code reviewer", (os.getuid(), os.getgid()))
    assert mount.source == ws / ".claude" / "agent-memory" / "code-reviewer"
    assert mount.target == "/workspace/.claude/agent-memory/code-reviewer"
    assert not mount.read_only and mount.confined_to == ws
    assert mount.source.is_dir()
    local = agent_memory.memory_mount(ws, "local", "x", (os.getuid(), os.getgid()))
    assert local.target == "/workspace/.claude/agent-memory-local/x"
    with pytest.raises(ValueError):
        agent_memory.memory_mount(ws, "user", "x", (0, 0))


def test_a_link_on_the_way_to_memory_is_refused(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / ".claude").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (ws / ".claude" / "agent-memory").symlink_to(elsewhere)
    with pytest.raises(UnsafeMountError, match="not a directory"):
        agent_memory.memory_mount(ws, "project", "a", (os.getuid(), os.getgid()))
    assert list(elsewhere.iterdir()) == []


def test_the_index_is_read_without_links_second_names_or_limit(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    parts = agent_memory.workspace_parts("project", "a")
    assert parts is not None
    memory = ws.joinpath(*parts)
    memory.mkdir(parents=True)
    secret = tmp_path / "secret"
    secret.write_text("HOST SECRET")

    (memory / "MEMORY.md").write_text("- fact\n")
    assert agent_memory.read_index(ws, parts) == "- fact\n"

    (memory / "MEMORY.md").unlink()
    (memory / "MEMORY.md").symlink_to(secret)
    assert agent_memory.read_index(ws, parts) is None

    (memory / "MEMORY.md").unlink()
    os.link(secret, memory / "MEMORY.md")  # a second name of a file elsewhere
    assert agent_memory.read_index(ws, parts) is None

    (memory / "MEMORY.md").unlink()
    os.mkfifo(memory / "MEMORY.md")  # never blocks the host
    assert agent_memory.read_index(ws, parts) is None

    (memory / "MEMORY.md").unlink()
    (memory / "MEMORY.md").write_text("x" * (agent_memory.MAX_MEMORY_INDEX_BYTES + 10))
    text = agent_memory.read_index(ws, parts)
    assert text is not None and text.endswith(
        f"[cut at {agent_memory.MAX_MEMORY_INDEX_BYTES} bytes]"
    )


def test_a_linked_memory_directory_is_not_read(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / ".claude" / "agent-memory").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "MEMORY.md").write_text("HOST SECRET")
    (ws / ".claude" / "agent-memory" / "a").symlink_to(elsewhere)
    assert agent_memory.read_index(ws, (".claude", "agent-memory", "a")) is None


def test_slugs_are_claude_codes() -> None:
    assert agent_memory.memory_slug("code-reviewer_2") == "code-reviewer_2"
    assert agent_memory.memory_slug("../x") == "---x"
    assert agent_memory.memory_slug("é") == "-"
    assert agent_memory.memory_slug("") == "unknown"
