"""The `warden` command's entry point: what must happen before the CLI loads.

`warden mcp` on stdio is started by an MCP client (Claude Code) that waits a few
seconds for its `initialize` answer. Its stdio front (`mcp_server.front`) answers from
the standard library alone, so it starts here, before click and the command's modules
load (on a loaded machine those take most of the time to that answer). Everything
else is `cli.main`'s.

May import: `cli`, `mcp_server.front` (only it, before the CLI).
"""

from __future__ import annotations

import sys

EARLY_FRONT_SKIPPED = frozenset({"--http", "-h", "--help"})
"""`warden mcp` arguments under which its stdio is not an MCP wire (HTTP; help text)."""


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["mcp"] and not EARLY_FRONT_SKIPPED & set(argv[1:]):
        from orchestrator.mcp_server.front import start_on_stdio

        start_on_stdio()
    from orchestrator.cli import main as cli_main

    cli_main()
