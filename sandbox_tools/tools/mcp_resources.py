"""Claude Code's `ListMcpResourcesTool` and `ReadMcpResourceTool` over a subagent's
MCP servers (`resources/list`, `resources/read`).

As in the pinned Claude Code they are offered (`McpTools`) only when a started server
declares the `resources` capability, with its input schemas (`sdk-tools.d.ts`), and
their results have its shapes: the list is a JSON array of the servers' resources, each
with a `server` field; a read is `{"contents": [...]}`, a text kept as `text`, a binary
blob saved to a file in the sandbox (`wire.MCP_RESOURCE_BLOB_DIR`) whose path is given
as `blobSavedTo`, never its bytes.

Everything a server returns is attacker-written: only the standard fields of a
resource are passed on, each string cut at `MAX_FIELD_CHARS`, a list at
`MAX_RESOURCES` per server, a read at `MAX_CONTENTS` items, and the whole result at
`wire.MAX_MCP_RESOURCE_RESULT_CHARS` (a read's texts are cut to fit, each cut
announced inside its text, so the result stays one JSON document). A server that is
not this agent's, has no resources, errors or stops answering is a tool error that
names it; a resource it does not know (or a server that does not implement reads) is
said in a plain result, as Claude Code does; the subagent goes on.
"""

from __future__ import annotations

import base64
import binascii
import json
import mimetypes
import os
import re
import secrets
import stat
import time
from collections.abc import Sequence
from typing import NamedTuple

from sandbox_tools import wire
from sandbox_tools.errors import ToolError
from sandbox_tools.jsontypes import JSONObject, JSONValue
from sandbox_tools.mcp_client import McpRefusedError, McpSession
from sandbox_tools.tools.base import ToolOutput
from sandbox_tools.tools.checks import CHECKS, Check, parse
from sandbox_tools.tools.more_inputs import schema

LIST_TOOL, READ_TOOL = wire.MCP_RESOURCE_TOOL_NAMES
MAX_RESOURCES = 500
"""Most resources listed from one server (its pages are read until then)."""
MAX_PAGES = 50
"""Most `resources/list` pages read from one server."""
MAX_CONTENTS = 100
"""Most content items of one read passed on."""
MAX_FIELD_CHARS = 2000
"""Longest uri, name, title, description or MIME type passed on."""
RESOURCE_FIELDS = ("uri", "name", "title", "description", "mimeType", "size")
"""The standard fields of a listed resource (MCP's `Resource`) passed on."""
NOT_FOUND_CODES = (-32002, -32602)
"""JSON-RPC codes a server gives for an unknown resource (MCP's `resource not found`,
and invalid params)."""
METHOD_NOT_FOUND = -32601
NO_RESOURCES = (
    "No resources found. The MCP servers may still offer tools even when they list no "
    "resources."
)


class ListMcpResourcesInput(NamedTuple):
    server: str | None = None
    """Only this server's resources; None: every server's."""


class ReadMcpResourceInput(NamedTuple):
    server: str
    uri: str


CHECKS.update({
    ListMcpResourcesInput: {"server": Check(str, min_length=1)},
    ReadMcpResourceInput: {"server": Check(str, min_length=1), "uri": Check(str, min_length=1)},
})  # fmt: skip

DEFINITIONS: dict[str, JSONObject] = {
    LIST_TOOL: {"name": LIST_TOOL, "description": (
        "Lists the resources of this agent's MCP servers as a JSON array; each resource "
        "carries a 'server' field naming the server it comes from. Give server to list "
        "only that server's resources. Read one with ReadMcpResourceTool."
    ), "input_schema": {  # no `required` key, as Claude Code's schema has none
        "type": "object",
        "properties": {"server": {"type": "string",
                                  "description": "Optional server name to filter resources by"}},
        "additionalProperties": False,
    }},
    READ_TOOL: {"name": READ_TOOL, **schema(
        "Reads one resource of an MCP server by its server name and URI (as "
        "ListMcpResourcesTool lists them). Text comes back as text; binary content is "
        "saved to a file inside this sandbox, whose path is given.",
        {"server": {"type": "string", "description": "The MCP server name"},
         "uri": {"type": "string", "description": "The resource URI to read"}},
        ["server", "uri"],
    )},
}  # fmt: skip
"""API tool definitions of both tools (the pinned Claude Code's input schemas)."""


def _text(value: JSONValue, limit: int = MAX_FIELD_CHARS) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + "…"


def _dump(value: JSONValue) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class ResourceTools:
    """The two tools over the started servers that declare `resources`."""

    def __init__(self, servers: Sequence[McpSession], configured: Sequence[str],
                 timeout_s: float) -> None:  # fmt: skip
        self.servers = [s for s in servers if s.has_resources]
        self._all = list(servers)
        self._configured = list(configured)
        self.timeout_s = timeout_s

    def _server(self, name: str) -> McpSession:
        """The started server called `name` (or its `mcp__` spelling) with resources."""
        for server in self._all:
            if name in (server.name, wire.mcp_part(server.name)):
                if not server.has_resources:
                    raise ToolError(f"MCP server {server.name!r} does not offer resources "
                                    "(it declares no `resources` capability)")  # fmt: skip
                return server
        if name in self._configured:
            raise ToolError(f"MCP server {name!r} did not start, so its resources cannot be "
                            "read (the task's log events say why)")  # fmt: skip
        names = ", ".join(s.name for s in self._all) or "none"
        raise ToolError(f"MCP server {_text(name, 200)!r} is not one of this agent's servers "
                        f"(its servers: {names})")  # fmt: skip

    def call(self, name: str, raw: JSONObject) -> ToolOutput:
        """Run one (host-approved) call; never raises for a tool failure."""
        try:
            if name == LIST_TOOL:
                return self._list(parse(name, ListMcpResourcesInput, raw))
            return self._read(parse(name, ReadMcpResourceInput, raw))
        except ToolError as e:
            return ToolOutput(f"Error: {e}", is_error=True, summary=str(e)[:160])

    # -- ListMcpResourcesTool -------------------------------------------------------
    def _list(self, args: ListMcpResourcesInput) -> ToolOutput:
        servers = self.servers if args.server is None else [self._server(args.server)]
        listed: list[JSONValue] = []
        failures: list[str] = []
        for server in servers:
            try:
                listed.extend(self._resources_of(server))
            except ToolError as e:
                if args.server is not None:
                    raise
                failures.append(str(e))
        if failures and len(failures) == len(servers):
            raise ToolError("; ".join(failures))
        # The longest prefix of the list whose JSON fits (each item measured once).
        shown, size = 0, 2
        for item in listed:
            size += len(_dump(item)) + (1 if shown else 0)
            if size > wire.MAX_MCP_RESOURCE_RESULT_CHARS:
                break
            shown += 1
        text = _dump(listed[:shown]) if listed else NO_RESOURCES
        notes = [f"[{f}; its resources are not listed]" for f in failures]
        if shown < len(listed):
            notes.append(f"[output truncated: showing {shown} of {len(listed)} resources; "
                         "give server to list one server's]")  # fmt: skip
        return ToolOutput("\n".join([text, *notes]), summary=f"{shown} resources")

    def _resources_of(self, server: McpSession) -> list[JSONValue]:
        deadline = time.monotonic() + self.timeout_s
        found: list[JSONValue] = []
        cursor: JSONValue = None
        for _ in range(MAX_PAGES):
            params: JSONObject = {} if cursor is None else {"cursor": cursor}
            page = server.request("resources/list", params, max(0.0, deadline - time.monotonic()))
            items = page.get("resources")
            for item in items if isinstance(items, list) else []:
                if not isinstance(item, dict) or not isinstance(item.get("uri"), str):
                    continue
                kept: JSONObject = {k: (item[k] if k == "size" and isinstance(item[k], int)
                                        else _text(item[k]))
                                    for k in RESOURCE_FIELDS if k in item}  # fmt: skip
                kept["server"] = server.name
                found.append(kept)
                if len(found) >= MAX_RESOURCES:
                    return found
            cursor = page.get("nextCursor")
            if not isinstance(cursor, str) or not cursor:
                break
        return found

    # -- ReadMcpResourceTool --------------------------------------------------------
    def _read(self, args: ReadMcpResourceInput) -> ToolOutput:
        server = self._server(args.server)
        try:
            result = server.request("resources/read", {"uri": args.uri}, self.timeout_s)
        except McpRefusedError as e:
            # As Claude Code: these two are answers about the resource, not failures
            # of the call (its result says so, not marked as an error).
            if e.code == METHOD_NOT_FOUND:
                return ToolOutput(f"MCP server {server.name!r} declares resources but does "
                                  "not implement resources/read", summary="not readable")  # fmt: skip
            if e.code in NOT_FOUND_CODES:
                return ToolOutput(f"Resource not found: {_text(args.uri, 300)} on MCP server "
                                  f"{server.name!r} ({e}); it may have been deleted or the "
                                  f"URI is stale: list the resources again with {LIST_TOOL}",
                                  summary="not found")  # fmt: skip
            raise
        raw = result.get("contents")
        items = [i for i in raw if isinstance(i, dict)] if isinstance(raw, list) else []
        contents: list[JSONObject] = []
        texts: list[str | None] = []
        for index, item in enumerate(items[:MAX_CONTENTS]):
            entry: JSONObject = {"uri": _text(item.get("uri", args.uri))}
            if isinstance(item.get("mimeType"), str):
                entry["mimeType"] = _text(item["mimeType"], 200)
            if isinstance(item.get("text"), str):
                texts.append(str(item["text"]))
            elif isinstance(item.get("blob"), str):
                texts.append(self._save_blob(server.name, entry, str(item["blob"]), index))
            else:
                texts.append(None)
            contents.append(entry)
        self._fit(contents, texts)
        text = _dump({"contents": list[JSONValue](contents)})
        if len(items) > MAX_CONTENTS:
            text += f"\n[output truncated: showing {MAX_CONTENTS} of {len(items)} contents]"
        return ToolOutput(text, summary=f"{len(contents)} contents")

    @staticmethod
    def _fit(contents: list[JSONObject], texts: list[str | None]) -> None:
        """Put each text in its entry, cut so the result stays within the limit."""
        frame = len(_dump({"contents": list[JSONValue](contents)}))
        left = max(0, wire.MAX_MCP_RESOURCE_RESULT_CHARS - frame - 200 * len(contents))
        for entry, text in zip(contents, texts, strict=True):
            if text is None:
                continue
            escaped = len(_dump(text))
            if escaped <= left:
                entry["text"] = text
                left -= escaped
                continue
            keep = max(0, left * len(text) // max(1, escaped) - 10)
            entry["text"] = text[:keep] + (
                f"\n[resource text cut: showing {keep} of {len(text)} characters]"
            )
            left = 0

    @staticmethod
    def _save_blob(server: str, entry: JSONObject, blob: str, index: int) -> str:
        """Save a base64 blob in the sandbox; the text that names it (or why not)."""
        try:
            data = base64.b64decode(blob, validate=True)
        except (binascii.Error, ValueError):
            return "[binary content not saved: the server's blob is not valid base64]"
        mime = entry.get("mimeType")
        ext = mimetypes.guess_extension(mime) if isinstance(mime, str) else None
        if not ext or not re.fullmatch(r"\.[A-Za-z0-9]{1,10}", ext):
            ext = ".bin"
        name = f"mcp-resource-{time.time_ns()}-{index}-{secrets.token_hex(3)}{ext}"
        path = os.path.join(wire.MCP_RESOURCE_BLOB_DIR, name)
        try:
            os.makedirs(wire.MCP_RESOURCE_BLOB_DIR, mode=0o700, exist_ok=True)
            if not stat.S_ISDIR(os.lstat(wire.MCP_RESOURCE_BLOB_DIR).st_mode):
                raise OSError(f"{wire.MCP_RESOURCE_BLOB_DIR} is not a directory")
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
            fd = os.open(path, flags, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(data)
        except OSError as e:
            return f"[binary content could not be saved in the sandbox: {e.strerror or e}]"
        entry["blobSavedTo"] = path
        kind = mime if isinstance(mime, str) and mime else "unknown type"
        return (f"[Resource from {server} at {entry['uri']}] Binary content ({kind}, "
                f"{len(data)} bytes) saved to {path}")  # fmt: skip
