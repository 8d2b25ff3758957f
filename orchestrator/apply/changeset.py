"""The vocabulary of a reviewed apply: what changed (`FileChange`), all of one
subagent's changes as one decision (`ChangeSet`, identified by the hash of its
canonical JSON), where the new bytes are kept (`ContentStore`), what became of it
(`ApplyDecision`), and the question the run's approvers are asked
(`ApplyReview`).

Trust binds to content: a person's yes names a change set's `sha256`, and that
hash covers every path, mode, link target and content hash in it; the bytes the
review shows and the apply writes are read from the `ContentStore` by their
sha256 (checked again on every read), never from the working copy a sandbox may
still be changing. Every name and link target in a change set is attacker-written
text: it is data here, and made safe to show by `render`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from orchestrator.errors import WardenError
from orchestrator.jsontypes import JSONObject
from orchestrator.permissions.approvers import ApprovalQuestion

APPLY_TOOL = "Apply"
"""The tool name an `ApplyReview` is asked under (what channels that do not know
an apply review show, and what the audit names)."""

ChangeKind = Literal["added", "modified", "removed", "mode_changed", "symlink", "submodule"]
"""What happened at a path: a file `added` / `modified` / `removed`, only its
executable bit changed (`mode_changed`), a symbolic link added, changed or put in
place of a file (`symlink`), or a submodule's pointer moved (`submodule`)."""

EntryType = Literal["file", "symlink", "submodule", "dir"]
"""What a path holds on one side of a change ("dir": an empty directory, only ever
the old side, where the subagent put a file or link in its place or above it)."""

SHA256_RE = re.compile(r"[0-9a-f]{64}")

Outcome = Literal[
    "rejected_by_policy", "offered", "applied", "conflicted", "rejected_by_person", "pending"
]
"""What became of a change set: policy refused it before anyone was asked; it is on
offer to a person; it was merged into the workspace; the merge met changes it would
overwrite (nothing applied, it stays pending); a person said no (it stays for later);
it waits (`--apply never`, or no answer yet)."""


class ApplyError(WardenError):
    """Root of the reviewed-apply errors."""


class ContentMissingError(ApplyError, LookupError):
    """The content store has no (intact) copy of a change's content: the change set
    can no longer be applied as reviewed; discard it (`warden discard TASK`)."""


class FileChange(BaseModel):
    """One path's change, as the host saw it in the working copy."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    """POSIX path relative to the workspace root (attacker-chosen text)."""
    kind: ChangeKind
    """What happened there."""
    old_type: EntryType | None = None
    """What the path held before (None: nothing)."""
    new_type: EntryType | None = None
    """What it holds now (None: removed)."""
    old_sha256: str | None = None
    """sha256 of the old file content (None: no old regular file); the bytes are in
    the `ContentStore` too, so a review can show both sides."""
    new_sha256: str | None = None
    """sha256 of the new file content (None: no new regular file); the bytes are in
    the `ContentStore` unless `stored` is false."""
    old_mode: int | None = None
    """Permission bits before (`0o644`, `0o755`; None: no old regular file)."""
    new_mode: int | None = None
    """Permission bits now."""
    binary: bool = False
    """The new (or, when removed, the old) content is not text (a NUL byte, or not UTF-8)."""
    old_size: int | None = None
    """Size in bytes before."""
    new_size: int | None = None
    """Size in bytes now."""
    old_link_target: str | None = None
    """The old symbolic link's target, as raw text."""
    link_target: str | None = None
    """The new symbolic link's target, as raw text (never followed)."""
    old_commit: str | None = None
    """A submodule's commit before."""
    new_commit: str | None = None
    """A submodule's commit now."""
    hard_link: bool = False
    """The new file had more than one hard link in the copy when it was read (policy
    refuses it: its content may be shared with a file the change does not name)."""
    stored: bool = True
    """False when the new content was too large to keep (`size cap`): policy rejects
    such a change, and it can never be applied."""

    @model_validator(mode="after")
    def _hashes(self) -> Self:
        for value in (self.old_sha256, self.new_sha256):
            if value is not None and not SHA256_RE.fullmatch(value):
                raise ValueError(f"not a sha256: {value!r}")
        return self


class ChangeSet(BaseModel):
    """All of one subagent's changes, decided as one: a person's yes (and the audit)
    names `sha256`, the hash of the canonical JSON of every other field."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str = ""
    """The run the task belonged to."""
    task_id: str
    """The subagent's task id (what `warden apply TASK` names)."""
    agent: str
    """Its agent type."""
    base: str
    """What the working copy started from: the workspace's HEAD commit (git) or a
    snapshot id (`snapshot:` and the hash of the copied tree)."""
    changes: tuple[FileChange, ...]
    """Sorted by path; at most one per path."""
    sha256: str = ""
    """The hash of the canonical JSON of the fields above; computed when empty,
    checked when given (a stored change set that does not match is refused)."""

    @model_validator(mode="after")
    def _identity(self) -> Self:
        paths = [c.path for c in self.changes]
        if paths != sorted(paths) or len(set(paths)) != len(paths):
            raise ValueError("a change set's changes are sorted by path, one per path")
        expected = self.canonical_hash()
        if not self.sha256:
            object.__setattr__(self, "sha256", expected)
        elif self.sha256 != expected:
            raise ValueError(
                "the change set's sha256 does not match its content: it was altered after "
                "it was computed; discard it (warden discard TASK)"
            )
        return self

    def canonical_json(self) -> str:
        """sort_keys, no spaces, UTF-8 text: the bytes `sha256` is taken of."""
        body = self.model_dump(mode="json", exclude={"sha256"})
        return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    def canonical_hash(self) -> str:
        return hashlib.sha256(self.canonical_json().encode("utf-8", "surrogatepass")).hexdigest()

    def summary(self) -> JSONObject:
        """A short JSON account (path, kind, sizes, hash): what a channel that knows
        nothing of apply reviews shows, and what the audit keeps."""
        return {
            "task_id": self.task_id,
            "agent": self.agent,
            "base": self.base,
            "sha256": self.sha256,
            "changes": [
                {"path": c.path, "kind": c.kind, "new_size": c.new_size, "binary": c.binary}
                for c in self.changes
            ],
        }


STORE_DIR_MODE = 0o700
"""The content store is host-private: no sandbox mounts it, no other user reads it."""
COPY_CHUNK = 1 << 20


class ContentStore:
    """Content-addressed bytes on the host, by sha256: written once (temp file +
    rename), checked against their name on every read."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True, mode=STORE_DIR_MODE)
        os.chmod(root, STORE_DIR_MODE)

    def _path(self, sha256: str) -> Path:
        if not SHA256_RE.fullmatch(sha256):
            raise ContentMissingError(f"not a content hash: {sha256!r}")
        return self.root / sha256[:2] / sha256

    def has(self, sha256: str) -> bool:
        return self._path(sha256).is_file()

    def put(self, data: bytes) -> str:
        """Keep `data`; its sha256."""
        digest = hashlib.sha256(data).hexdigest()
        if not self._refresh(digest):
            self._write(digest, [data])
        return digest

    def _refresh(self, sha256: str) -> bool:
        """Whether `sha256` is kept; if so its age starts again (pruning keeps young
        content, so content just named again is never removed under its writer)."""
        try:
            os.utime(self._path(sha256))
        except FileNotFoundError:
            return False
        except PermissionError:
            return self.has(sha256)
        return True

    def put_fd(self, fd: int, limit: int) -> tuple[str, int, bool]:
        """Copy the open file `fd` (from its current offset) into the store, up to
        `limit` bytes: `(sha256, size, stored)`. Past `limit` the content is hashed
        to the end but not kept (`stored` false)."""
        digest = hashlib.sha256()
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, COPY_CHUNK):
            digest.update(chunk)
            size += len(chunk)
            if size <= limit:
                chunks.append(chunk)
            else:
                chunks.clear()
        sha = digest.hexdigest()
        stored = size <= limit
        if stored and not self._refresh(sha):
            self._write(sha, chunks)
        return sha, size, stored

    def _write(self, sha256: str, chunks: list[bytes]) -> None:
        final = self._path(sha256)
        final.parent.mkdir(exist_ok=True, mode=STORE_DIR_MODE)
        fd, tmp = tempfile.mkstemp(dir=final.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as out:
                for chunk in chunks:
                    out.write(chunk)
            os.chmod(tmp, 0o600)
            os.replace(tmp, final)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def read(self, sha256: str) -> bytes:
        """The bytes named `sha256`; ContentMissingError when gone or not intact."""
        path = self._path(sha256)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise ContentMissingError(
                f"the content {sha256[:12]}… is not in the store ({path}): the change set "
                "cannot be applied as it was reviewed; discard it (warden discard TASK)"
            ) from exc
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise ContentMissingError(f"{path} is not a regular file")
            data = f.read()
        if hashlib.sha256(data).hexdigest() != sha256:
            raise ContentMissingError(
                f"the stored content {path} no longer matches its hash: it was altered; "
                "discard the change set (warden discard TASK)"
            )
        return data


class PathReason(BaseModel):
    """Why one path (or the whole change set, `path` empty) was refused or stopped."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    """The path (attacker-chosen text; empty for the whole change set)."""
    reason: str
    """What is wrong and what to do."""
    rule: str = ""
    """The rule, protected path, cap or hook that decided it."""


class ApplyDecision(BaseModel):
    """What became of one change set, as the audit records it and the parent agent
    is told."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task_id: str
    change_set_sha256: str
    """The change set decided (`ChangeSet.sha256`)."""
    outcome: Outcome
    reasons: tuple[PathReason, ...] = ()
    """Per path: why it was rejected, or where it conflicted."""
    decided_by: str = ""
    """`policy`, `auto` (`--apply auto`), `never` (`--apply never`), an approver's
    `CHANNEL:PERSON`, or `cli:USER` (`warden apply` / `warden discard`)."""
    applied: tuple[str, ...] = ()
    """The paths written to the shared workspace (outcome `applied`)."""
    conflicts: tuple[str, ...] = ()
    """The paths whose merge met other changes (outcome `conflicted`)."""

    def for_parent(self) -> str:
        """One paragraph the parent agent's Task result carries."""
        head = {
            "applied": f"its changes were applied to the workspace ({len(self.applied)} files)",
            "rejected_by_policy": "its changes were rejected by policy and not applied",
            "rejected_by_person": "its changes were rejected by the reviewer and not applied",
            "conflicted": "its changes conflict with the workspace and were not applied",
            "pending": "its changes wait for review and are not in the workspace yet",
            "offered": "its changes are being reviewed",
        }[self.outcome]
        lines = [f"Worktree isolation: {head} (change set {self.change_set_sha256[:12]})."]
        lines += [f"- {r.path or '(all)'}: {r.reason}" for r in self.reasons]
        return "\n".join(lines)


class ApplyReview(ApprovalQuestion):
    """The question an apply review is: asked through the run's approver hub like a
    tool call's, under tool name `Apply`. `tool_input` is the change set's short
    summary (for a channel that knows nothing of reviews), `input_hash` is the change
    set's `sha256`, and `change_set` plus `content` give a channel everything it
    shows: `content.read(change.new_sha256)` are exactly the bytes a yes applies.
    An allow `ApprovalAnswer` applies it only when its `bound_to` names
    `change_set.sha256`; any other allow is a no (`review.unbound_yes`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    change_set: ChangeSet
    content: ContentStore = Field(exclude=True)
    """The store holding the change set's old and new content (not serialised)."""

    @classmethod
    def of(
        cls,
        change_set: ChangeSet,
        content: ContentStore,
        **question: object,
    ) -> ApplyReview:
        return cls.model_validate(
            {
                **question,
                "tool_name": APPLY_TOOL,
                "tool_input": change_set.summary(),
                "input_hash": change_set.sha256,
                "asked_by": question.get("asked_by", "apply review"),
                "change_set": change_set,
                "content": content,
            }
        )

    @model_validator(mode="after")
    def _bound(self) -> Self:
        if self.tool_name != APPLY_TOOL or self.input_hash != self.change_set.sha256:
            raise ValueError("an ApplyReview is asked as `Apply`, bound to the change set's sha256")
        return self
