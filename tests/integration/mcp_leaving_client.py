"""An MCP client that goes away mid-call, for test_mcp_server: `python3 -m
tests.integration.mcp_leaving_client STATUS STDERR -- WARDEN ARGV…`.

It starts the server with the `mcp` SDK's own stdio client, through `sh`, which
writes the server's exit status to STATUS once it ends (the server's stderr goes to
STDERR), initializes, prints `calling` and calls `Task` for the SLEEPER subagent,
which never ends by itself. The test then kills this process: its pipes close under
the server in the middle of the call."""

from __future__ import annotations

import asyncio
import os
import shlex
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def main() -> None:
    status, stderr, argv = sys.argv[1], sys.argv[2], sys.argv[4:]
    script = f"{shlex.join(argv)}; echo $? > {shlex.quote(status)}"
    params = StdioServerParameters(command="sh", args=["-c", script], env=dict(os.environ))
    with open(stderr, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (r, w), ClientSession(r, w) as session:
            await session.initialize()
            print("calling", flush=True)
            await session.call_tool(
                "Task", {"description": "sleep", "prompt": "SLEEPER", "subagent_type": "bash"}
            )


if __name__ == "__main__":
    asyncio.run(main())
