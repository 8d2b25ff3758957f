"""Changes a run made to configuration that runs code are held, not left in place:
the workspace gets the file back as it was before the run, and the run's version
is kept aside for a person to review and copy in (`HeldChanges`).

The built-in ask rules for `.vscode/`, shell rc files, `.npmrc` and the other
asking rows of `permissions.executed_paths` bind the file tools and the Bash
commands the analyser understands; a write through an interpreter
(`python3 -c "open('.bashrc', 'w')"`) is not seen by any parser. So the check is
on content, at the end of the run: every file created, changed or removed under
an asking row (the end-of-run report's comparison, `workspace.report`) is put back.
A file the run created is moved out of the workspace; one it changed or removed
is restored from the bytes read when the run started, and the run's version (if
any) kept. Nothing the run wrote there stays in the workspace, whoever approved
the call that wrote it: a person approves exactly that content afterwards
(`warden held RUN --apply`, `apply.held`: the change set shown, the yes bound to
its hash) from `DIR` (the run's `held/` directory under warden's state), whose
record (`HeldManifest`, beside it) says what was held and what became of it.

What is not held, and why (each is reported, as before, and said so):
- `.git` and `.claude` directories: at the workspace root they are read-only
  mounts; nested ones (a repository a subagent cloned) are reported only;
- a changed or removed file whose content was not kept at the start (larger than
  `KEEP_MAX_BYTES`, or past `KEEP_TOTAL_BYTES` in all): it cannot be put back;
- a change the run could not undo safely (the directory swapped for a link, the
  file replaced meanwhile).
Between the write and the end of the run the file is in the workspace: an editor
that has the folder open may read it then.

Every operation is relative to a directory descriptor opened from the workspace
down without following a link (`workspace.beneath`), and the kept file is opened
with `O_NOFOLLOW`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from orchestrator.permissions.executed_paths import EXECUTED_PATHS
from orchestrator.workspace import beneath

KEEP_MAX_BYTES = 1024 * 1024
"""Largest file whose content is kept when a run starts, to be put back."""
KEEP_TOTAL_BYTES = 64 * 1024 * 1024
"""Most bytes kept in all (the first files, in the report's order)."""
NOT_HELD_PATTERNS = frozenset({"/**/.git", "/**/.claude"})
"""Asking rows whose changes are reported, not held (see the module doc)."""
COPY_CHUNK = 1 << 20


def held_rows() -> frozenset[int]:
    """Indices of the asking rows of `EXECUTED_PATHS` whose changes are held."""
    return frozenset(
        i for i, row in enumerate(EXECUTED_PATHS)
        if row.asks and row.pattern not in NOT_HELD_PATTERNS
    )  # fmt: skip


@dataclass(frozen=True)
class Kept:
    """A file's content and mode, or a link's target, as the run started."""

    data: bytes | None
    mode: int
    link: str | None = None


class HeldChange(BaseModel):
    """One change a run made that was put back."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    """Relative to the workspace (written by a sandbox: shown as text only)."""
    change: str
    """created, modified or deleted."""
    kept_as: str | None = None
    """Where the run's version is (None: it removed the file)."""
    mode: int | None = None
    """The permission bits of the run's version (a regular file; the copy kept is 0600)."""


class NotHeld(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    why: str


def keep_originals(
    workspace: Path, entries: Mapping[str, object], rows: Iterable[str]
) -> dict[str, Kept]:
    """The content of the files (and links) under the held rows now, up to the bounds."""
    from orchestrator.permissions.paths import matches

    patterns = tuple(rows)
    kept: dict[str, Kept] = {}
    total = 0
    with beneath.workspace_root(workspace) as root:
        for rel in sorted(entries):
            if not any(matches(p, "/" + rel) for p in patterns):
                continue
            parent, name = posixpath.split(rel)
            with beneath.directory(
                root, tuple(parent.split("/")) if parent else (), workspace
            ) as fd:
                if fd is None:
                    continue
                try:
                    info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISLNK(info.st_mode):
                    with contextlib.suppress(OSError):
                        kept[rel] = Kept(None, 0, os.readlink(name, dir_fd=fd))
                    continue
                if not stat.S_ISREG(info.st_mode) or info.st_size > KEEP_MAX_BYTES:
                    continue
                if total + info.st_size > KEEP_TOTAL_BYTES:
                    continue
                data = beneath.read_regular(fd, name, KEEP_MAX_BYTES)
                if data is None or len(data) > KEEP_MAX_BYTES:
                    continue
                total += len(data)
                kept[rel] = Kept(data, stat.S_IMODE(info.st_mode))
    return kept


def hold(
    workspace: Path,
    changes: Iterable[tuple[str, str]],
    kept: Mapping[str, Kept],
    into: Path,
) -> tuple[list[HeldChange], list[NotHeld]]:
    """Put each `(path, change)` (files, links and other non-directories) back as
    `kept` says it was, keeping the run's version under `into` (see the module doc).
    A directory the run removed is made again for what is put back in it."""
    held: list[HeldChange] = []
    not_held: list[NotHeld] = []
    owner = os.stat(workspace)
    with beneath.workspace_root(workspace) as root:
        for rel, change in sorted(changes):
            parent, name = posixpath.split(rel)
            parts = tuple(parent.split("/")) if parent else ()
            fd = _parent(root, parts, workspace, create=change == "deleted", owner=owner)
            if fd is None:
                not_held.append(NotHeld(path=rel, why="its directory is gone or is a link now"))
                continue
            try:
                outcome = _hold_one(fd, rel, name, change, kept.get(rel), into, owner)
            except OSError as exc:
                outcome = NotHeld(path=rel, why=f"could not be put back ({exc.strerror})")
            finally:
                os.close(fd)
            if isinstance(outcome, HeldChange):
                held.append(outcome)
            else:
                not_held.append(outcome)
    return held, not_held


def _hold_one(
    fd: int,
    rel: str,
    name: str,
    change: str,
    before: Kept | None,
    into: Path,
    owner: os.stat_result,
) -> HeldChange | NotHeld:
    try:
        now = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        now = None
    if now is not None and stat.S_ISDIR(now.st_mode):
        return NotHeld(path=rel, why="a directory stands there now")
    if change != "created" and before is None:
        return NotHeld(
            path=rel,
            why=f"its content before the run was not kept (over {KEEP_MAX_BYTES} bytes, "
            f"or past {KEEP_TOTAL_BYTES} in all)",
        )
    kept_as = _keep_run_version(fd, rel, name, now, into) if now is not None else None
    if before is None:
        if now is not None:
            os.unlink(name, dir_fd=fd)
    else:
        _put_back(fd, name, before, owner)
    mode = stat.S_IMODE(now.st_mode) if now is not None and stat.S_ISREG(now.st_mode) else None
    return HeldChange(path=rel, change=change, kept_as=kept_as, mode=mode)


def _keep_run_version(fd: int, rel: str, name: str, now: os.stat_result, into: Path) -> str | None:
    """Copy what the run left at `name` to `into/rel` (a link: its target, as text,
    to `into/rel.link`); where it went (None: nothing to keep, e.g. a FIFO)."""
    target = into / rel
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if stat.S_ISLNK(now.st_mode):
        link = target.with_name(target.name + ".link")
        link.write_text(os.readlink(name, dir_fd=fd) + "\n", encoding="utf-8", errors="replace")
        return str(link)
    if not stat.S_ISREG(now.st_mode):
        return None
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    src = os.open(name, flags, dir_fd=fd)
    try:
        if not stat.S_ISREG(os.fstat(src).st_mode):
            return None
        out = os.open(
            target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        try:
            while chunk := os.read(src, COPY_CHUNK):
                os.write(out, chunk)
        finally:
            os.close(out)
    finally:
        os.close(src)
    return str(target)


def _put_back(fd: int, name: str, before: Kept, owner: os.stat_result) -> None:
    """Replace `name` with what it was (atomically: a temporary name, then rename)."""
    tmp = f".warden-held-{os.urandom(6).hex()}"
    if before.link is not None:
        os.symlink(before.link, tmp, dir_fd=fd)
    else:
        assert before.data is not None
        out = os.open(
            tmp,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            before.mode,
            dir_fd=fd,
        )
        try:
            os.write(out, before.data)
            os.fchmod(out, before.mode)
            if os.geteuid() == 0:
                os.fchown(out, owner.st_uid, owner.st_gid)
            os.fsync(out)
        finally:
            os.close(out)
    try:
        os.rename(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=fd)
        raise


def _parent(
    root: int | None, parts: tuple[str, ...], shown: Path, *, create: bool, owner: os.stat_result
) -> int | None:
    """The directory `parts` (made again when `create` and it is gone), without a link."""
    fd = beneath.open_directory(root, (), shown)
    for part in parts:
        if fd is None:
            return None
        nxt = beneath.directory_at(fd, part)
        if nxt is None and create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=fd)
                if os.geteuid() == 0:
                    os.chown(part, owner.st_uid, owner.st_gid, dir_fd=fd, follow_symlinks=False)
            nxt = beneath.directory_at(fd, part)
        os.close(fd)
        fd = nxt
    return fd


# ---- the record a later review reads (`apply.held`) ----------------------------------

HELD_MANIFEST = "held.json"
"""Beside the run's `held/` directory: what was held, and what became of it."""


class HeldManifest(BaseModel):
    """One run's held changes and their fate (written at the end of the run)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str
    workspace: str
    changes: list[HeldChange]
    outcome: str = "waiting"
    """waiting, applied or discarded."""
    decided_by: str = ""
    sha256: str = ""
    """The hash of the change set applied (when applied)."""


def manifest_path(held_dir: Path) -> Path:
    return held_dir.parent / HELD_MANIFEST


def save_manifest(held_dir: Path, manifest: HeldManifest) -> None:
    """Write `manifest` beside `held_dir` (a temporary file, then a rename)."""
    path = manifest_path(held_dir)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.urandom(4).hex()}")
    tmp.write_text(manifest.model_dump_json(indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def load_manifest(held_dir: Path) -> HeldManifest | None:
    try:
        return HeldManifest.model_validate_json(manifest_path(held_dir).read_bytes())
    except FileNotFoundError:
        return None


@dataclass(frozen=True)
class Present:
    """What a workspace path holds now: a regular file's bytes and mode, a link's
    target, or nothing (`kind` absent); `other` for anything else."""

    kind: str
    data: bytes | None = None
    mode: int = 0o644
    link: str | None = None


def present(workspace: Path, rel: str, max_bytes: int) -> Present:
    """`workspace/rel` read now, beneath the workspace, no link followed at any step
    (a directory on the way that is a link now: `other`)."""
    parent, name = posixpath.split(rel)
    with beneath.workspace_root(workspace) as root:
        if root is None:
            return Present("other")
        parts = tuple(parent.split("/")) if parent else ()
        with beneath.directory(root, parts, workspace) as fd:
            if fd is None:
                return Present("absent") if _gone(root, parts, workspace) else Present("other")
            return _present_at(fd, name, max_bytes)


def _gone(root: int, parts: tuple[str, ...], shown: Path) -> bool:
    """Some directory of `parts` does not exist (rather than being a link or a file)."""
    fd = beneath.open_directory(root, (), shown)
    for part in parts:
        if fd is None:
            return False
        try:
            os.stat(part, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            os.close(fd)
            return True
        nxt = beneath.directory_at(fd, part)
        os.close(fd)
        fd = nxt
    if fd is not None:
        os.close(fd)
    return False


def _present_at(fd: int, name: str, max_bytes: int) -> Present:
    try:
        info = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return Present("absent")
    if stat.S_ISLNK(info.st_mode):
        return Present("link", link=os.readlink(name, dir_fd=fd))
    if not stat.S_ISREG(info.st_mode):
        return Present("other")
    src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
    try:
        opened = os.fstat(src)
        if not stat.S_ISREG(opened.st_mode):
            return Present("other")
        chunks = []
        size = 0
        while (chunk := os.read(src, COPY_CHUNK)) and size <= max_bytes:
            chunks.append(chunk)
            size += len(chunk)
        if size > max_bytes:
            return Present("other")
        return Present("file", data=b"".join(chunks), mode=stat.S_IMODE(opened.st_mode))
    finally:
        os.close(src)


class ChangedSinceShownError(OSError):
    """The workspace file is not what the review showed as its current side."""


def replace(workspace: Path, rel: str, shown: Present, new: Present, max_bytes: int) -> None:
    """Make `workspace/rel` hold `new` (a file, a link, or nothing), beneath the
    workspace without following a link, atomically (a temporary name, then a
    rename), once it is checked to still hold `shown`. Raises
    ChangedSinceShownError when it does not, OSError when it cannot be done."""
    parent, name = posixpath.split(rel)
    owner = os.stat(workspace)
    with beneath.workspace_root(workspace) as root:
        parts = tuple(parent.split("/")) if parent else ()
        fd = _parent(root, parts, workspace, create=new.kind != "absent", owner=owner)
        if fd is None:
            if new.kind == "absent" and shown.kind == "absent":
                return
            raise ChangedSinceShownError(
                errno.ENOTDIR, f"{rel}: its directory is gone or is a link now"
            )
        try:
            now = _present_at(fd, name, max_bytes)
            if now != shown:
                raise ChangedSinceShownError(
                    errno.ESTALE, f"{rel} changed since the review showed it"
                )
            if new.kind == "absent":
                if now.kind != "absent":
                    os.unlink(name, dir_fd=fd)
                return
            _put_back(fd, name, Kept(data=new.data, mode=new.mode, link=new.link), owner)
        finally:
            os.close(fd)
