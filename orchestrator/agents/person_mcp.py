"""The person's own MCP servers, read once per run: `~/.claude.json` (user scope
`mcpServers`, and local scope `projects[<workspace>].mcpServers` with that entry's
`disabledMcpServers` and `disabledMcpjsonServers`) and an enterprise's
`managed-mcp.json` (beside Claude Code's managed settings, `/etc/claude-code/` on
Linux). `agents.mcp` merges them with the workspace's `.mcp.json` as the pinned
Claude Code does (measured with 2.1.197):

- a `managed-mcp.json` that exists takes exclusive control: only its servers start,
  none of the user's, the project's or an agent file's own;
- otherwise every scope starts, and for one name local beats project beats user;
- `disabledMcpServers` (the `/mcp` switch, kept per project) turns off a server of
  any scope; `disabledMcpjsonServers` only `.mcp.json` ones.

These files are the person's (or the enterprise's), not the workspace's, so they
need no workspace trust; what they start still runs inside each subagent's sandbox
(stdio) or is reached only through its egress proxy (http), like any other server.
A value there is the person's private text, though, and a server runs where the
subagent can read its environment: a server of these files with `env` or `headers`
values is not started, with a warning saying so (`agents.mcp`).
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from orchestrator.jsontypes import JSONObject

MANAGED_MCP = "managed-mcp.json"
"""Beside Claude Code's managed settings file."""
USER_MCP = "~/.claude.json"
"""How warnings name the person's file."""
MAX_CONFIG_BYTES = 16 * 1024 * 1024
"""Largest `.claude.json` or `managed-mcp.json` read (`.claude.json` grows with history)."""


class PersonMcp(BaseModel):
    """The MCP parts of the person's and the enterprise's files, as read once."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    user: JSONObject = {}
    """`mcpServers` of `~/.claude.json`, as written."""
    local: JSONObject = {}
    """`projects[<workspace>].mcpServers` of `~/.claude.json`, as written."""
    disabled: frozenset[str] = frozenset()
    """`projects[<workspace>].disabledMcpServers`: servers of any scope turned off."""
    disabled_mcpjson: frozenset[str] = frozenset()
    """`projects[<workspace>].disabledMcpjsonServers`: `.mcp.json` servers turned off."""
    managed: JSONObject | None = None
    """`mcpServers` of `managed-mcp.json`; None: there is no such file."""
    warnings: tuple[str, ...] = ()
    """What could not be read, and what follows from it."""


def _load(path: Path) -> tuple[object, str | None]:
    """(the parsed document, None) or (None, why not); (None, None): no file."""
    try:
        if not path.exists():
            return None, None
        if path.stat().st_size > MAX_CONFIG_BYTES:
            return None, f"over {MAX_CONFIG_BYTES} bytes"
        return json.loads(path.read_text(encoding="utf-8")), None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return None, str(exc)[:200]


def _servers(doc: object) -> JSONObject:
    listed = doc.get("mcpServers") if isinstance(doc, dict) else None
    return dict(listed) if isinstance(listed, dict) else {}


def _names(value: object) -> frozenset[str]:
    return (
        frozenset(v for v in value if isinstance(v, str))
        if isinstance(value, list)
        else frozenset()
    )


def read_person_mcp(claude_json: Path, managed: Path, workspace: Path) -> PersonMcp:
    """The person's MCP servers for a run in `workspace` (`claude_json`: their
    `.claude.json`; `managed`: the enterprise's `managed-mcp.json`)."""
    warnings: list[str] = []
    found, problem = _load(managed)
    managed_servers: JSONObject | None = None
    if problem is not None or (found is not None and not isinstance(found, dict)):
        # an enterprise's file that cannot be read still says: only managed servers
        warnings.append(
            f"{managed}: not read ({problem or 'not a JSON object'}); no MCP server starts "
            "(a managed-mcp.json allows only its own servers)"
        )
        managed_servers = {}
    elif found is not None:
        managed_servers = _servers(found)
    doc, problem = _load(claude_json)
    if problem is not None:
        warnings.append(f"{USER_MCP} ({claude_json}): not read ({problem}); none of its MCP "
                        "servers starts")  # fmt: skip
    projects = doc.get("projects") if isinstance(doc, dict) else None
    entry: object = None
    if isinstance(projects, dict):
        for key in dict.fromkeys((str(workspace), str(workspace.resolve()))):
            if isinstance(projects.get(key), dict):
                entry = projects[key]
                break
    local = entry if isinstance(entry, dict) else {}
    return PersonMcp(
        user=_servers(doc),
        local=_servers(local),
        disabled=_names(local.get("disabledMcpServers")),
        disabled_mcpjson=_names(local.get("disabledMcpjsonServers")),
        managed=managed_servers,
        warnings=tuple(warnings),
    )
