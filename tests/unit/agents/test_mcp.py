"""Which MCP servers a subagent starts: `.mcp.json` only as trust saw it and only when
trusted, `disabledMcpjsonServers` honoured (as Claude Code's `-p` runs do), an agent
file's own servers and named ones, its `tools` list narrowing a server to the named
tools, the built-ins inheriting the project's servers, and the host's environment
never expanded into a sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.agents.definition import BUILTIN_SOURCE, AgentDefinition
from orchestrator.agents.files import load_agent_file
from orchestrator.agents.keys import McpServerConfig, McpServerSpec
from orchestrator.agents.mcp import project_mcp, servers_for
from orchestrator.permissions.rules import mcp_offer_patterns, parse_rule

MCP_JSON = json.dumps({"mcpServers": {
    "db": {"command": "python3", "args": ["db.py", "${CLAUDE_PROJECT_DIR}/data"]},
    "web": {"type": "http", "url": "https://mcp.example.test/mcp"},
    "off": {"command": "x"},
    "bad": {"args": ["no command"]},
}})  # fmt: skip


def agent(**fields: object) -> AgentDefinition:
    base: dict[str, object] = {"name": "a", "description": "d", "system_prompt": "p",
                               "source": "/ws/.claude/agents/a.md"}  # fmt: skip
    return AgentDefinition.model_validate({**base, **fields})


def test_a_trusted_mcp_json_starts_all_but_the_disabled_and_broken_servers() -> None:
    found = project_mcp(
        MCP_JSON, trusted=True,
        settings_docs=[{"disabledMcpjsonServers": ["off"], "enabledMcpjsonServers": ["db"]}],
    )  # fmt: skip
    assert sorted(found.servers) == ["db", "web"]  # enabled lists do not narrow, as in `-p`
    said = "\n".join(found.warnings)
    assert "'off' is off (`disabledMcpjsonServers`)" in said
    assert "'bad' has no `command`" in said


def test_an_untrusted_or_locked_workspace_starts_none() -> None:
    untrusted = project_mcp(MCP_JSON, trusted=False)
    assert untrusted.servers == {} and "not trusted" in untrusted.warnings[0]
    locked = project_mcp(MCP_JSON, trusted=True, locked=True)
    assert locked.servers == {} and "strictPluginOnlyCustomization" in locked.warnings[0]
    inline = agent(mcp_servers=(McpServerSpec(name="own", config=McpServerConfig(command="x")),))
    assert servers_for(inline, locked) == ([], [])
    assert project_mcp("{not json", trusted=True).warnings[0].startswith(".mcp.json: not JSON")


def test_which_servers_and_tools_a_subagent_gets() -> None:
    project = project_mcp(MCP_JSON, trusted=True)
    # No `tools`: every project server, all their tools; the project dir is the sandbox's.
    entries, warnings = servers_for(agent(), project)
    assert [e["name"] for e in entries] == ["db", "web", "off"] and warnings == []
    assert entries[0]["args"] == ["db.py", "/workspace/data"] and entries[0]["tools"] is None
    # A tools list: only the servers it names, and only the named tools of them.
    listed = agent(tools=("Read",), mcp_tools=("mcp__db__query", "mcp__web", "mcp__nope__x"))
    entries, warnings = servers_for(listed, project)
    assert {e["name"]: e["tools"] for e in entries} == {"db": ["mcp__db__query"], "web": None}
    assert warnings == ["agent a: tool 'mcp__nope__x' names no MCP server this run starts"]
    # The agent file's own servers (inline or by name) come whole.
    own = agent(tools=("Read",), mcp_servers=(
        McpServerSpec(name="mine", config=McpServerConfig(command="srv", env={"K": "${K:-v}"})),
        McpServerSpec(name="db"), McpServerSpec(name="ghost"),
    ))  # fmt: skip
    entries, warnings = servers_for(own, project)
    assert [(e["name"], e["tools"]) for e in entries] == [("mine", None), ("db", None)]
    assert entries[0]["env"] == {"K": "v"}
    assert "'ghost' (`mcpServers`) is not one this run starts" in warnings[0]


def test_an_agent_listing_a_resource_tool_gets_every_server_for_its_resources() -> None:
    """Measured with the pinned Claude Code: `tools: Read, ListMcpResourcesTool` lists
    the resources of every server of the session, and is offered none of their tools
    (those its list names excepted); the spec keeps the resource tool it listed."""
    project = project_mcp(MCP_JSON, trusted=True)
    reader = agent(tools=("Read", "ListMcpResourcesTool"), mcp_tools=("mcp__db__query",))
    entries, warnings = servers_for(reader, project)
    assert {e["name"]: e["tools"] for e in entries} == {
        "db": ["mcp__db__query"], "web": [], "off": [],
    }  # fmt: skip
    assert warnings == []
    assert reader.offered_tools(may_delegate=False) == ["Read", "ListMcpResourcesTool"]
    # Without a resource tool in its list, a server it does not name does not start.
    plain = agent(tools=("Read",), mcp_tools=("mcp__db__query",))
    assert [e["name"] for e in servers_for(plain, project)[0]] == ["db"]


def test_builtins_inherit_the_project_servers_and_host_variables_never_expand() -> None:
    project = project_mcp(json.dumps({"mcpServers": {
        "gh": {"command": "gh-mcp", "env": {"TOKEN": "${GITHUB_TOKEN}"}},
        "ok": {"command": "ok"},
    }}), trusted=True)  # fmt: skip
    general = agent(name="general-purpose", source=BUILTIN_SOURCE, tools=("Bash",))
    entries, warnings = servers_for(general, project)
    assert [e["name"] for e in entries] == ["ok"]
    assert "uses ${GITHUB_TOKEN}: warden does not pass the host's environment" in warnings[0]
    assert general.policy_tools() == ("Bash", "mcp__*", "ListMcpResourcesTool", "ReadMcpResourceTool")
    bash = agent(name="bash", source=BUILTIN_SOURCE, tools=("Bash",))
    assert servers_for(bash, project) == ([], [])


def test_denied_and_allowed_mcp_servers_narrow_every_server() -> None:
    own = McpServerSpec(name="own", config=McpServerConfig(command="own-srv", args=("-v",)))
    everyone = agent(mcp_servers=(own,))
    denied = project_mcp(MCP_JSON, trusted=True, settings_docs=[
        {"deniedMcpServers": [{"serverName": "db"}, {"serverUrl": "https://*.example.test/*"}]},
    ])  # fmt: skip
    entries, warnings = servers_for(everyone, denied)
    assert [e["name"] for e in entries] == ["own", "off"]
    assert "'db' is denied by the settings (`deniedMcpServers`)" in warnings[0]
    # Every allowlist must admit a server; a denial wins over an allowance.
    allowed = project_mcp(MCP_JSON, trusted=True, settings_docs=[
        {"allowedMcpServers": [{"serverCommand": ["own-srv", "-v"]}, {"serverName": "db"},
                               {"serverName": "off"}]},
        {"allowedMcpServers": [{"serverName": "own"}, {"serverName": "db"}],
         "deniedMcpServers": [{"serverName": "db"}]},
    ])  # fmt: skip
    entries, warnings = servers_for(everyone, allowed)
    assert [e["name"] for e in entries] == ["own"]
    assert any("'off' is not in the settings' `allowedMcpServers`" in w for w in warnings)
    # Without a .mcp.json the lists still hold for the agent's own servers.
    assert servers_for(everyone, project_mcp(None, trusted=True, settings_docs=[
        {"allowedMcpServers": []}]))[0] == []  # fmt: skip


XY = json.dumps({"mcpServers": {"x": {"command": "python3"}, "y": {"command": "python3"}}})


@pytest.mark.parametrize(
    ("frontmatter", "expected"),
    [
        # what the pinned Claude Code offered each subagent (servers x, y; tools look,
        # poke, zap each): `disallowedTools` removes a tool, a server, or every MCP
        # tool, and ignores `mcp__x__p*`; a `tools:` list narrows, and `mcp__*` there
        # names nothing
        ("disallowedTools: mcp__x__poke", {"x": (None, ["mcp__x__poke"]), "y": (None, [])}),
        ("disallowedTools: mcp__x", {"y": (None, [])}),
        ("disallowedTools: mcp__x__*", {"y": (None, [])}),
        ("disallowedTools: mcp__*", {}),
        ("disallowedTools: mcp__x__p*", {"x": (None, []), "y": (None, [])}),
        ("tools: Read, mcp__x__look", {"x": (["mcp__x__look"], [])}),
        ("tools: Read, mcp__x__look, mcp__x__zap\ndisallowedTools: mcp__x__zap",
         {"x": (["mcp__x__look"], [])}),
        ("tools: Read, mcp__x", {"x": (None, [])}),
        ("tools: Read, mcp__x__*", {"x": (None, [])}),
        ("tools: Read, mcp__*", {}),
        ("tools: Read, mcp__x__look\ndisallowedTools: mcp__x__look", {}),
        ("tools: Read, mcp__x\ndisallowedTools: mcp__x__zap", {"x": (None, ["mcp__x__zap"])}),
    ],
)
def test_disallowed_tools_and_tool_lists_as_claude_code_applies_them(
    tmp_path: Path, frontmatter: str, expected: dict[str, tuple[list[str] | None, list[str]]]
) -> None:
    path = tmp_path / "a.md"
    path.write_text(f"---\nname: a\ndescription: d\n{frontmatter}\n---\nBody.\n")
    definition, warnings = load_agent_file(path)
    entries, _ = servers_for(definition, project_mcp(XY, trusted=True))
    assert {e["name"]: (e["tools"], e["denied"]) for e in entries} == expected
    if "p*" in frontmatter:
        assert "`disallowedTools` entry 'mcp__x__p*' removes nothing" in "\n".join(warnings)
    if "disallowedTools" in frontmatter and "tools:" not in frontmatter:
        tools = definition.policy_tools()
        assert tools is not None and "mcp__*" in tools


def test_deny_rules_remove_servers_and_tools_from_every_subagents_offer() -> None:
    """Measured: settings deny `mcp__x__poke`, `mcp__y`, `mcp__z__*`, `mcp__w__p*`: the
    general-purpose subagent got x's and w's look and zap, nothing of y and z."""
    project = project_mcp(json.dumps({"mcpServers": {
        s: {"command": "python3"} for s in ("x", "y", "z", "w")
    }}), trusted=True)  # fmt: skip
    rules = [parse_rule(r, "deny", "project:s", "permissions")
             for r in ("mcp__x__poke", "mcp__y", "mcp__z__*", "mcp__w__p*")]  # fmt: skip
    general = agent(name="general-purpose", source=BUILTIN_SOURCE, tools=("Bash",))
    entries, _ = servers_for(general, project, mcp_offer_patterns(rules))
    assert {e["name"]: e["denied"] for e in entries} == {
        "x": ["mcp__x__poke"], "w": ["mcp__w__p*"],
    }  # fmt: skip
