"""The run's own descriptor of its workspace, held for the whole run, and what it
says when the workspace's path no longer names that directory.

Sandboxes bind-mount the workspace directory, not its path: renamed, they keep
writing into it under its new name; deleted, their writes go into a directory
nothing can reach any more. The path a person knows then names nothing, or another
directory. `WorkspaceHold` opens the workspace once, before the first sandbox, and
compares the path with that descriptor (`problem`); the run watches it and stops
when they part (`runtime.session`), saying where the workspace went (the
descriptor's own name, from /proc) so nothing a subagent wrote is lost unsaid.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from orchestrator.errors import WardenError

DELETED_SUFFIX = " (deleted)"
"""How the kernel names a descriptor's directory once it has been removed."""


class WorkspaceGoneError(WardenError, FileNotFoundError):
    """The workspace was renamed, removed or replaced while a run used it."""


class WorkspaceHold:
    """A descriptor of the workspace directory, open from the run's start to its end."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self.fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        st = os.fstat(self.fd)
        self._identity = (st.st_dev, st.st_ino)
        self.lost: WorkspaceGoneError | None = None
        """Set once the path no longer names the held directory (`check`)."""

    def where(self) -> str:
        """Where the held directory is now, as the kernel names it."""
        try:
            return os.readlink(f"/proc/self/fd/{self.fd}")
        except OSError:
            return "(unknown)"

    def problem(self) -> str | None:
        """What happened to the workspace, when its path no longer names the held
        directory; None while it does."""
        try:
            st = os.stat(self.workspace)
            same = (st.st_dev, st.st_ino) == self._identity
        except FileNotFoundError:
            same = False
        except OSError:
            return None  # unreadable for a moment (permissions): not proof it moved
        if same:
            return None
        now = self.where()
        if now.endswith(DELETED_SUFFIX):
            fate = (
                "was deleted: what the subagents wrote after that was deleted with it "
                "(their transcripts are kept: warden logs TASK)"
            )
        elif os.path.lexists(self.workspace):
            fate = (
                f"was replaced by another directory; the one this run used is now {now}, "
                "and what the subagents wrote is there"
            )
        else:
            fate = f"was moved to {now}; what the subagents wrote is there"
        return (
            f"the workspace {self.workspace} {fate}. The run stopped its sandboxes; "
            "put the workspace back (or use its new path) and resume the tasks "
            "(warden resume)"
        )

    def check(self) -> WorkspaceGoneError | None:
        """`problem` as an error, kept in `lost` once found."""
        if self.lost is None and (problem := self.problem()) is not None:
            self.lost = WorkspaceGoneError(problem)
        return self.lost

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)
