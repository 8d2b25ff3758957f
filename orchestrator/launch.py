"""The `warden` command's entry point: what must happen before the CLI loads.

`warden mcp` on stdio is started by an MCP client (Claude Code) that waits a few
seconds for its `initialize` answer, and that ends it by killing it half a second
after it closes. So, before click and the command's modules load (on a loaded
machine those take most of the time to that answer), the stdio front
(`mcp_server.front`, the standard library alone) answers the client's first message,
the spawned process splits off the process that holds the session
(`mcp_server.keeper`: the spawned one only waits and passes stop signals on, and the
session's end never depends on it being given time), and that process starts the
front on the rest of the stream. The commands that import with the cyclic garbage
collector off (`START_UP_WITHOUT_GC`) turn it off here, so click loads without it
too. Everything else is `cli.main`'s.

May import: `cli`, `mcp_server.keeper` and `mcp_server.front` (only they, before the
CLI).
"""

from __future__ import annotations

import sys

from orchestrator import START_UP_WITHOUT_GC

EARLY_FRONT_SKIPPED = frozenset({"--http", "-h", "--help"})
"""`warden mcp` arguments under which its stdio is not an MCP wire (HTTP; help text)."""


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] and argv[0] in START_UP_WITHOUT_GC:
        import gc

        gc.disable()
    if argv[:1] == ["mcp"] and not EARLY_FRONT_SKIPPED & set(argv[1:]):
        from orchestrator.mcp_server.front import prepare_on_stdio, start_on_stdio

        # The client's `initialize` is answered first, then the session's process
        # forked (a new process can wait for the CPU on a busy machine).
        wire = prepare_on_stdio().wire_fds()
        from orchestrator.mcp_server import keeper

        keeper.split(wire)  # returns in the session's process
        start_on_stdio()
        keeper.bind_to_parent()
    from orchestrator.cli import main as cli_main

    cli_main()
