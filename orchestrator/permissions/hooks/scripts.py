"""Which workspace scripts a hook command names, and running a host hook on the
very bytes trust covered.

A hook the person trusted runs on the host, and its command may name a script in
the workspace (`python3 "$CLAUDE_PROJECT_DIR/.claude/hooks/check.py"`). The run
records each such script's digest when it reads its inputs (`workspace.inputs`:
the person's `warden trust` yes, or the bytes at the start), a script that is not
there as `ABSENT`. Before each host call `stage` reads each recorded script the
command names once, beneath the workspace and without following a link at any
step, and compares: a script that differs, appeared, is gone, or cannot be read
that way is not run on the host. The bytes it compared are written to a private,
host-owned copy (in the hook's own temporary directory) and the command's word is
rewritten to name that copy, so what `sh` opens is what was hashed: a writer that
swaps the workspace file after the check changes nothing. A recorded script that
was absent is named by a private path where nothing exists, as it was.

What a script sees differently (docs/sandbox.md, Hooks): `$0` (and `__file__`) is
the private copy; the other entries of its directory are links to the workspace's
(so `$(dirname "$0")/lib.sh` still works, unbound as before); the directories above
it are not the workspace's (use `$CLAUDE_PROJECT_DIR`).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shlex
import stat
from collections.abc import Mapping
from dataclasses import dataclass

from orchestrator.regular_file import open_regular

MAX_SCRIPT_BYTES = 64 * 1024 * 1024
"""Largest script hashed (trust fingerprints no larger file either)."""
PROJECT_DIR_WORDS = ("${CLAUDE_PROJECT_DIR}", "$CLAUDE_PROJECT_DIR", "/workspace")
"""How a command names the workspace (on the host, in a sandbox)."""
ABSENT = "absent"
"""The recorded digest of a script a hook names that did not exist."""
UNAPPROVED = "not approved"
"""The expected digest of a script no person approved (a workspace nobody said yes
to, or a script trust does not cover): no file has it, a host hook naming it is denied."""
PRIVATE_DIR = ".warden-scripts"
"""Under a host hook's own temporary directory: the private copies it runs."""
SAFE_PATH = re.compile(r"[A-Za-z0-9_./@%+,:-]+")
"""A private path spliced into a command must need no quoting in any context."""
_BEFORE = r"(?<![^\s\"'=;&|(<>])"
_AFTER = r"(?![^\s\"';&|)<>])"


def _words(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


def _inside(word: str, real_root: str) -> str | None:
    for var in PROJECT_DIR_WORDS:
        if word.startswith(var):
            word = real_root + word[len(var) :]
    candidate = os.path.normpath(os.path.join(real_root, word))
    if candidate.startswith(real_root + os.sep):
        return os.path.relpath(candidate, real_root)
    return None


def command_paths(command: str, real_root: str) -> list[str]:
    """Paths (relative to `real_root`, the resolved workspace) that the words of
    `command` could name inside it, whether or not they exist. Resolvable words only:
    a command that builds a path at run time names nothing this can see."""
    return [rel for word in _words(command) if (rel := _inside(word, real_root)) is not None]


def script_words(command: str, real_root: str, *, cwd_workspace: bool) -> list[tuple[str, str]]:
    """(word, relative path) for each word of `command` that surely names a
    workspace path, existing or not: one spelled from the workspace
    (`$CLAUDE_PROJECT_DIR/…`, `/workspace/…`, its absolute path), and, for a hook
    run in the workspace, a relative one that reads as a path (not a first word
    without a `/`, which the shell looks up on PATH, nor a word with spaces or shell
    characters: the code of `python3 -c "…"`)."""
    found: list[tuple[str, str]] = []
    for i, word in enumerate(_words(command)):
        explicit = word.startswith((*PROJECT_DIR_WORDS, real_root + os.sep))
        relative = (
            cwd_workspace
            and not word.startswith("/")
            and (i > 0 or "/" in word)
            and SAFE_PATH.fullmatch(word) is not None  # not `python3 -c "import x; …"`'s code
        )
        if not (explicit or relative) or word.startswith("-"):
            continue
        rel = _inside(word, real_root)
        if rel is not None:
            found.append((word, rel))
    return found


def is_real_dir(real_root: str, rel: str) -> bool:
    """`real_root/rel` is a directory itself, not a link to one (directories a hook
    names are not bound: they hold no script of their own)."""
    try:
        return stat.S_ISDIR(os.lstat(os.path.join(real_root, rel)).st_mode)
    except OSError:
        return False


@dataclass(frozen=True)
class _Read:
    data: bytes
    mode: int
    siblings: tuple[str, ...]
    """Other entries of the script's directory (linked beside the private copy)."""


def _read_beneath(root: str, rel: str) -> _Read | None:
    """`root/rel` read once, opened one step at a time without following links;
    None when it does not exist. OSError when it cannot be read that way."""
    parts = rel.split(os.sep)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            try:
                step = os.open(
                    part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
                )
            except FileNotFoundError:
                return None
            os.close(fd)
            fd = step
        try:
            with open_regular(parts[-1], dir_fd=fd) as f:
                data = f.read(MAX_SCRIPT_BYTES + 1)
                mode = os.fstat(f.fileno()).st_mode
        except FileNotFoundError:
            return None
        siblings = tuple(sorted(n for n in os.listdir(fd) if n != parts[-1]))
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    if len(data) > MAX_SCRIPT_BYTES:
        raise OSError(errno.EFBIG, "too large to check")
    return _Read(data, mode, siblings)


def _digest(read: _Read | None) -> str:
    return ABSENT if read is None else "sha256:" + hashlib.sha256(read.data).hexdigest()


class ScriptRefused(Exception):
    """A host hook that must not run: `str()` says why, naming the script and the fix."""


def _refused(rel: str, what: str) -> ScriptRefused:
    return ScriptRefused(
        f"the workspace script {rel} {what}; the host hook was not run and the call is "
        f"denied. Review {rel} and run `warden trust`"
    )


def _compare(rel: str, expected: str, real_root: str) -> _Read | None:
    try:
        read = _read_beneath(real_root, rel)
    except OSError as exc:
        raise _refused(
            rel,
            "cannot be read beneath the workspace without following a link: "
            f"unreadable ({exc.strerror or exc})",
        ) from exc
    now = _digest(read)
    if now != expected:
        since = " since this run read the content trust covers"
        what = (
            "is not content a person approved (no `warden trust` yes covers it)"
            if expected == UNAPPROVED
            else "is gone" + since if read is None
            else "did not exist when this run read its inputs and has appeared" + since
            if expected == ABSENT
            else "has changed" + since
        )  # fmt: skip
        raise _refused(rel, what)
    return read


def stage(
    command: str,
    workspace: str,
    prints: Mapping[str, str],
    into: str,
    *,
    cwd_workspace: bool = False,
) -> str:
    """`command` rewritten to run private copies (under `into`, a directory only the
    host can write) of the very bytes of each workspace script it names that match
    `prints` (relative path → digest). Raises ScriptRefused when one differs, is
    not recorded at all, or cannot be run from a copy."""
    real_root = os.path.realpath(workspace)
    named = script_words(command, real_root, cwd_workspace=cwd_workspace)
    for word, rel in named:
        explicit = word.startswith((*PROJECT_DIR_WORDS, real_root + os.sep))
        if rel not in prints and explicit and not is_real_dir(real_root, rel):
            raise _refused(rel, "is not among the scripts this run's trust covers")
    copies: dict[str, str] = {}
    reads: dict[str, _Read] = {}
    for rel in dict.fromkeys([*command_paths(command, real_root), *(r for _, r in named)]):
        if rel not in prints:
            continue  # a relative word of a hook that does not run in the workspace
        read = _compare(rel, prints[rel], real_root)
        copies[rel] = _write_copy(into, rel, read)
        if read is not None:
            reads[rel] = read
    _link_siblings(real_root, reads, copies)
    for word, rel in sorted(set(named), key=lambda wr: -len(wr[0])):
        if rel in copies:
            command = _splice(command, word, copies[rel], rel)
    return command


def _write_copy(into: str, rel: str, read: _Read | None) -> str:
    """The private path for `rel` (the copy written there; nothing when absent)."""
    target = os.path.join(into, PRIVATE_DIR, rel)
    if SAFE_PATH.fullmatch(target) is None:
        raise _refused(rel, "has a name warden cannot splice into the command as a private copy")
    os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)  # real directories
    if read is None:
        return target
    mode = 0o700 if read.mode & (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH) else 0o600
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with os.fdopen(os.open(target, flags, mode), "wb") as out:
        out.write(read.data)
    return target


def _link_siblings(real_root: str, reads: Mapping[str, _Read], copies: Mapping[str, str]) -> None:
    """Beside each copy, a link to every other entry of the script's workspace
    directory (made after every copy and directory, never where a copy, or the
    private path of an absent script, belongs)."""
    private = set(copies.values())
    for rel, read in reads.items():
        here = os.path.dirname(copies[rel])
        for name in read.siblings:
            beside = os.path.join(here, name)
            if beside not in private and not os.path.lexists(beside):
                os.symlink(os.path.join(real_root, os.path.dirname(rel), name), beside)


def _splice(command: str, word: str, private: str, rel: str) -> str:
    """`command` with every spelling of `word` as a whole word replaced by `private`."""
    if any(c in word for c in "\"'\\") or any(c.isspace() for c in word):
        raise _refused(rel, "is named in a spelling warden cannot rewrite to a private copy")
    spliced, count = re.subn(_BEFORE + re.escape(word) + _AFTER, lambda _: private, command)
    if count == 0:
        raise _refused(rel, "is named in a spelling warden cannot rewrite to a private copy")
    return spliced
