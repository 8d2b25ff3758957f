"""Taking a `flock` that a sandbox can hold too, without waiting for ever.

Every sandbox sees the workspace, and a lock needs no write access: a subagent can
`flock` the workspace directory or its read-only `.claude` and keep the lock. So
where warden locks such a thing (`workspace.guard`, `permissions.always_allow`) it
tries without blocking until a bound it names, then says what it does instead.
The standard library's `fcntl.flock` blocks or fails at once; there is no timeout.
"""

from __future__ import annotations

import fcntl
import time

POLL_S = 0.01
"""Pause between tries while another holds the lock."""


def flock_within(fd: int, operation: int, wait_s: float) -> bool:
    """Take `operation` (`fcntl.LOCK_SH` or `LOCK_EX`) on `fd`, trying for up to
    `wait_s` (0: once); whether it was taken. On failure a shared lock `fd` held is
    gone too (the kernel drops it before it converts). OSError when the filesystem
    has no locks at all (ENOLCK)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, operation | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
        time.sleep(POLL_S)
