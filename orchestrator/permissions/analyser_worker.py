"""One Bash analyser worker process (see `analyser_bound`, which starts it).

Owns the worker's side of the socket: it limits its own address space, loads the
parsers, says it is ready, then answers each command line with its `ShellAnalysis`
until warden closes the socket. Started as `python -I -c` with warden's own import
path, so it imports the modules warden imported and nothing from its working
directory.
"""

from __future__ import annotations

import contextlib
import resource
from multiprocessing.connection import Connection

from orchestrator.permissions.shell import ShellAnalysis, analyse

READY = "ready"
WORKER_MEMORY_BYTES = 1024**3
"""Address space of one worker: a parse that needs more fails in the worker (asks)."""


def serve(fd: int) -> None:
    """Analyse each command line received on socket `fd`; answer its analysis."""
    conn = Connection(fd)
    with contextlib.suppress(ValueError, OSError):  # a limit the platform refuses
        resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY_BYTES, WORKER_MEMORY_BYTES))
    analyse("true")  # load the parsers before saying ready
    # Warden may be gone at any point (a run that ends while its workers start): a
    # closed socket ends the worker quietly, never with a traceback on the run's stderr.
    with contextlib.suppress(EOFError, OSError):
        conn.send(READY)
        while True:
            command = conn.recv()
            result: ShellAnalysis | None = None
            if isinstance(command, str):
                try:
                    result = analyse(command)
                except MemoryError:
                    result = ShellAnalysis(problems=["the analyser ran out of memory on it"])
            conn.send(result)
