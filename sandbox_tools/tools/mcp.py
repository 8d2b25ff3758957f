"""A subagent's MCP servers and their tools, as the model sees them.

`McpTools.start` starts every server the spec names at once (stdio ones inside this
sandbox, `mcp_client`; remote ones over Streamable HTTP through the sandbox's egress
proxy only, `mcp_http`) and waits for each to
answer `initialize` and `tools/list` within the spec's start-up deadline. A server
that fails, or is too slow, is stopped and named in a warning; the subagent goes
on with the others. Each listed tool is offered as `mcp__<server>__<tool>` with the
server's description and input schema (a schema that is not an object, or is over
`MAX_SCHEMA_BYTES`, leaves the tool out with a warning); the host checks every call
by that name before `call` forwards it.

A tool's result is the server's text, written by whatever the server read: it
reaches the model as text only (images and other binary content are named, not
passed), cut at `wire.MAX_MCP_RESULT_CHARS` with an announcement. When a started
server declares `resources`, the resource tools the spec gives this subagent are
offered too (`mcp_resources`).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox_tools import wire, wire_answers
from sandbox_tools.errors import ToolError
from sandbox_tools.jsontypes import JSONObject, JSONValue
from sandbox_tools.mcp_client import McpServerError, McpSession, StdioServer
from sandbox_tools.tools.base import ToolOutput

if TYPE_CHECKING:
    from sandbox_tools.tools.mcp_resources import ResourceTools

MAX_SCHEMA_BYTES = 64 * 1024
"""Largest input schema of one MCP tool offered to the model."""
MAX_DESCRIPTION_CHARS = 4000
"""Longest tool description passed on (cut with an announcement)."""
MAX_TOOL_NAME_CHARS = 64
"""The Messages API's longest tool name; a longer `mcp__…` name is left out."""


class _Offered:
    def __init__(self, server: McpSession, tool: str) -> None:
        self.server = server
        self.tool = tool


def _clip(text: str, limit: int, what: str) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[{what} cut: {len(text) - limit} of {len(text)} characters omitted]"


class McpTools:
    """The MCP servers of one subagent and the tools they offer."""

    def __init__(self, spec: wire_answers.TaskSpec, root: Path) -> None:
        self.spec = spec
        self.root = root
        self.servers: list[McpSession] = []
        self.definitions: list[JSONObject] = []
        """API tool definitions of every offered tool, in the servers' order."""
        self._offered: dict[str, _Offered] = {}
        self.warnings: list[str] = []
        self.resources: ResourceTools | None = None
        """The resource tools over the servers that offer resources (None: not offered)."""
        self.resource_tools: tuple[str, ...] = ()
        """Which of `wire.MCP_RESOURCE_TOOL_NAMES` are offered."""

    @property
    def names(self) -> tuple[str, ...]:
        return (*self._offered, *self.resource_tools)

    def start(self) -> list[str]:
        """Start every server and list its tools; warnings for what failed."""
        wanted = list(self.spec.mcp_servers)[: wire.MAX_MCP_SERVERS]
        for skipped in list(self.spec.mcp_servers)[wire.MAX_MCP_SERVERS :]:
            self.warnings.append(
                f"MCP server {skipped.name!r} not started: at most {wire.MAX_MCP_SERVERS} "
                "servers per subagent"
            )
        results: dict[str, tuple[McpSession | None, list[JSONObject], str | None]] = {}

        def start_one(server: wire_answers.McpServer) -> None:
            results[server.name] = self._start_one(server)

        threads = [threading.Thread(target=start_one, args=(s,), daemon=True) for s in wanted]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + self.spec.mcp_startup_timeout_s + 5.0
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        for server in wanted:
            started, tools, problem = results.get(server.name, (None, [], "it did not start"))
            if problem is not None:
                self.warnings.append(problem)
                continue
            assert started is not None
            self.servers.append(started)
            self._offer(server, started, tools)
        self._offer_resources()
        return self.warnings

    def _offer_resources(self) -> None:
        """ListMcpResourcesTool and ReadMcpResourceTool, those of them the spec gives
        this subagent, when a started server declares `resources` (as Claude Code)."""
        wanted = [n for n in wire.MCP_RESOURCE_TOOL_NAMES if n in self.spec.tools]
        if not wanted or not any(s.has_resources for s in self.servers):
            return
        from sandbox_tools.tools.mcp_resources import DEFINITIONS, ResourceTools

        self.resources = ResourceTools(
            self.servers, [s.name for s in self.spec.mcp_servers], self.spec.mcp_tool_timeout_s
        )
        self.definitions.extend(DEFINITIONS[n] for n in wanted)
        self.resource_tools = tuple(wanted)

    def _start_one(
        self, server: wire_answers.McpServer
    ) -> tuple[McpSession | None, list[JSONObject], str | None]:
        started: McpSession
        if server.transport == "sse":
            return None, [], (
                f"MCP server {server.name!r} not started: the SSE transport (deprecated in "
                "MCP) is not spoken by warden's runner; use its Streamable HTTP endpoint "
                "(`type: http`)"
            )  # fmt: skip
        try:
            if server.transport == "http":
                from sandbox_tools.mcp_http import HttpServer

                started = HttpServer(server)
            else:
                started = StdioServer(server, self.root)
        except McpServerError as e:
            return None, [], str(e)
        try:
            tools = started.initialize(self.spec.mcp_startup_timeout_s)
        except ToolError as e:
            started.close()
            return None, [], f"{e} (its tools are not offered)"
        return started, tools, None

    def _offer(self, server: wire_answers.McpServer, started: McpSession, tools: list[JSONObject]) -> None:
        for tool in tools:
            raw_name = tool.get("name")
            if not isinstance(raw_name, str) or not raw_name:
                continue
            name = wire.mcp_tool_name(server.name, raw_name)
            if server.tools is not None and name not in server.tools:
                continue  # the agent lists some of this server's tools, not this one
            if any(wire.mcp_name_glob(p, name) for p in server.denied):
                continue  # a deny rule or the agent's `disallowedTools` removes it
            if len(name) > MAX_TOOL_NAME_CHARS or name in self._offered:
                self.warnings.append(f"MCP tool {name[:100]!r} left out: its name is too long "
                                     "or taken by another tool")  # fmt: skip
                continue
            if len(self._offered) >= wire.MAX_MCP_TOOLS:
                self.warnings.append(f"MCP tool {name!r} left out: at most {wire.MAX_MCP_TOOLS} "
                                     "MCP tools per subagent")  # fmt: skip
                continue
            schema = tool.get("inputSchema")
            if not isinstance(schema, dict) or schema.get("type") != "object":
                self.warnings.append(f"MCP tool {name!r} left out: its inputSchema is not a "
                                     "JSON Schema object")  # fmt: skip
                continue
            if len(json.dumps(schema)) > MAX_SCHEMA_BYTES:
                self.warnings.append(f"MCP tool {name!r} left out: its inputSchema is over "
                                     f"{MAX_SCHEMA_BYTES} bytes")  # fmt: skip
                continue
            description = tool.get("description")
            text = description if isinstance(description, str) and description.strip() else (
                f"Tool {raw_name} of the MCP server {server.name}."
            )  # fmt: skip
            self.definitions.append({
                "name": name,
                "description": _clip(text, MAX_DESCRIPTION_CHARS, "description"),
                "input_schema": schema,
            })  # fmt: skip
            self._offered[name] = _Offered(started, raw_name)

    def offers(self, name: str) -> bool:
        return name in self._offered or name in self.resource_tools

    def call(self, name: str, arguments: JSONObject) -> ToolOutput:
        """Forward one (host-approved) call; never raises for a tool failure."""
        if self.resources is not None and name in self.resource_tools:
            return self.resources.call(name, arguments)
        offered = self._offered.get(name)
        if offered is None:
            return ToolOutput(f"Error: {name!r} is not an MCP tool of this agent",
                              is_error=True, summary="unknown MCP tool")  # fmt: skip
        try:
            result = offered.server.request(
                "tools/call", {"name": offered.tool, "arguments": arguments},
                self.spec.mcp_tool_timeout_s,
            )  # fmt: skip
        except ToolError as e:
            return ToolOutput(f"Error: {e}", is_error=True, summary=str(e)[:160])
        text = render_result(result)
        is_error = result.get("isError") is True
        return ToolOutput(text, is_error=is_error, summary="error" if is_error else "done")

    def close(self) -> None:
        for server in self.servers:
            server.close()


def render_result(result: JSONObject) -> str:
    """A `tools/call` result as plain text for the model, within the wire's limit."""
    parts: list[str] = []
    content = result.get("content")
    for item in content if isinstance(content, list) else []:
        if not isinstance(item, dict):
            continue
        parts.append(_content_text(item))
    if not parts and "structuredContent" in result:
        parts.append(json.dumps(result["structuredContent"], ensure_ascii=False))
    text = "\n".join(parts) or "(the MCP tool returned no content)"
    limit = wire.MAX_MCP_RESULT_CHARS
    if len(text) > limit:
        text = text[:limit] + (
            f"\n[output truncated: showing {limit} of {len(text)} characters of the MCP "
            "tool's result]"
        )
    return text


def _content_text(item: JSONObject) -> str:
    kind = item.get("type")
    if kind == "text" and isinstance(item.get("text"), str):
        return str(item["text"])
    if kind == "resource":
        resource: JSONValue = item.get("resource")
        if isinstance(resource, dict):
            if isinstance(resource.get("text"), str):
                return str(resource["text"])
            return f"[binary resource {str(resource.get('uri'))[:300]} not shown]"
    if kind == "resource_link":
        return f"[resource link: {str(item.get('uri'))[:300]}]"
    if kind in ("image", "audio"):
        return (
            f"[{kind} ({str(item.get('mimeType'))[:60]}) not shown: MCP results reach "
            "this agent as text only]"
        )
    return f"[MCP content of type {str(kind)[:60]} not shown]"
