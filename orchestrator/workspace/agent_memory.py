"""Agent memory directories (Claude Code's `memory` key): where each scope lives, the
mount that lets a subagent keep its memory, and reading its index for the next task.

Where Claude Code keeps them (the pinned CLI, by its agent's name made a slug):
`project` in `.claude/agent-memory/NAME/` of the workspace, `local` in
`.claude/agent-memory-local/NAME/`, `user` in `~/.claude/agent-memory/NAME/`.

- **project and local** memory is writable in the agent's own sandbox: its
  directory (made by the host, never through a link, owned by the sandbox's user)
  is bind-mounted read-write over the read-only `.claude`, at the path Claude Code
  uses. Only that directory: the rest of `.claude` stays read-only, and another
  agent's memory is not writable. A hard link cannot be made into it from the
  rest of the workspace, nor out of it (`link` across mounts fails with EXDEV).
- **user** memory is in the person's home, outside the workspace: it is never
  mounted writable (a hostile subagent must not write the person's home). Its
  index is in the prompt, read-only; the subagent puts what it would save in its
  answer (docs/agents.md: a deliberate difference).

From the moment a sandbox can write it, everything in a memory directory is
attacker-written. The host reads one thing from it, the index (`MEMORY.md`) for
the next task's prompt: from the workspace's descriptor down, one directory at a
time without following a link (`beneath`), a regular file with one name only
(a link count above one is refused), at most `MAX_MEMORY_INDEX_BYTES`. It is
prompt text, shown as untrusted like every other workspace file, and decides
nothing. That a poisoned memory steers a later task of the same agent is the
feature's nature (Claude Code's too); docs/agents.md says why memory, unlike agent
files and skills, is not held to the trust record.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from orchestrator.backend.contract import Mount
from orchestrator.errors import UnsafeMountError
from orchestrator.regular_file import open_regular
from orchestrator.workspace.beneath import directory, directory_at, workspace_root
from sandbox_tools.wire import WORKSPACE

PROJECT_MEMORY = (".claude", "agent-memory")
LOCAL_MEMORY = (".claude", "agent-memory-local")
USER_MEMORY = "agent-memory"
"""Under the user's Claude Code directory (`~/.claude`)."""
MEMORY_INDEX = "MEMORY.md"
MAX_MEMORY_INDEX_BYTES = 64 * 1024
"""Most of MEMORY.md read for the prompt (the rest is cut, saying so)."""


def memory_slug(agent_name: str) -> str:
    """The directory name of an agent's memory, as Claude Code makes it."""
    slug = "".join(c if c.isascii() and (c.isalnum() or c in "-_") else "-" for c in agent_name)
    return slug or "unknown"


def workspace_parts(scope: str, agent_name: str) -> tuple[str, ...] | None:
    """The memory directory below the workspace for `project`/`local`; None otherwise."""
    if scope == "project":
        return (*PROJECT_MEMORY, memory_slug(agent_name))
    if scope == "local":
        return (*LOCAL_MEMORY, memory_slug(agent_name))
    return None


def sandbox_path(scope: str, agent_name: str) -> str | None:
    """Where a sandbox sees its project or local memory directory."""
    parts = workspace_parts(scope, agent_name)
    return None if parts is None else "/".join((WORKSPACE, *parts))


def memory_mount(workspace: Path, scope: str, agent_name: str, owner: tuple[int, int]) -> Mount:
    """The read-write mount of a project or local memory directory, made when missing
    (each missing directory created below the workspace's own descriptor, never
    through a link, and given to `owner`, the sandbox's uid and gid, so the sandbox
    can write it). Raises UnsafeMountError when a part of the way is a link or not a
    directory (a sandbox swapped it), ValueError for the user scope."""
    parts = workspace_parts(scope, agent_name)
    if parts is None:
        raise ValueError(f"{scope} memory is not in the workspace")
    _make_directories(workspace, parts, owner)
    return Mount(
        source=workspace.joinpath(*parts),
        target="/".join((WORKSPACE, *parts)),
        read_only=False,
        confined_to=workspace,
    )


def _make_directories(workspace: Path, parts: tuple[str, ...], owner: tuple[int, int]) -> None:
    with workspace_root(workspace) as root:
        if root is None:
            raise UnsafeMountError(f"cannot open the workspace {workspace} to make agent memory")
        fd = os.dup(root)
        try:
            walked = workspace
            for index, part in enumerate(parts):
                walked = walked / part
                made = False
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)  # never follows a link at `part`
                    made = True
                nxt = directory_at(fd, part)
                if nxt is None:
                    raise UnsafeMountError(
                        f"{walked} is not a directory (a symbolic link, or a file); warden "
                        "keeps agent memory only in a real directory: check it and remove it"
                    )
                os.close(fd)
                fd = nxt
                if made and index > 0:  # `.claude` itself stays as the guard made it
                    with contextlib.suppress(PermissionError):
                        os.fchown(fd, *owner)
        finally:
            os.close(fd)


def read_index(base: Path, parts: tuple[str, ...]) -> str | None:
    """The text of `MEMORY.md` in the directory `parts` below `base` (the workspace, or
    the user's Claude Code directory), read without following any link, a regular
    file with one name, at most MAX_MEMORY_INDEX_BYTES (cut, saying so); None when
    there is none (or it is anything else)."""
    with workspace_root(base) as root, directory(root, parts, base) as fd:
        if fd is None:
            return None
        try:
            with open_regular(MEMORY_INDEX, dir_fd=fd) as handle:
                info = os.fstat(handle.fileno())
                if info.st_nlink != 1 or not stat.S_ISREG(info.st_mode):
                    return None  # another name for it may be anywhere on this filesystem
                data = handle.read(MAX_MEMORY_INDEX_BYTES + 1)
        except OSError:
            return None
    text = data[:MAX_MEMORY_INDEX_BYTES].decode("utf-8", errors="replace")
    if len(data) > MAX_MEMORY_INDEX_BYTES:
        text += f"\n[cut at {MAX_MEMORY_INDEX_BYTES} bytes]"
    return text


__all__ = [
    "MAX_MEMORY_INDEX_BYTES",
    "memory_mount",
    "memory_slug",
    "read_index",
    "sandbox_path",
    "workspace_parts",
]
