"""A remote MCP server over MCP's Streamable HTTP transport, reached only through the
sandbox's egress proxy.

The sandbox has no route but `lo`: a remote server is reached through the proxy the
host offers (`egress_forward` sets the proxy variables), whose rules decide the host
(the allowlist, `network`, a question about an unknown host). A subagent without
egress has no proxy, and its remote servers are not started (`NoEgressError`, a
warning naming the server). Each JSON-RPC message is one POST; the answer is a JSON
document or an event stream (`text/event-stream`) whose `data:` lines carry it. The
session id the server gives at `initialize` (`Mcp-Session-Id`) goes with every later
message. Bodies are read up to `mcp_client.MAX_MESSAGE_BYTES`.

http:// and https:// (through the proxy's CONNECT, checked there like any tunnel,
with the image's CA certificates); the runner keeps `ssl` out of its start-up, so this
module, imported only when a remote server is configured, lets it back in, as
`tools.webfetch` does. Standard library.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys

if "ssl" in sys.modules and sys.modules["ssl"] is None:
    del sys.modules["ssl"]
    if "urllib.request" in sys.modules:
        importlib.reload(sys.modules["urllib.request"])

import urllib.error  # after ssl is let back in
import urllib.request

from sandbox_tools import wire_answers
from sandbox_tools.errors import ToolError
from sandbox_tools.jsontypes import JSONObject
from sandbox_tools.mcp_client import (
    MAX_MESSAGE_BYTES,
    PROTOCOL_VERSION,
    McpServerError,
    McpSession,
    answer_result,
)

SESSION_HEADER = "Mcp-Session-Id"
NOTIFY_TIMEOUT_S = 30.0
"""How long a notification's POST may take."""


class NoEgressError(McpServerError):
    """The subagent has no egress proxy, so no remote server can be reached."""


def has_egress() -> bool:
    names = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy")
    return any(os.environ.get(name) for name in names)


class HttpServer(McpSession):
    """One remote MCP server (Streamable HTTP), through the egress proxy."""

    def __init__(self, server: wire_answers.McpServer) -> None:
        self.name = server.name
        self.url = server.url
        self.headers = dict(server.headers)
        self.session: str | None = None
        self.failure = None
        self._next_id = 0
        if not self.url.startswith(("http://", "https://")):
            raise McpServerError(
                f"MCP server {self.name!r} not started: {self.url[:200]!r} is not an http:// "
                "or https:// URL"
            )
        if not has_egress():
            raise NoEgressError(
                f"MCP server {self.name!r} not started: this subagent has no network egress "
                "(`network: none`, or the run grants none), and a remote server is reached "
                "only through it; allow its host with --allow-domain or sandbox.network"
            )
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler())

    def _post(self, message: JSONObject, timeout_s: float) -> tuple[int, str, bytes]:
        headers = {
            **self.headers,
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        if self.session is not None:
            headers[SESSION_HEADER] = self.session
            headers["MCP-Protocol-Version"] = PROTOCOL_VERSION
        request = urllib.request.Request(
            self.url, data=json.dumps(message).encode(), headers=headers, method="POST"
        )
        try:
            with self._opener.open(request, timeout=max(0.1, timeout_s)) as response:
                if response.headers.get(SESSION_HEADER):
                    self.session = response.headers[SESSION_HEADER][:200]
                body = response.read(MAX_MESSAGE_BYTES + 1)
                kind = response.headers.get_content_type()
                return response.status, kind, body
        except urllib.error.HTTPError as e:
            detail = e.read(500).decode("utf-8", errors="replace")
            raise McpServerError(
                f"MCP server {self.name!r} ({self.url[:200]}): HTTP {e.code} {e.reason}"
                + (" (refused by the egress proxy: its host is not allowed)" if e.code == 403
                   else "") + (f": {' '.join(detail.split())[:300]}" if detail else "")
            ) from None  # fmt: skip
        except (urllib.error.URLError, OSError, ValueError) as e:
            reason = e.reason if isinstance(e, urllib.error.URLError) else e
            raise McpServerError(
                f"MCP server {self.name!r} ({self.url[:200]}) did not answer: {reason}"
            ) from None

    def request(self, method: str, params: JSONObject, timeout_s: float) -> JSONObject:
        if self.failure is not None:
            raise McpServerError(self.failure)
        self._next_id += 1
        ident = self._next_id
        message: JSONObject = {"jsonrpc": "2.0", "id": ident, "method": method, "params": params}
        _, kind, body = self._post(message, timeout_s)
        if len(body) > MAX_MESSAGE_BYTES:
            raise McpServerError(
                f"MCP server {self.name!r} sent an answer over {MAX_MESSAGE_BYTES} bytes"
            )
        for answer in _messages(kind, body):
            if answer.get("id") == ident and "method" not in answer:
                return answer_result(self.name, method, answer)
        raise ToolError(f"MCP server {self.name!r} sent no answer to {method}")

    def notify(self, method: str, params: JSONObject | None = None) -> None:
        message: JSONObject = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        # A notification has no answer; the next request says what is wrong.
        with contextlib.suppress(McpServerError):
            self._post(message, NOTIFY_TIMEOUT_S)


def _messages(kind: str, body: bytes) -> list[JSONObject]:
    """The JSON-RPC messages of an answer: a JSON document (one or a batch), or the
    `data:` events of an event stream."""
    texts: list[str] = []
    if kind == "text/event-stream":
        event: list[str] = []
        for line in [*body.decode("utf-8", errors="replace").splitlines(), ""]:
            if line.startswith("data:"):
                event.append(line[5:].lstrip(" "))
            elif not line and event:
                texts.append("\n".join(event))
                event = []
    else:
        texts.append(body.decode("utf-8", errors="replace"))
    found: list[JSONObject] = []
    for text in texts:
        try:
            doc = json.loads(text)
        except ValueError:
            continue
        for item in doc if isinstance(doc, list) else [doc]:
            if isinstance(item, dict):
                found.append(item)
    return found
