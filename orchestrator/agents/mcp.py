"""Which MCP servers a subagent starts, and how they are configured: the workspace's
`.mcp.json` as its trust and Claude Code's settings admit it (`ProjectMcp`), and an
agent file's `mcpServers` (`servers_for`).

- `.mcp.json` (`{"mcpServers": {NAME: {command, args, env} | {type, url, headers}}}`)
  is workspace content: it is read only from the text the person's trust covered
  (the trust verdict's fingerprint, so a file changed since is never what starts),
  and an untrusted workspace starts none of its servers. Of a trusted one, every
  server starts but those a settings file turns off (`disabledMcpjsonServers`),
  which is what the pinned Claude Code does in `-p` runs: there, a server not in
  `enabledMcpjsonServers` starts too, and `enableAllProjectMcpServers` changes
  nothing (measured with 2.1.197). The person's yes to the workspace's content, with
  `.mcp.json` in it, is warden's approval of its servers.
- A subagent gets: the servers its agent file defines inline (`mcpServers: [{name:
  {command: …}}]`), the project servers its file names (`mcpServers: [name]`), and,
  as Claude Code's subagents inherit the session's MCP tools, every project server
  when its file lists no `tools` (and for the built-in general-purpose, Explore and
  Plan), or the servers whose tools its `tools` list names
  (`mcp__server`, `mcp__server__*`, `mcp__server__tool`; only the named tools then).
- `deniedMcpServers` and `allowedMcpServers` (Claude Code's managed lists of
  `{serverName}`, `{serverCommand: [command, *args]}` or `{serverUrl: pattern}`
  entries, `*` a wildcard in URLs) hold for every server, the project's and an agent
  file's alike: a denied one never starts, and where an allowlist is set only what
  it names starts. Both only narrow, so they are read from every settings file
  (several allowlists must all admit a server).
- Values are used as written, with `${VAR:-default}` giving its default and
  `${CLAUDE_PROJECT_DIR}` the workspace as the sandbox sees it: the host's
  environment never reaches a sandbox, so a server whose config needs another
  variable is not started, with a warning saying which.

Every server runs inside that subagent's sandbox (stdio) or is reached through its
egress proxy (http/sse); the runner starts them (`sandbox_tools.tools.mcp`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict, ValidationError

from orchestrator.agents.definition import AgentDefinition
from orchestrator.agents.keys import McpServerConfig
from orchestrator.agents.person_mcp import MANAGED_MCP, USER_MCP, PersonMcp
from orchestrator.jsontypes import JSONObject, JSONValue
from sandbox_tools import wire

MCP_JSON = ".mcp.json"
SANDBOX_PROJECT_DIR = wire.WORKSPACE
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class ProjectMcp(BaseModel):
    """The MCP servers of the run's configuration (the person's files, the enterprise's
    and the workspace's `.mcp.json`) it may start, and what was left out."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    servers: dict[str, McpServerConfig] = {}
    """Name → config, as written, of every server trust and settings admit."""
    warnings: tuple[str, ...] = ()
    """What was not admitted, and why (logged once by the run)."""
    locked: bool = False
    """Managed `strictPluginOnlyCustomization` covers `mcp`: no server starts at all,
    neither the project's nor one an agent file defines."""
    managed_only: bool = False
    """A `managed-mcp.json` exists: `servers` are its, and an agent file's own
    (inline) servers do not start either."""
    denied: tuple[JSONObject, ...] = ()
    """`deniedMcpServers` entries of every settings file."""
    allowlists: tuple[tuple[JSONObject, ...], ...] = ()
    """Each settings file's `allowedMcpServers` (a server must be in all of them)."""

    def refusal(self, name: str, config: McpServerConfig) -> str | None:
        """Why `deniedMcpServers`/`allowedMcpServers` keep this server from starting."""
        if any(_entry_matches(entry, name, config) for entry in self.denied):
            return f"MCP server {name!r} is denied by the settings (`deniedMcpServers`)"
        for allowed in self.allowlists:
            if not any(_entry_matches(entry, name, config) for entry in allowed):
                return f"MCP server {name!r} is not in the settings' `allowedMcpServers`"
        return None


def _entry_matches(entry: JSONObject, name: str, config: McpServerConfig) -> bool:
    """One `allowedMcpServers`/`deniedMcpServers` entry against a server."""
    if "serverName" in entry:
        return entry["serverName"] == name
    if "serverCommand" in entry:
        command = [config.command or "", *config.args]
        return config.type == "stdio" and entry["serverCommand"] == command
    if "serverUrl" in entry and isinstance(entry["serverUrl"], str) and config.url:
        pattern = ".*".join(re.escape(part) for part in entry["serverUrl"].split("*"))
        return re.fullmatch(pattern, config.url) is not None
    return False


def _entries(value: object) -> tuple[JSONObject, ...]:
    return tuple(v for v in value if isinstance(v, dict)) if isinstance(value, list) else ()


def _names(value: object) -> set[str]:
    return {v for v in value if isinstance(v, str)} if isinstance(value, list) else set()


def project_mcp(
    text: str | None,
    *,
    trusted: bool,
    settings_docs: Iterable[JSONObject] = (),
    locked: bool = False,
    person: PersonMcp | None = None,
) -> ProjectMcp:
    """The servers this run may start: the person's (`person`: `~/.claude.json` and
    `managed-mcp.json`, `agents.person_mcp`) and the admitted ones of `.mcp.json`
    (`text`: its content as trust saw it, None when there is none or it is not a
    regular file) under the settings files' keys; `locked`: managed settings allow
    no MCP server but their own (none, here)."""
    docs = list(settings_docs)
    person = person or PersonMcp()
    denied = tuple(e for d in docs for e in _entries(d.get("deniedMcpServers")))
    allowlists = tuple(
        _entries(d["allowedMcpServers"])
        for d in docs
        if isinstance(d.get("allowedMcpServers"), list)
    )
    if locked:
        return ProjectMcp(locked=True, denied=denied, allowlists=allowlists, warnings=(
            "no MCP server starts: managed settings lock MCP servers to managed sources "
            "(strictPluginOnlyCustomization)",
        ))  # fmt: skip
    warnings = list(person.warnings)
    if person.managed is not None:
        managed = _person_servers(person.managed, MANAGED_MCP, warnings)
        if person.user or person.local or text is not None:
            warnings.append(
                f"{MANAGED_MCP} takes control of MCP servers: only its servers start "
                f"(none of {USER_MCP}'s, {MCP_JSON}'s or an agent file's own)"
            )
        return ProjectMcp(
            servers=managed, warnings=tuple(warnings), managed_only=True,
            denied=denied, allowlists=allowlists,
        )  # fmt: skip
    disabled = set(person.disabled_mcpjson)
    for settings in docs:
        disabled |= _names(settings.get("disabledMcpjsonServers"))
    # one name in several scopes: local beats project beats user (as Claude Code)
    servers = {
        **_person_servers(person.user, USER_MCP, warnings),
        **_mcp_json_servers(text, trusted, disabled, warnings),
        **_person_servers(person.local, f"{USER_MCP} (this project)", warnings),
    }
    for name in sorted(person.disabled & set(servers)):
        del servers[name]
        warnings.append(f"MCP server {name!r} is off (`disabledMcpServers` in {USER_MCP})")
    return ProjectMcp(
        servers=servers, warnings=tuple(warnings), denied=denied, allowlists=allowlists
    )


def _mcp_json_servers(
    text: str | None, trusted: bool, disabled: set[str], warnings: list[str]
) -> dict[str, McpServerConfig]:
    if text is None:
        return {}
    if not trusted:
        warnings.append(
            f"{MCP_JSON}: no MCP server of this workspace starts: it is not trusted "
            "(`warden trust` shows what it holds and records your yes)"
        )
        return {}
    try:
        doc = json.loads(text)
    except ValueError as exc:
        warnings.append(f"{MCP_JSON}: not JSON ({exc}); no server of it starts")
        return {}
    listed = doc.get("mcpServers") if isinstance(doc, dict) else None
    if not isinstance(listed, dict):
        warnings.append(f"{MCP_JSON}: no `mcpServers` object; no server starts")
        return {}
    servers: dict[str, McpServerConfig] = {}
    for name, raw in listed.items():
        if name in disabled:
            warnings.append(f"{MCP_JSON}: server {name!r} is off (`disabledMcpjsonServers`)")
            continue
        config = _config(name, raw, warnings)
        if config is not None:
            servers[name] = config
    return servers


def _person_servers(
    listed: JSONObject, where: str, warnings: list[str]
) -> dict[str, McpServerConfig]:
    """The servers of the person's (or the enterprise's) file that may start: a value
    in `env` or `headers` is their private text, and a server runs where the subagent
    can read its environment and what it sends, so such a server is not started."""
    servers: dict[str, McpServerConfig] = {}
    for name, raw in listed.items():
        config = _config(name, raw, warnings, where)
        if config is None:
            continue
        private = sorted({*config.env, *config.headers})
        if private:
            warnings.append(
                f"{where}: server {name!r} not started: its `env`/`headers` "
                f"({', '.join(private)[:200]}) would be readable by the subagent, in whose "
                "sandbox the server runs; warden passes no private value of yours into a "
                "sandbox (write what is not secret into its `args`, or into the "
                f"workspace's {MCP_JSON})"
            )
            continue
        servers[name] = config
    return servers


def _config(
    name: str, raw: object, warnings: list[str], where: str = MCP_JSON
) -> McpServerConfig | None:
    if not isinstance(raw, dict):
        warnings.append(f"{where}: server {name!r} is not an object; skipped")
        return None
    try:
        config = McpServerConfig.model_validate(raw)
    except ValidationError as exc:
        first = str(exc).splitlines()[1:2] or [str(exc)]
        warnings.append(f"{where}: server {name!r} skipped: {first[0].strip()}")
        return None
    if not (config.command if config.type == "stdio" else config.url):
        need = "`command`" if config.type == "stdio" else "`url`"
        warnings.append(f"{where}: server {name!r} has no {need}; skipped")
        return None
    return config


def _expand(value: str, where: str) -> str:
    """`${VAR:-default}` → default, `${CLAUDE_PROJECT_DIR}` → the sandbox's workspace;
    ValueError naming any other variable (the host's environment stays on the host)."""

    def one(found: re.Match[str]) -> str:
        if found.group(1) == "CLAUDE_PROJECT_DIR":
            return SANDBOX_PROJECT_DIR
        if found.group(2) is not None:
            return found.group(2)
        raise ValueError(
            f"{where} uses ${{{found.group(1)}}}: warden does not pass the host's environment "
            "into a sandbox; write the value, or `${VAR:-value}`"
        )

    return _VARIABLE.sub(one, value)


def launch(name: str, config: McpServerConfig, tools: Sequence[str] | None) -> JSONObject:
    """The spec entry (`wire_models.McpServerLaunch`) for one server; ValueError when a
    value needs the host's environment."""
    where = f"MCP server {name!r}"
    return {
        "name": name,
        "transport": config.type,
        "command": _expand(config.command or "", where),
        "args": [_expand(a, where) for a in config.args],
        "env": {k: _expand(v, where) for k, v in config.env.items()},
        "url": _expand(config.url or "", where),
        "headers": {k: _expand(v, where) for k, v in config.headers.items()},
        "tools": None if tools is None else list(tools),
    }


def _server_of(pattern: str) -> str | None:
    """The server a `tools:` entry names (`mcp__S`, `mcp__S__*`, `mcp__S__tool`)."""
    rest = pattern[len(wire.MCP_PREFIX) :]
    return rest.split("__", 1)[0] or None


_ANY_TOOL = "\x01"
"""A character no tool name has: a pattern matching `mcp__S__` + it (its last `*` took
it) matches every tool of S."""


def _removes_server(pattern: str, part: str) -> bool:
    return wire.mcp_name_glob(pattern, f"{wire.MCP_PREFIX}{part}__{_ANY_TOOL}")


def _may_remove_from(pattern: str, part: str) -> bool:
    """Whether a pattern can match some tool of the server spelled `part`."""
    prefix, head = f"{wire.MCP_PREFIX}{part}__", pattern.split("*", 1)[0]
    return prefix.startswith(head) or head.startswith(prefix)


def servers_for(
    agent: AgentDefinition, project: ProjectMcp, denied: Sequence[str] = ()
) -> tuple[list[JSONObject], list[str]]:
    """The MCP servers a subagent of this type starts (spec entries) and warnings.
    `denied`: patterns of MCP tools the run's deny rules remove from every subagent's
    offer (`permissions.rules.mcp_offer_patterns`); with the agent's own
    `disallowedTools`, a server they remove whole does not start, and its other
    entries carry the patterns that remove some of its tools (`wire.McpServer.denied`)."""
    if project.locked:
        return [], []
    chosen: dict[str, tuple[McpServerConfig, list[str] | None]] = {}
    warnings: list[str] = []
    by_part = {wire.mcp_part(n): n for n in project.servers}
    for spec in agent.mcp_servers:
        if spec.config is not None and project.managed_only:
            warnings.append(
                f"agent {agent.name}: MCP server {spec.name!r} (`mcpServers`) not started: "
                f"{MANAGED_MCP} allows only its own servers"
            )
        elif spec.config is not None:
            chosen[spec.name] = (spec.config, None)
        elif spec.name in project.servers:
            chosen[spec.name] = (project.servers[spec.name], None)
        else:
            warnings.append(
                f"agent {agent.name}: MCP server {spec.name!r} (`mcpServers`) is not one this "
                f"run starts ({USER_MCP}, {MCP_JSON} of a trusted workspace, or defined in the "
                "agent file)"
            )
    if agent.inherits_mcp:
        for name, config in project.servers.items():
            chosen.setdefault(name, (config, None))
    # Listed without inheriting (`tools: Read, ListMcpResourcesTool`): as in Claude
    # Code (measured), the resource tools reach every server of the session, so each
    # starts, offering none of its tools unless the list names them.
    reads_resources = not agent.inherits_mcp and any(
        t in wire.MCP_RESOURCE_TOOL_NAMES for t in agent.tools or ()
    )
    if reads_resources:
        for name, config in project.servers.items():
            chosen.setdefault(name, (config, []))
    for pattern in agent.mcp_tools:
        server = by_part.get(_server_of(pattern) or "")
        if server is None:
            if not any(wire.mcp_part(n) == _server_of(pattern) for n in chosen):
                warnings.append(
                    f"agent {agent.name}: tool {pattern!r} names no MCP server this run starts"
                )
            continue
        config, tools = chosen.get(server, (project.servers[server], []))
        if tools is not None:
            whole = pattern.count("__") == 1 or pattern.endswith("__*")
            tools = None if whole else [*tools, pattern]
        chosen[server] = (config, tools)
    removed = (*agent.mcp_denied, *denied)
    entries: list[JSONObject] = []
    for name, (config, tools) in chosen.items():
        part = wire.mcp_part(name)
        if any(_removes_server(p, part) for p in removed):
            continue  # as in Claude Code: none of its tools is offered, so none starts
        patterns = [p for p in removed if _may_remove_from(p, part)]
        if tools is not None:
            tools = [t for t in tools if not any(wire.mcp_name_glob(p, t) for p in patterns)]
            if not tools and not reads_resources:
                continue
            patterns = []  # its named tools are what it is offered: none removed is left
        refused = project.refusal(name, config)
        if refused is not None:
            warnings.append(f"agent {agent.name}: {refused}; not started")
            continue
        try:
            entry = launch(name, config, tools)
        except ValueError as exc:
            warnings.append(f"agent {agent.name}: {exc}; not started")
            continue
        entries.append({**entry, "denied": list[JSONValue](patterns[: wire.MAX_MCP_DENIED])})
    return entries, warnings
