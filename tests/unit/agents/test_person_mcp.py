"""The person's own MCP servers (`~/.claude.json` user and local scope) and an
enterprise's `managed-mcp.json`, merged with the workspace's `.mcp.json` as the
pinned Claude Code merges them (measured with 2.1.197): local beats project beats
user, a managed file takes exclusive control (an agent file's own servers included),
`disabledMcpServers` turns off any scope and `disabledMcpjsonServers` only
`.mcp.json`'s; a server of the person's files whose `env` or `headers` hold values
is not started (those values would be readable in the sandbox)."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.agents.definition import AgentDefinition
from orchestrator.agents.keys import McpServerConfig, McpServerSpec
from orchestrator.agents.mcp import project_mcp, servers_for
from orchestrator.agents.person_mcp import PersonMcp, read_person_mcp
from orchestrator.jsontypes import JSONObject


def srv(tag: str) -> JSONObject:
    return {"command": "python3", "args": ["srv.py", tag]}


MCP_JSON = json.dumps({"mcpServers": {"p": srv("p"), "same": srv("same-project")}})


def agent(**fields: object) -> AgentDefinition:
    base: dict[str, object] = {"name": "a", "description": "d", "system_prompt": "p",
                               "source": "/ws/.claude/agents/a.md"}  # fmt: skip
    return AgentDefinition.model_validate({**base, **fields})


def test_every_scope_starts_and_local_beats_project_beats_user() -> None:
    person = PersonMcp(
        user={"u": srv("u"), "same": srv("same-user")},
        local={"l": srv("l"), "same": srv("same-local")},
    )
    found = project_mcp(MCP_JSON, trusted=True, person=person)
    assert sorted(found.servers) == ["l", "p", "same", "u"]
    assert found.servers["same"].args == ("srv.py", "same-local")
    # without the local entry, the project's wins over the user's
    found = project_mcp(MCP_JSON, trusted=True, person=PersonMcp(user={"same": srv("x")}))
    assert found.servers["same"].args == ("srv.py", "same-project")


def test_an_untrusted_workspace_still_starts_the_persons_own_servers() -> None:
    found = project_mcp(MCP_JSON, trusted=False, person=PersonMcp(user={"u": srv("u")}))
    assert sorted(found.servers) == ["u"] and "not trusted" in "\n".join(found.warnings)


def test_which_switches_turn_servers_off() -> None:
    person = PersonMcp(
        user={"u": srv("u"), "u2": srv("u2")},
        disabled=frozenset({"u2"}),
        disabled_mcpjson=frozenset({"p"}),
    )
    # `.mcp.json` names only
    settings: list[JSONObject] = [{"disabledMcpjsonServers": ["same", "u"]}]
    found = project_mcp(MCP_JSON, trusted=True, settings_docs=settings, person=person)
    assert sorted(found.servers) == ["u"]
    said = "\n".join(found.warnings)
    assert "'u2' is off (`disabledMcpServers`" in said and "'p' is off" in said


def test_a_managed_file_takes_exclusive_control() -> None:
    person = PersonMcp(user={"u": srv("u")}, managed={"m": srv("m")})
    found = project_mcp(MCP_JSON, trusted=True, person=person)
    assert sorted(found.servers) == ["m"] and found.managed_only
    assert "managed-mcp.json takes control of MCP servers" in "\n".join(found.warnings)
    own = McpServerSpec(name="own", config=McpServerConfig(command="python3"))
    entries, warnings = servers_for(agent(mcp_servers=(own,)), found)
    assert [e["name"] for e in entries] == ["m"]
    assert "'own' (`mcpServers`) not started: managed-mcp.json allows only" in warnings[0]


def test_private_values_of_the_persons_files_never_reach_a_sandbox() -> None:
    person = PersonMcp(user={
        "gh": {"command": "gh-mcp", "env": {"GITHUB_TOKEN": "ghp_secret"}},
        "api": {"type": "http", "url": "https://api.test/mcp",
                "headers": {"Authorization": "Bearer secret"}},
        "plain": srv("plain"),
    })  # fmt: skip
    found = project_mcp(None, trusted=True, person=person)
    assert sorted(found.servers) == ["plain"]
    said = "\n".join(found.warnings)
    assert "'gh' not started: its `env`/`headers` (GITHUB_TOKEN)" in said
    assert "'api' not started" in said and "secret" not in said.replace("not secret", "")


def test_the_files_are_read_from_where_claude_code_keeps_them(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    claude_json = tmp_path / ".claude.json"
    claude_json.write_text(json.dumps({
        "mcpServers": {"u": srv("u")},
        "projects": {str(ws): {"mcpServers": {"l": srv("l")}, "disabledMcpServers": ["u"],
                               "disabledMcpjsonServers": ["p"]},
                     "/elsewhere": {"mcpServers": {"other": srv("o")}}},
    }))  # fmt: skip
    managed = tmp_path / "managed-mcp.json"
    person = read_person_mcp(claude_json, managed, ws)
    assert list(person.user) == ["u"] and list(person.local) == ["l"]
    assert person.disabled == {"u"} and person.disabled_mcpjson == {"p"}
    assert person.managed is None and person.warnings == ()
    assert read_person_mcp(tmp_path / "none.json", managed, ws) == PersonMcp()
    # an enterprise's file that cannot be read allows no server, and says so
    managed.write_text("{broken")
    broken = read_person_mcp(claude_json, managed, ws)
    assert broken.managed == {} and "no MCP server starts" in broken.warnings[0]
    assert project_mcp(MCP_JSON, trusted=True, person=broken).servers == {}
