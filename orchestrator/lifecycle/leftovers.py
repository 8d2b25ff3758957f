"""Temporary files a killed sandbox left in a workspace, and removing them.

Write and Edit (`sandbox_tools.tools.replace`) write the new content to
`.warden-tmp-<12 hex digits>` beside the target, fsync it and rename it over the
target; a sandbox killed between the two leaves that file behind. It is warden's own
(the exact name), and it holds nothing the target lacks: the rename never happened,
so the target kept its old content, whole. The commands that clean up after a death
remove them (`ps` and every command that opens the store, `run`, `resume`,
`cleanup`: the workspaces of the runs they find dead) and so does a run whose
sandboxes were stopped or killed, as it ends.

The walk never follows a link (`os.fwalk`; each name is removed relative to its
directory's descriptor, so a directory swapped for a link meanwhile leads nowhere),
is bounded (`MAX_ENTRIES`), and removes only regular files whose whole name matches.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from pathlib import Path

log = logging.getLogger(__name__)

TEMP_NAME = re.compile(r"\.warden-tmp-[0-9a-f]{12}")
"""The whole name of a Write/Edit temporary file (`sandbox_tools.tools.replace`)."""
MAX_ENTRIES = 200_000
"""Most directory entries one sweep looks at; a larger workspace is swept in part."""


def remove_temp_leftovers(workspace: Path, limit: int = MAX_ENTRIES) -> list[str]:
    """Remove the Write/Edit temporary files left in `workspace`; the paths removed.
    Never raises for what it finds (an unreadable directory is skipped)."""
    removed: list[str] = []
    seen = 0
    try:
        for top, dirs, files, top_fd in os.fwalk(workspace, follow_symlinks=False):
            seen += len(dirs) + len(files)
            for name in files:
                if TEMP_NAME.fullmatch(name) and _remove_regular(name, top_fd):
                    removed.append(os.path.join(top, name))
            if seen > limit:
                log.info("stopped looking for leftover temporary files in %s after %d entries",
                         workspace, limit)  # fmt: skip
                break
    except OSError as exc:
        log.debug("could not sweep %s for leftover temporary files: %s", workspace, exc)
    return removed


def _remove_regular(name: str, dir_fd: int) -> bool:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode):
            return False
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        return False
    return True


def remove_quietly(workspaces: list[str]) -> int:
    """`remove_temp_leftovers` for each workspace (distinct, existing); how many files
    went. Said once as a warning, so a person knows an interrupted Write left one."""
    removed: list[str] = []
    for workspace in dict.fromkeys(workspaces):
        path = Path(workspace)
        if path.is_dir():
            removed += remove_temp_leftovers(path)
    if removed:
        log.warning(
            "removed %d temporary file(s) that interrupted Write/Edit calls left (their "
            "targets kept their previous content): %s",
            len(removed),
            ", ".join(removed[:5]) + (" ..." if len(removed) > 5 else ""),
        )
    return len(removed)
