"""Which workspace scripts a hook command names, and whether a host hook's scripts
are still the content trust was decided on.

A hook the person trusted runs on the host, and its command may name a script in
the workspace (`python3 "$CLAUDE_PROJECT_DIR/.claude/hooks/check.py"`). The run
records each such script's digest when it reads its inputs (`workspace.inputs`:
the person's `warden trust` yes, or the bytes at the start). Before each host call
`changed_script` reads each recorded script the command names again, beneath the
workspace and without following a link at any step, and compares: a script that
differs, is gone, or cannot be read that way is not run on the host.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shlex
from collections.abc import Mapping

from orchestrator.regular_file import read_regular

MAX_SCRIPT_BYTES = 64 * 1024 * 1024
"""Largest script hashed (trust fingerprints no larger file either)."""
PROJECT_DIR_WORDS = ("${CLAUDE_PROJECT_DIR}", "$CLAUDE_PROJECT_DIR", "/workspace")
"""How a command names the workspace (on the host, in a sandbox)."""


def command_paths(command: str, real_root: str) -> list[str]:
    """Paths (relative to `real_root`, the resolved workspace) that the words of
    `command` name inside it, whether or not they exist. Resolvable words only: a
    command that builds a path at run time names nothing this can see."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    found: list[str] = []
    for word in words:
        for var in PROJECT_DIR_WORDS:
            if word.startswith(var):
                word = real_root + word[len(var) :]
        candidate = os.path.normpath(os.path.join(real_root, word))
        if candidate.startswith(real_root + os.sep):
            found.append(os.path.relpath(candidate, real_root))
    return found


def _digest_beneath(root: str, rel: str) -> str | None:
    """`sha256:HEX` of `root/rel` opened one step at a time without following links;
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
            data = read_regular(parts[-1], MAX_SCRIPT_BYTES + 1, dir_fd=fd)
        except FileNotFoundError:
            return None
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    if len(data) > MAX_SCRIPT_BYTES:
        raise OSError(errno.EFBIG, "too large to check")
    return "sha256:" + hashlib.sha256(data).hexdigest()


def changed_script(command: str, workspace: str, prints: Mapping[str, str]) -> str | None:
    """Why `command` must not run on the host now (None: every workspace script it
    names that `prints`, path → digest, recorded still has that digest)."""
    real_root = os.path.realpath(workspace)
    for rel in command_paths(command, real_root):
        if rel not in prints:
            continue  # not a file of the workspace when the run started
        try:
            now = _digest_beneath(real_root, rel)
        except OSError as exc:
            now = f"unreadable ({exc.strerror or exc})"
        if now != prints[rel]:
            what = "is gone" if now is None else "has changed"
            if now is not None and now.startswith("unreadable"):
                what = f"cannot be read beneath the workspace without following a link: {now}"
            return (
                f"the workspace script {rel} {what} since this run read the content trust "
                "covers; the host hook was not run and the call is denied. Review "
                f"{rel} and run `warden trust`"
            )
    return None
