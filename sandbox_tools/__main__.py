"""`python -m sandbox_tools`: run one subagent against the broker socket, then exit.

Imports stay lean here: `--help` needs only argparse, and the anthropic SDK is
imported once the spec has arrived.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from sandbox_tools import wire


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sandbox_tools",
        description="Run a warden subagent: fetch its spec from the broker, run the agent "
        "loop, post the result. Exit status 0 once a result is posted (even a failed one), "
        "2 when the broker is unreachable, 1 on a bug.",
    )
    parser.add_argument(
        "--socket", default=wire.BROKER_SOCKET, help="broker socket (default: %(default)s)"
    )
    parser.add_argument(
        "--workspace", default=wire.WORKSPACE, help="workspace root (default: %(default)s)"
    )
    parser.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="warm start: import everything first, then wait up to SECONDS for the broker "
        "socket to appear (the host keeps such containers ready for the next task)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr, level=logging.WARNING, format="warden runner: %(levelname)s %(message)s"
    )
    from sandbox_tools.runner import run

    if args.wait > 0:
        import anthropic  # noqa: F401  # the expensive part, done before there is a task

        if not _wait_for_socket(args.socket, args.wait):
            return 0  # never given a task: nothing to report
    return run(socket_path=args.socket, workspace=args.workspace)


WAIT_POLL_S = 0.01
"""How often a warm runner looks for its broker socket."""


def _wait_for_socket(path: str, timeout_s: float) -> bool:
    """True once the socket exists and we may connect to it (the host makes it
    connectable for our uid only after it is fully set up)."""
    import os
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if os.path.exists(path) and os.access(path, os.W_OK):
            return True
        time.sleep(WAIT_POLL_S)
    return False


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # The result is posted; tearing down an interpreter that imported the SDK costs
    # 0.3-0.5 s of CPU per subagent, paid by every fan-out. Nothing is left to save.
    os._exit(code)
