"""`python -m sandbox_tools`: run one subagent against the broker socket, then exit.

Imports stay lean here: `--help` needs only argparse, and the anthropic SDK is
imported once the spec has arrived.
"""

from __future__ import annotations

import argparse
import logging
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
    args = parser.parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr, level=logging.WARNING, format="warden runner: %(levelname)s %(message)s"
    )
    from sandbox_tools.runner import run

    return run(socket_path=args.socket, workspace=args.workspace)


if __name__ == "__main__":
    sys.exit(main())
