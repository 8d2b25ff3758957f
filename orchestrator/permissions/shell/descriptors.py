"""Which file a descriptor path (`/dev/stdin`, `/dev/fd/3`, `/proc/self/fd/1`) opens.

On Linux, opening `/dev/fd/N` does not duplicate descriptor N: it opens afresh the
file N refers to, with the new open's flags. So `ls <x >/dev/stdin` truncates `x`,
and `echo pwned 3<a.txt >/dev/fd/3` rewrites `a.txt`, although neither names the
file in a write. A write through such a path is therefore a write to every file
the descriptor may hold: a file that a redirection of the same command, of a
compound command around it (`{ …; } 3<a.txt`, `while …; done <a.txt`), or of the
command that runs a nested script (`sh -c '…' <a.txt`) gave it, directly or
through a duplication (`4<&3`, `1>&0`).

Conservative on purpose: the order of redirections is ignored (any redirection in
scope may have given the descriptor its file), and so is a later redirection that
would replace an earlier one. Here-documents and here-strings (a pipe or an
unlinked temporary file), process substitutions (a pipe) and closed descriptors
hold no file of the workspace; a descriptor no redirection in scope names is the
Bash tool's own (stdin /dev/null, stdout and stderr a pipe).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from orchestrator.permissions.shell.words import Redirect, Unprovable, Word

_FD_PATH = re.compile(
    r"/dev/std(?P<std>in|out|err)|/dev/fd/(?P<dev>\d+)|/proc/(?:self|thread-self)/fd/(?P<proc>\d+)"
)
_STD = {"in": 0, "out": 1, "err": 2}
_INPUT_OPS = frozenset({"<", "<<", "<<-", "<<<", "<&", "<>"})
_NO_FILE_OPS = frozenset({"<<", "<<-", "<<<"})


def descriptor_of(path: str) -> int | None:
    """The descriptor a `/dev/stdin`, `/dev/fd/N` or `/proc/self/fd/N` path reopens."""
    m = _FD_PATH.fullmatch(path)
    if m is None:
        return None
    if m["std"]:
        return _STD[m["std"]]
    return int(m["dev"] or m["proc"])


def descriptors(red: Redirect) -> tuple[int, ...]:
    """The descriptors one redirection assigns (`&>x` and `>&x` assign 1 and 2)."""
    if red.fd:
        return (int(red.fd),)
    if red.op in ("&>", "&>>"):
        return (1, 2)
    if red.op == ">&" and not (red.target.value.isdigit() or red.target.value == "-"):
        return (1, 2)
    return (0,) if red.op in _INPUT_OPS else (1,)


def files_held(fd: int, scope: Sequence[Redirect]) -> list[Word]:
    """Every file descriptor `fd` may hold where the redirections `scope` apply.

    Raises `Unprovable` when one of them opens a file only known at run time."""
    found: list[Word] = []
    pending, seen = [fd], {fd}

    def follow(other: int) -> None:
        if other not in seen:
            seen.add(other)
            pending.append(other)

    while pending:
        current = pending.pop()
        for red in scope:
            if current not in descriptors(red) or red.op in _NO_FILE_OPS:
                continue
            target = red.target
            if red.op in (">&", "<&") and (target.value.isdigit() or target.value == "-"):
                if target.value != "-":
                    follow(int(target.value))
                continue
            if target.raw.startswith(("<(", ">(")):
                continue  # a pipe to a process substitution
            if target.dynamic or target.glob or target.tilde:
                raise Unprovable(
                    f"descriptor {current} may hold {target.raw!r}, only known at run time"
                )
            again = descriptor_of(target.value)
            if again is not None:
                follow(again)
            else:
                found.append(target)
    return found
