"""Which workspace paths sandboxes may not write, and the mounts that enforce it.

The workspace is container output: whatever a subagent leaves there, the host
may later run (git runs hooks, `core.fsmonitor` and friends from `.git`; warden
and Claude Code read settings, hooks and agent files from `.claude/`). So:

- `.claude/` is created (empty, owned like the workspace) before the first
  sandbox of a run when it is missing, and is read-only in every sandbox.
- `.git` is read-only **as a whole**. Anything short of that leaves a way for
  git to run code or look elsewhere: a writable `.git` lets a sandbox create
  `commondir`, `objects/info/alternates`, `worktrees/*/gitdir` or a second
  `config` through them, and a mount on `.git/config` alone moves with `.git`
  when `.git` is renamed. A mount point cannot be renamed or removed from
  inside, so `mv .git x` fails too. Committing needs a writable `.git` root
  (`index.lock` is renamed onto `index`, which fails on a bind-mounted file), so
  sandboxes read history (`status`, `diff`, `log`) and you commit after review.
- `.devcontainer/` is read-only as a whole: warden builds and runs what it names
  (a Dockerfile, `initializeCommand`-free images), so a sandbox must not plant or
  change one. A workspace without it gets an empty read-only placeholder for the
  run, as for `.git`, so no sandbox can create one. The root file
  `.devcontainer.json` is mounted read-only when it exists; one a sandbox creates
  is new content, which the trust record (`workspace.trust`) does not let in
  until a person has seen it and said yes.
- A workspace with no `.git` gets an empty, read-only placeholder directory
  for the run (git skips an empty `.git` and keeps looking upward), so a
  sandbox cannot plant a repository at the root; warden removes the
  placeholder when the last run on the workspace ends. `.git` below the root
  cannot be protected that way; the end-of-run report lists every one a run
  creates or changes.
- `--protect PATH` and the `warden.protect` settings key add paths.
- The policy's deny rules are walls too (`walls`): at each sandbox's start, what a
  `Read` deny matches is masked by an empty read-only file or directory, what an
  `Edit`/`Write` deny matches is mounted read-only.
- `warden exec` applies the same protections to its one command, and removes
  the `.claude`/`.git` placeholders it created when they are still empty.

Runs on one workspace share its placeholders. Each run holds a shared `flock`
on the workspace directory from `prepare` to `release`; a run removes
placeholders only when it can take the lock exclusively (no other run is live),
and a run that starts beside a live one adopts the empty `.git` it finds (the
other run's placeholder; `warden exec` adopts an empty `.claude` too), as does a
run that finds one made after it started (a run that took the lock just after
it, before it made its own). Without
that, a run that ended would remove the `.git` another run had just checked for
a sandbox it was starting, and that sandbox would fail to start. The lock is on
the directory itself, the one thing every run on it (whatever its state dir or
user) can name. A sandbox can take the same lock; the most it achieves is that
a placeholder outlives the runs (an empty directory), since warden never waits
on it for more than `HOLD_WAIT_S`. On a filesystem without locks each run
removes its own placeholders as it ends, as before.

Every mount source is checked here when the guard is made and again by the
backend immediately before the container is created (`Mount.confined_to`):
a source that is a symbolic link, has one on its way, or leaves the workspace
is refused with `UnsafeMountError`.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import posixpath
import stat
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.backend.contract import Mount
from orchestrator.backend.mounts import check_confined
from orchestrator.errors import ConfigError, UnsafeMountError
from orchestrator.locking import flock_within
from sandbox_tools.wire import WORKSPACE

if TYPE_CHECKING:
    from orchestrator.workspace.walls import DenyWall

log = logging.getLogger(__name__)

CLAUDE_DIR = ".claude"
GIT_DIR = ".git"
DEVCONTAINER_DIR = ".devcontainer"
DEVCONTAINER_FILE = ".devcontainer.json"
ALWAYS_PROTECTED = (CLAUDE_DIR, GIT_DIR, DEVCONTAINER_DIR, DEVCONTAINER_FILE)
"""Workspace paths read-only in every subagent sandbox, whatever the settings say
(`.devcontainer.json` only when it exists: a file cannot be a placeholder)."""
PLACEHOLDER_DIRS = (GIT_DIR, DEVCONTAINER_DIR)
"""Made empty for a run when missing, removed again when the last run ends."""
MAX_PROTECTED_PATHS = 64
"""Most extra protected paths (each is one bind mount per sandbox)."""
HOLD_WAIT_S = 2.0
"""Longest wait for the shared lock on the workspace (another run holds it
exclusively only while it removes its placeholders)."""


class ProtectedPathError(ConfigError):
    """A path given to `--protect` (or `warden.protect`) is unusable."""


def normalise_protected(path: str, workspace: Path) -> str:
    """A protected path as a relative, `..`-free path inside the workspace.

    Accepts relative paths, `/workspace/...` and absolute host paths inside the
    workspace. Raises ProtectedPathError otherwise.
    """
    text = path.strip()
    if not text:
        raise ProtectedPathError("an empty path cannot be protected")
    if text == WORKSPACE or text.startswith(WORKSPACE + "/"):
        text = text[len(WORKSPACE) :].lstrip("/")
    elif text.startswith("/"):
        try:
            text = str(Path(text).relative_to(workspace))
        except ValueError:
            raise ProtectedPathError(
                f"cannot protect {path}: it is outside the workspace {workspace}; "
                "give a path inside it (relative paths are relative to the workspace)"
            ) from None
    cleaned = posixpath.normpath(text)
    if cleaned in (".", "") or cleaned.startswith(".."):
        raise ProtectedPathError(
            f"cannot protect {path!r}: it must name a file or directory inside the workspace "
            "(not the workspace itself, nothing above it)"
        )
    return cleaned


@dataclass
class WorkspaceGuard:
    """The protections of one run's workspace. Make it with `prepare` before the
    first sandbox starts; `mounts()` is called for every sandbox as it starts."""

    workspace: Path
    protected: tuple[str, ...]
    """Relative paths mounted read-only, in mount order."""
    placeholders: list[str] = field(default_factory=list)
    """Directories warden created only for this run, or adopted from a run that was
    live when this one started (removed by `release` if empty and no run is live)."""
    leave_no_trace: bool = False
    """A `.claude` made for this run is a placeholder too (one-off `warden exec`)."""
    hold: int | None = None
    """A descriptor of the workspace directory holding its shared lock, or None
    when the lock could not be had (then `release` removes nothing, unless
    `unlocked`)."""
    absent_at_start: tuple[str, ...] = ()
    """Placeholder names missing when this run started: found empty later, another
    run that started meanwhile made them, and they are this run's to remove too."""
    unlocked: bool = False
    """The workspace's filesystem has no locks: runs on it cannot see each other,
    and `release` removes this run's placeholders as it ends."""
    walls: tuple[DenyWall, ...] = ()
    """The policy's deny rules as mounts, matched anew at each sandbox's start."""
    named: tuple[str, ...] = ()
    """Every protected path asked for, as relative paths: `protected` and the
    settings files' paths missing at the start (not mounted: nothing to mount). A
    subagent's change set may touch none of them (`apply.policy`): one working in a
    copy could otherwise create a missing one there and have it applied."""
    _closer: weakref.finalize[[int], WorkspaceGuard] | None = field(
        default=None, repr=False, compare=False
    )
    """Lets the lock go if the guard is dropped without `release`."""

    @classmethod
    def prepare(
        cls,
        workspace: Path,
        *,
        protect: Sequence[str] = (),
        optional: Sequence[str] = (),
        leave_no_trace: bool = False,
        walls: Sequence[DenyWall] = (),
    ) -> WorkspaceGuard:
        """Create what must exist, check every source, and return the guard.

        `protect` paths (from `--protect`) must exist; `optional` ones (from a
        settings file shared across workspaces) are skipped when missing.
        `leave_no_trace` (one-off `warden exec`) makes a created `.claude` a
        placeholder too, removed by `release` when it is still empty. `walls`: the
        run policy's deny rules (`walls.walls_of`), held as mounts in every sandbox.
        Raises UnsafeMountError, ProtectedPathError, WallError.
        """
        workspace = Path(os.path.realpath(workspace))
        extra = [normalise_protected(p, workspace) for p in protect]
        for rel in extra:
            if not os.path.lexists(workspace / rel):
                raise ProtectedPathError(
                    f"--protect {rel}: no such file or directory in {workspace}; create it "
                    "first (an empty directory is enough) or drop the flag"
                )
        missing = []
        for raw in optional:
            rel = normalise_protected(raw, workspace)
            if os.path.lexists(workspace / rel):
                extra.append(rel)
            else:
                missing.append(rel)
                log.info("protected path %s does not exist in %s; not mounted", rel, workspace)
        paths = list(dict.fromkeys([*ALWAYS_PROTECTED, *extra]))
        if len(paths) - len(ALWAYS_PROTECTED) > MAX_PROTECTED_PATHS:
            raise ProtectedPathError(
                f"more than {MAX_PROTECTED_PATHS} protected paths; protect their common "
                "parent directory instead"
            )
        adopted = (*PLACEHOLDER_DIRS, CLAUDE_DIR) if leave_no_trace else PLACEHOLDER_DIRS
        guard = cls(
            workspace,
            tuple(paths),
            leave_no_trace=leave_no_trace,
            walls=tuple(walls),
            named=tuple(dict.fromkeys([*paths, *missing])),
        )
        # Looked at before the lock: one missing now that a run finds made later was
        # made by another run that started meanwhile (`_ensure_dir` adopts it).
        guard.absent_at_start = tuple(d for d in adopted if not os.path.lexists(workspace / d))
        if not guard._hold():  # another run is live: its empty placeholders are ours too
            guard.placeholders += [d for d in adopted if _is_empty_dir(workspace / d)]
        try:
            guard.mounts()  # makes what must exist; refuses a bad source now
        except BaseException:
            guard.release()
            raise
        return guard

    def _hold(self) -> bool:
        """Take the shared lock on the workspace; whether no other run held it."""
        try:
            fd = os.open(self.workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            return self._without_locks(exc)
        try:
            alone = flock_within(fd, fcntl.LOCK_EX, 0)
            # From exclusive to shared is not atomic (the lock is dropped, then taken):
            # a run ending meanwhile may take it for a moment to remove its placeholders.
            shared = flock_within(fd, fcntl.LOCK_SH, HOLD_WAIT_S)
        except OSError as exc:  # not "held": this filesystem has no locks (ENOLCK...)
            os.close(fd)
            return self._without_locks(exc)
        if not shared:
            os.close(fd)
            log.warning(
                "%s is locked by something other than a warden run (a sandbox?); "
                "this run leaves its placeholder directories in place when it ends",
                self.workspace,
            )
            return False
        self.hold = fd
        self._closer = weakref.finalize(self, _close_quietly, fd)
        return alone

    def _without_locks(self, exc: OSError) -> bool:
        log.info("cannot lock %s to share it with other runs (%s)", self.workspace, exc)
        self.unlocked = True
        return True

    def _ensure_dir(self, relative: str, *, placeholder: bool) -> None:
        path = self.workspace / relative
        if not os.path.lexists(path):
            owner = os.stat(self.workspace)
            try:
                os.mkdir(path, 0o755)
            except FileExistsError:
                pass  # another run made it just now: adopted below
            else:
                with contextlib.suppress(PermissionError):
                    os.chown(path, owner.st_uid, owner.st_gid, follow_symlinks=False)
                if placeholder:
                    self.placeholders.append(relative)
                return
        if (
            relative in self.absent_at_start
            and not self.unlocked  # without locks, a run removes only what it made
            and relative not in self.placeholders
            and _is_empty_dir(path)
        ):
            # Another run, started after this one, made it: whichever ends last removes it.
            self.placeholders.append(relative)

    def mounts(self) -> list[Mount]:
        """Read-only mounts for one sandbox, computed and checked now (never cached:
        a sandbox that starts later gets the protections as they are then).

        Raises UnsafeMountError when a source became a link or left the workspace,
        WallError when the deny rules match more than a sandbox can hold.
        """
        # Either may be gone (the person removed it, or a run that could not take the
        # workspace's lock did): this run's next sandbox gets its own, never an
        # unguarded place where a repository or settings could be planted.
        self._ensure_dir(CLAUDE_DIR, placeholder=self.leave_no_trace)
        for placeholder in PLACEHOLDER_DIRS:
            self._ensure_dir(placeholder, placeholder=True)
        mounts = []
        for relative in self.protected:
            source = self.workspace / relative
            if not os.path.lexists(source) and (
                relative not in ALWAYS_PROTECTED or relative == DEVCONTAINER_FILE
            ):
                continue  # an optional path that is gone: the report lists it
            check_confined(self.workspace, source)
            mounts.append(
                Mount(
                    source=source,
                    target=f"{WORKSPACE}/{relative}",
                    read_only=True,
                    confined_to=self.workspace,
                )
            )
        return self._with_walls(mounts)

    def copy_mounts(self, copy: Path) -> list[Mount]:
        """Read-only mounts for a sandbox whose `/workspace` is the working copy `copy`
        (`isolation: worktree`): the workspace's own `.git` (read-only as a whole, so
        `git status`/`diff` work against its HEAD and index), the copy's own protected
        paths read-only, and the deny rules' walls matched in the copy."""
        self._ensure_dir(GIT_DIR, placeholder=True)
        check_confined(self.workspace, self.workspace / GIT_DIR)
        mounts = [
            Mount(
                source=self.workspace / GIT_DIR,
                target=f"{WORKSPACE}/{GIT_DIR}",
                read_only=True,
                confined_to=self.workspace,
            )
        ]
        for relative in self.protected:
            if relative == GIT_DIR:
                continue
            source = copy / relative
            if relative in (CLAUDE_DIR, DEVCONTAINER_DIR) and not os.path.lexists(source):
                os.mkdir(source, 0o755)  # read-only below: nothing can be planted there
            if not os.path.lexists(source):
                continue
            check_confined(copy, source)
            mounts.append(
                Mount(
                    source=source,
                    target=f"{WORKSPACE}/{relative}",
                    read_only=True,
                    confined_to=copy,
                )
            )
        return self._with_walls(mounts, copy)

    def _with_walls(self, mounts: list[Mount], root: Path | None = None) -> list[Mount]:
        """`mounts` and the deny rules' walls (a mask replaces a read-only mount of
        the same path; mount order is the engine's, parents first), matched in `root`
        (the workspace, or a task's working copy)."""
        if not self.walls:  # no deny rule to hold (`warden exec`): nothing to walk or import
            return list({m.target: m for m in mounts}.values())
        # `walls` reads the policy's path rules: `permissions`, which `warden exec` never needs.
        from orchestrator.workspace.walls import find_walled, mask_sources

        root = root or self.workspace
        walled = find_walled(root, self.walls, keep=self.protected)
        by_target = {m.target: m for m in mounts}
        for relative in walled.read_only:
            source = root / relative
            check_confined(root, source)
            by_target.setdefault(
                f"{WORKSPACE}/{relative}",
                Mount(source=source, target=f"{WORKSPACE}/{relative}", confined_to=root),
            )
        if walled.masked:
            empty_file, empty_dir = mask_sources()
            for relative in walled.masked:
                # The target must be the workspace's own path, no link on the way.
                info = check_confined(root, root / relative)
                mask = empty_dir if stat.S_ISDIR(info.st_mode) else empty_file
                target = f"{WORKSPACE}/{relative}"
                by_target[target] = Mount(source=mask, target=target, read_only=True)
        return list(by_target.values())

    def release(self) -> None:
        """Remove this run's placeholders that are still empty, unless another run
        on the workspace is live (it removes them when it ends); let the lock go."""
        fd, self.hold = self.hold, None
        if self._closer is not None:
            self._closer.detach()  # closed below: its number may be reused after
        if fd is None:
            if self.unlocked:
                self._remove_placeholders()
            self.placeholders.clear()
            return
        try:
            # Failing, this drops the shared lock too: the run is over either way.
            with contextlib.suppress(OSError):
                if flock_within(fd, fcntl.LOCK_EX, 0):
                    self._remove_placeholders()
        finally:
            _close_quietly(fd)
        self.placeholders.clear()

    def _remove_placeholders(self) -> None:
        for relative in dict.fromkeys(self.placeholders):
            with contextlib.suppress(OSError):
                os.rmdir(self.workspace / relative)


def _close_quietly(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


def _is_empty_dir(path: Path) -> bool:
    try:
        return os.path.isdir(path) and not os.path.islink(path) and not os.listdir(path)
    except OSError:
        return False


__all__ = ["ALWAYS_PROTECTED", "ProtectedPathError", "UnsafeMountError", "WorkspaceGuard"]
