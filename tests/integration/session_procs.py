"""For the tests of how `warden mcp` ends: a machine kept busy, and the processes of
one warden session (found by the state dir in their environment, which every
process warden starts inherits), so a test waits until the session has really
ended instead of sleeping."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BUSY_LOOPS = 2
"""Processes spinning beside a loaded case: one per core here."""


@contextmanager
def busy_machine(loops: int = BUSY_LOOPS) -> Iterator[None]:
    """`loops` processes keeping the CPUs busy while the block runs (always stopped)."""
    spinning = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(loops)]
    try:
        yield
    finally:
        for proc in spinning:
            proc.kill()
            proc.wait()


def session_processes(state_dir: Path) -> list[int]:
    """The pids of the processes whose environment names `state_dir` as
    WARDEN_STATE_DIR (this test process excluded)."""
    mark = f"WARDEN_STATE_DIR={state_dir}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if mark in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def wait_until_ended(state_dir: Path, timeout_s: float = 120) -> None:
    """Wait until no process of the session with `state_dir` is left (generous: a
    wait, never a measurement); fail naming them after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while left := session_processes(state_dir):
        if time.monotonic() > deadline:
            raise AssertionError(f"the session's processes {left} still run after {timeout_s:g} s")
        time.sleep(0.1)
