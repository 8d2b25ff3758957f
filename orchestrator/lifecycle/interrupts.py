"""SIGINT, SIGTERM and SIGHUP all mean "stop": for `warden run` and `warden resume`.

`timeout`, CI runners and systemd send SIGTERM; a closed terminal sends SIGHUP.
Each cancels the command's main task exactly like Ctrl-C, so the same code path
stops every subagent, removes their containers and records `stopped`. The exit
status is the shell's convention, 128 + the signal number (130, 143, 129).

Stopping is bounded: if the clean stop has not finished STOP_GRACE_S after the
first signal (an engine that no longer answers, say), the process exits anyway
with the same status; the next warden command then finds its runs by their dead
owner and marks them interrupted.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
from collections.abc import Coroutine

from orchestrator.exit_codes import ExitCode

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
STOP_GRACE_S = 30.0
"""Longest a stop may take after the first signal before the process exits anyway."""


class Stopped:
    """Which stop signal arrived first (None: none did), or whether the run's own
    deadline stopped it first (`timed_out`)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.timed_out = False

    @property
    def exit_code(self) -> int:
        if self.timed_out:
            return int(ExitCode.TIMED_OUT)
        return 128 + (self.signum or signal.SIGINT)

    @property
    def stopping(self) -> bool:
        return self.timed_out or self.signum is not None

    @property
    def name(self) -> str:
        return signal.Signals(self.signum or signal.SIGINT).name


def run_stoppable(
    main: Coroutine[object, None, int],
    stopped: Stopped | None = None,
    deadline_s: float | None = None,
) -> int:
    """`asyncio.run(main)`, where a stop signal (or `deadline_s` passing) cancels
    `main`; returns its exit code, or 128 + the signal number when a signal stopped
    it (ExitCode.TIMED_OUT when the deadline did)."""
    stopped = stopped or Stopped()

    async def guarded() -> int:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None

        def stop() -> None:
            _exit_after(STOP_GRACE_S, stopped.exit_code)
            task.cancel()

        def on_signal(signum: int) -> None:
            if stopped.stopping:
                return  # already stopping; the grace timer bounds it
            stopped.signum = signum
            stop()

        def on_deadline() -> None:
            if not stopped.stopping:
                stopped.timed_out = True
                stop()

        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, on_signal, sig)
        timer = loop.call_later(deadline_s, on_deadline) if deadline_s is not None else None
        try:
            return await main
        finally:
            if timer is not None:
                timer.cancel()
            for sig in STOP_SIGNALS:
                loop.remove_signal_handler(sig)

    try:
        code = asyncio.run(guarded())
    except (asyncio.CancelledError, KeyboardInterrupt):
        return stopped.exit_code
    return stopped.exit_code if stopped.stopping else code


def _exit_after(seconds: float, code: int) -> None:
    def give_up() -> None:
        sys.stderr.write(
            f"warden: the stop took longer than {seconds:g} s; exiting anyway. The next "
            "warden command marks this run interrupted; `warden cleanup` removes what is left\n"
        )
        sys.stderr.flush()
        os._exit(code)

    timer = threading.Timer(seconds, give_up)
    timer.daemon = True
    timer.start()
