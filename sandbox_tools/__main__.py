"""`python -m sandbox_tools`: run one subagent against the broker socket, then exit.

Imports stay lean: the runner uses only the standard library, `--help` needs only
argparse, and a warm sandbox imports the runner before it waits for its task.
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
        help="warm start: import the runner first, then wait up to SECONDS for the host to "
        "hand this sandbox a task (it keeps such containers ready); exit at once if the "
        "host goes away",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr, level=logging.WARNING, format="warden runner: %(levelname)s %(message)s"
    )
    from sandbox_tools.seal import refuse_fallocate

    problem = refuse_fallocate()  # before any tool runs: every tool process inherits it
    if problem is not None:
        logging.warning(
            "fallocate stays allowed (%s); the host's free-space floor still holds", problem
        )
    from sandbox_tools import image_env

    image_env.restore()  # sealed now: the image's environment is for the tools' commands
    # http.client imports ssl for HTTPS, which the broker's Unix socket never needs;
    # ssl is about a third of the runner's import time. A None entry makes that
    # optional import fail at once. Only here, in the runner's own process (tools
    # run in subprocesses), never when the host imports sandbox_tools.
    sys.modules.setdefault("ssl", None)  # type: ignore[arg-type]
    from sandbox_tools.runner import run

    if args.wait > 0:
        hold = os.path.join(os.path.dirname(args.socket), os.path.basename(wire.WARM_HOLD_SOCKET))
        if not _wait_for_task(hold, args.wait):
            return 0  # never given a task: nothing to report
    from sandbox_tools import egress_forward

    egress_forward.offer(os.path.dirname(args.socket))  # only when the host offers egress
    return run(socket_path=args.socket, workspace=args.workspace, watch_broker=True)


def _wait_for_task(hold_path: str, timeout_s: float) -> bool:
    """Block on the host's hold socket until it says go (True), says bye, drops the
    connection because the orchestrator died, or `timeout_s` passes (False).
    No polling: one blocking read."""
    import socket

    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s)
            sock.connect(hold_path)
            answer = sock.recv(16)
    except OSError as exc:  # refused or missing: the host is gone; timeout: never used
        print(f"warden runner: warm sandbox not used ({exc.strerror or exc})", file=sys.stderr)
        return False
    return answer == wire.WARM_GO


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # The result is posted and the outbox flushed; nothing is left to save, and the
    # watchdog thread may still be blocked in recv.
    os._exit(code)
