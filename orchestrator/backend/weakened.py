"""The host-side guards this warden process cannot give its sandboxes, said once.

Two of the disk and mount guards need privileges a non-root warden lacks; without
them warden falls back to a weaker guard rather than refusing to run (the
ordinary non-root user, with the engine's socket, is a supported set-up):

- the kernel's exit records (taskstats, CAP_NET_ADMIN): without them the disk
  write meter counts the container's PID namespace, which a process that ignores
  SIGCHLD can escape with what its children wrote (`exits`, `disk`);
- pinned mount sources (root: a bind mount of exactly what the check opened):
  without it the check alone applies, so a link planted in the workspace between
  warden's check and the container's start could be followed (`mounts`).

A run says each one as a warning and as a run event (`sandbox_guard_weakened`,
so a CI log and `warden logs` show it), `warden exec` as a warning.
"""

from __future__ import annotations

import os

from orchestrator.backend import exits
from orchestrator.backend.contract import DiskLimits

MOUNTS_NOT_PINNED = (
    "mount sources (the workspace's protected paths) are checked but not pinned, "
    "which needs root: a link planted in the workspace between warden's check and the "
    "container's start could be followed; run warden as root to close this"
)


def weakened_guards(disk: DiskLimits) -> list[str]:
    """What this process cannot guard, for sandboxes with these disk limits (each a
    sentence naming what is missing and the fix); empty when nothing is."""
    missing = []
    if disk.write_limit_bytes and exits.ExitRecords.shared() is None:
        missing.append(
            f"the kernel's exit records cannot be read ({exits.ExitRecords.unavailable()}): "
            "a sandbox process that ignores SIGCHLD can hide what its children write from "
            "the disk write limit (the per-file limit and the floors still hold); run "
            "warden as root (it needs CAP_NET_ADMIN) to close this"
        )
    if os.geteuid() != 0:
        missing.append(MOUNTS_NOT_PINNED)
    return missing
