"""The Bash analyser's time bound: deciding attacker-written text never stalls warden.

Owns where one command line is analysed and for how long (issue 32). tree-sitter's
parse holds the interpreter lock, so a slow parse in warden's process stops every
sandbox's calls, not only the one being decided. So:

1. `shell.refused_shape` refuses, by linear counts and without a parse, the shapes
   whose parse grows faster than the text (here-documents, nesting, separators,
   words, length): such a line asks at once.
2. A line of at most `INLINE_CHARS` characters is analysed in this process: its
   worst shape costs a few milliseconds (`bench/bench_analyser_bound.py`), less than
   sending it elsewhere would save, and nearly every command an agent runs is short.
3. A longer line goes to a warm worker process (`AnalyserBound.workers` of them).
   One that has not answered within `AnalyserBound.deadline_ms` is killed (a new
   one is started in its place) and the call asks, saying why; a call also waits at
   most the deadline for a free worker. Never an allow: an unanalysed line has a
   problem, and a command with problems is never allowed by a rule.

Workers (`analyser_worker`) are fresh interpreters, never a `fork` of warden's
threaded process; each has an address-space limit so a parse that balloons fails
there, not on the host.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import socket
import subprocess
import sys
import threading
from multiprocessing.connection import Connection

from orchestrator.config import AnalyserBound
from orchestrator.permissions.analyser_worker import READY
from orchestrator.permissions.shell import ShellAnalysis, analyse, refused_shape

log = logging.getLogger(__name__)

INLINE_CHARS = 256
"""Longest command line analysed in warden's own process. Its worst shape found (a
list or pipeline of 128 commands) costs about 3 ms on a quiet 2-core machine and
15-20 ms at load 10 (`bench/bench_analyser_bound.py`, which also shows the worker
hop costs about 0.2 ms); nearly every command an agent runs is shorter."""
WORKER_START_S = 60.0
"""Longest a new worker may take to import the analyser before it counts as failed."""
_WORKER_MAIN = (
    "import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
    "from orchestrator.permissions.analyser_worker import serve; serve(int(sys.argv[2]))"
)


def _import_path() -> list[str]:
    """warden's own import path, absolute (the worker's current directory is warden's,
    but `-I` keeps it off the path unless warden itself imports from it)."""
    return [os.path.abspath(p) for p in sys.path]


def deadline_problem(bound: AnalyserBound) -> str:
    """The problem of a line whose analysis did not finish within the deadline."""
    return (
        f"too large or complex to analyse within {bound.deadline_ms} ms, so it was not "
        "checked against deny rules: split it into smaller commands, or write long "
        "text with the Write tool (WARDEN_ANALYSER_DEADLINE_MS sets the bound)"
    )


def _asked(problem: str) -> ShellAnalysis:
    return ShellAnalysis(problems=[problem], settled=False)


class _Worker:
    """One worker process and our end of its socket. A plain `python -I -c` child, not a
    `multiprocessing` one: `spawn` re-imports the caller's `__main__`, which a script
    embedding warden need not guard."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        try:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-I",
                    "-c",
                    _WORKER_MAIN,
                    json.dumps(_import_path()),
                    str(theirs.fileno()),
                ],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                close_fds=True,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.conn = Connection(ours.detach())

    def ready(self) -> bool:
        try:
            return bool(self.conn.poll(WORKER_START_S)) and self.conn.recv() == READY
        except (EOFError, OSError):
            return False

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        self.conn.close()


class AnalyserPool:
    """Worker processes that analyse long command lines within a deadline."""

    def __init__(self, bound: AnalyserBound) -> None:
        self.bound = bound
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._lock = threading.Lock()
        self._live = 0  # started or starting
        self._ever_ready = threading.Event()
        self._closed = False
        self.killed = 0
        """Workers killed at the deadline so far (for tests and `warden doctor`)."""

    def warm(self) -> None:
        """Start workers (in the background) until `bound.workers` live."""
        with self._lock:
            while not self._closed and self._live < self.bound.workers:
                self._live += 1
                threading.Thread(target=self._start_one, name="analyser-start", daemon=True).start()

    def _start_one(self) -> None:
        worker: _Worker | None = None
        try:
            worker = _Worker()
            if worker.ready():
                with self._lock:
                    closed = self._closed
                if not closed:
                    self._ever_ready.set()
                    self._idle.put(worker)
                    return
        except Exception:  # never leave the pool one short for good
            log.exception("could not start a Bash analyser worker")
        if worker is not None:
            worker.kill()
        with self._lock:
            self._live -= 1

    def _retire(self, worker: _Worker) -> None:
        worker.kill()
        with self._lock:
            self._live -= 1
        self.warm()

    def analyse(self, command: str) -> ShellAnalysis:
        """`command`'s analysis by a worker, or a problem when none answered in time."""
        self.warm()
        deadline = self.bound.deadline_ms / 1000
        # Until a first worker is up (warden just started), wait for it to start: that
        # is not attacker-made. After, a line waits at most the deadline for a worker.
        wait = deadline if self._ever_ready.is_set() else WORKER_START_S
        try:
            worker = self._idle.get(timeout=wait)
        except queue.Empty:
            return _asked(
                f"no analyser worker was free within {self.bound.deadline_ms} ms (others "
                "are analysing long command lines), so it was not checked against deny "
                "rules: try again, or split it into smaller commands"
            )
        try:
            worker.conn.send(command)
            if worker.conn.poll(deadline):
                result = worker.conn.recv()
                if isinstance(result, ShellAnalysis):
                    self._idle.put(worker)
                    return result
                problem = "the analyser's worker answered nothing usable"
            else:
                self.killed += 1
                problem = deadline_problem(self.bound)
        except (EOFError, OSError) as exc:
            problem = f"the analyser's worker failed ({type(exc).__name__})"
        self._retire(worker)
        return _asked(problem)

    def close(self) -> None:
        """Kill every worker; later calls start none."""
        with self._lock:
            self._closed = True
        while True:
            try:
                self._idle.get_nowait().kill()
            except queue.Empty:
                return


_pool: AnalyserPool | None = None
_bound = AnalyserBound()
_pool_lock = threading.Lock()


def configure(bound: AnalyserBound) -> None:
    """Use `bound` from now on (a run calls it with its settings'); workers of another
    bound are stopped."""
    global _pool, _bound
    with _pool_lock:
        if bound == _bound:
            return
        _bound = bound
        old, _pool = _pool, None
    if old is not None:
        old.close()


def pool() -> AnalyserPool:
    """The process's worker pool (started on first use, then kept warm)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = AnalyserPool(_bound)
        found = _pool
    found.warm()
    return found


def analyse_bounded(command: str) -> ShellAnalysis:
    """`shell.analyse(command)` within the bound: a shape refused unparsed, a short line
    here, a long one in a worker under the deadline. The caller may change the result."""
    refused = refused_shape(command)
    if refused is not None:
        return ShellAnalysis(problems=[refused])
    if len(command) <= INLINE_CHARS:
        return analyse(command)
    return pool().analyse(command)
