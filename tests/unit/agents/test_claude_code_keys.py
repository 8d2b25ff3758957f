"""Agent files Claude Code accepts load unchanged, with Claude Code's meaning for its
keys; warden's own limits live in a `warden:` block, and their old top-level
spellings still load with a deprecation warning."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.agents.files import load_agent_file
from orchestrator.errors import AgentDefinitionError


def _file(tmp_path: Path, front: str, name: str = "a") -> Path:
    path = tmp_path / f"{name}.md"
    path.write_text(f"---\nname: {name}\ndescription: d\n{front}---\nDo it.\n")
    return path


CLAUDE_CODE_FILE = """\
model: sonnet
memory: project
skills:
  - api-style
  - testing
effort: high
initialPrompt: Start by reading the README.
omitClaudeMd: true
background: true
isolation: worktree
color: purple
mcpServers:
  - github
  - local-db:
      command: node
      args: [server.js, --db, x.sqlite]
      env: {MODE: ro}
  - docs:
      type: http
      url: http://127.0.0.1:9000/mcp
"""


def test_a_file_with_every_claude_code_key_loads_with_their_meaning(tmp_path: Path) -> None:
    agent, warnings = load_agent_file(_file(tmp_path, CLAUDE_CODE_FILE))
    assert agent.memory_scope == "project" and agent.memory_limit is None
    assert agent.skills == ("api-style", "testing")
    assert (agent.effort, agent.initial_prompt) == ("high", "Start by reading the README.")
    assert (agent.omit_claude_md, agent.background, agent.color) == (True, True, "purple")
    assert agent.isolation == "worktree"
    github, db, docs = agent.mcp_servers
    assert (github.name, github.config) == ("github", None)
    assert db.config is not None and (db.config.command, db.config.args) == (
        "node",
        ("server.js", "--db", "x.sqlite"),
    )
    assert db.config.env == {"MODE": "ro"}
    assert docs.config is not None and (docs.config.type, docs.config.url) == (
        "http",
        "http://127.0.0.1:9000/mcp",
    )
    assert agent.extra == {}
    # worktree isolation is run (orchestrator.apply): nothing to warn about
    assert warnings == []


@pytest.mark.parametrize("scope", ["user", "project", "local"])
def test_memory_scopes_are_claude_codes(tmp_path: Path, scope: str) -> None:
    agent, warnings = load_agent_file(_file(tmp_path, f"memory: {scope}\n"))
    assert (agent.memory_scope, agent.memory_limit, warnings) == (scope, None, [])


def test_a_memory_size_is_still_the_ram_limit_with_a_deprecation_warning(tmp_path: Path) -> None:
    agent, warnings = load_agent_file(_file(tmp_path, "memory: 512m\n"))
    assert (agent.memory_scope, agent.memory_limit) == (None, 512 * 1024**2)
    assert len(warnings) == 1 and "warden: {memory: 512m}" in warnings[0]


def test_the_warden_block_holds_every_limit(tmp_path: Path) -> None:
    front = (
        "memory: user\nwarden:\n  memory: 1g\n  cpus: 1.5\n  pids: 64\n  diskWriteLimit: 10m\n"
        "  tokenBudget: 5000\n  network: none\n  image: bash\n  timeout: 2m\n  fork: true\n"
    )
    agent, warnings = load_agent_file(_file(tmp_path, front))
    assert warnings == []
    assert agent.memory_scope == "user"
    assert (agent.memory_limit, agent.cpus, agent.pids) == (1024**3, 1.5, 64)
    assert (agent.disk_write_limit, agent.token_budget) == (10 * 1024**2, 5000)
    assert (agent.network, agent.image, agent.timeout_s, agent.fork) == ("none", "bash", 120.0, True)


def test_old_top_level_spellings_load_with_one_warning_each(tmp_path: Path) -> None:
    agent, warnings = load_agent_file(_file(tmp_path, "cpus: 2\ntimeout: 90\n"))
    assert (agent.cpus, agent.timeout_s) == (2.0, 90.0)
    assert len(warnings) == 2 and all("move it under `warden:`" in w for w in warnings)


def test_a_malformed_network_in_the_block_is_refused(tmp_path: Path) -> None:
    with pytest.raises(AgentDefinitionError, match=r"network\.allowed"):
        load_agent_file(_file(tmp_path, "warden:\n  network:\n    allowed: [a.com]\n"))


def test_bad_optional_claude_code_values_are_skipped_with_a_warning(tmp_path: Path) -> None:
    front = "effort: enormous\nmcpServers:\n  - {a: {command: x}, b: {command: y}}\n  - c: {}\n"
    agent, warnings = load_agent_file(_file(tmp_path, front))
    assert (agent.effort, agent.mcp_servers) == (None, ())
    assert len(warnings) == 3
    assert "effort: enormous" in warnings[0]
    assert all("mcpServers" in w for w in warnings[1:])


def test_effort_numbers_and_a_server_mapping(tmp_path: Path) -> None:
    front = "effort: 3\nmcpServers:\n  one: {command: a}\n  two: {url: http://127.0.0.1:1/}\n"
    agent, _ = load_agent_file(_file(tmp_path, front))
    assert agent.effort == "3"
    assert [s.name for s in agent.mcp_servers] == ["one", "two"]


def test_effort_is_sent_as_the_pinned_claude_code_sends_it() -> None:
    """A level goes out as written; a number, or a model without effort, sends none;
    `max`/`xhigh` fall back to `high` on models that lack them (the pinned CLI's
    capability lists)."""
    from orchestrator.agents.keys import request_effort

    assert request_effort("low", "claude-sonnet-5") == "low"
    assert request_effort("max", "claude-sonnet-5") == "max"
    assert request_effort("7", "claude-sonnet-5") is None
    assert request_effort(None, "claude-sonnet-5") is None
    assert request_effort("low", "claude-haiku-4-5") is None
    assert request_effort("low", "claude-haiku-4-5-20251001") is None
    assert request_effort("low", "claude-3-5-sonnet-20241022") is None
    assert request_effort("low", "claude-opus-4-20250514") is None
    assert request_effort("max", "claude-opus-4-5") == "high"
    assert request_effort("xhigh", "claude-sonnet-4-6") == "high"
    assert request_effort("xhigh", "claude-opus-4-8") == "xhigh"


def test_effort_med_is_medium(tmp_path: Path) -> None:
    agent, _ = load_agent_file(_file(tmp_path, "effort: Med\n"))
    assert agent.effort == "medium"


def test_memory_brings_read_write_and_edit_as_in_claude_code(tmp_path: Path) -> None:
    agent, _ = load_agent_file(_file(tmp_path, "memory: local\ntools: Bash, Read\n"))
    assert agent.tools == ("Bash", "Read", "Write", "Edit")
    front = "memory: local\ntools: Bash\ndisallowedTools: Write\n"
    agent, _ = load_agent_file(_file(tmp_path, front))
    assert agent.tools == ("Bash", "Edit", "Read")


@pytest.mark.parametrize("limits", ["pids: 7", "memory: 6m"])
def test_limits_a_sandbox_cannot_start_with_are_refused_when_the_file_is_read(
    tmp_path: Path, limits: str
) -> None:
    """An agent file asking for fewer processes or less memory than a sandbox can start
    with is named when it is loaded, not when its first task fails to start."""
    path = tmp_path / "tight.md"
    path.write_text(f"---\nname: tight\ndescription: d\nwarden:\n  {limits}\n---\nbody\n")
    with pytest.raises(AgentDefinitionError, match="tight"):
        load_agent_file(path)
