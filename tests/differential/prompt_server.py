"""A tiny MCP server for Claude Code's `--permission-prompt-tool`: it records that
Claude Code asked (one JSON line per question, to the file named by
`DIFF_ASK_LOG`) and refuses, so "ask" is told apart from "deny" and nothing asked
runs. Run as `python3 -m tests.differential.prompt_server`."""

from __future__ import annotations

import json
import os

from mcp.server.mcpserver import MCPServer

from tests.differential.claude_side import ASKED

server = MCPServer("warden-diff")


@server.tool(structured_output=False)
def approve(tool_name: str, input: dict[str, object], tool_use_id: str = "") -> str:
    """Record the question and refuse it."""
    with open(os.environ["DIFF_ASK_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps({"tool_name": tool_name, "input": input, "id": tool_use_id}) + "\n")
    return json.dumps({"behavior": "deny", "message": ASKED})


if __name__ == "__main__":
    server.run()
