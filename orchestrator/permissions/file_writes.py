"""Which files a simple command writes, so Bash is held to the Edit deny and ask rules.

`cp README.md src/gen/a.py` changes `src/gen/a.py` just as an Edit would: with
`Edit(./src/gen/**)` denied, no `Bash(cp:*)` allow rule lets it run (Claude Code
denies it too; measured). `writes(command)` lists the operands the commands below
create, change, move or remove (options and their values skipped). An operand only
known at run time (a variable, a glob) is returned as the directory it lies under
(`trees`): the evaluator asks when an Edit deny or ask rule could lie there.

Only deny and ask rules are checked against these paths: whether the command may
run at all is still its Bash rule's decision (a redirection, `> file`, is the
analyser's own write and also needs an Edit allow rule or an edit mode).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

from orchestrator.permissions.file_reads import static_dir
from orchestrator.permissions.shell import DYNAMIC, SimpleCommand

EVERY_OPERAND = frozenset({"touch", "rm", "rmdir", "mkdir", "truncate", "shred", "tee"})
"""Commands that write (create, change or remove) every operand."""
LAST_OPERAND = frozenset({"cp", "install", "ln"})
"""Commands whose last operand (or `-t DIR`) is what they write (and `mv`, which
also removes its sources)."""
IN_PLACE = frozenset({"sed", "perl"})
"""Commands that rewrite their file operands with `-i`."""
VALUE_OPTIONS: dict[str, str] = {
    "touch": "drt",
    "mkdir": "m",
    "truncate": "rs",
    "shred": "nsu",
    "cp": "St",
    "mv": "St",
    "ln": "St",
    "install": "gmoSt",
    "sed": "efl",
    "perl": "eEIlmMx",
}
"""Short options that take a value, per command (the value is not an operand)."""
TARGET = "t"
"""`-t DIR` / `--target-directory=DIR`: the directory written into."""


@dataclass
class CommandWrites:
    """What one command writes: paths, and directories it writes under unknown names."""

    files: list[str] = field(default_factory=list)
    trees: list[str] = field(default_factory=list)


def writes(command: SimpleCommand, cwd: str) -> CommandWrites:
    """The paths `command` writes (see the module doc); empty for other commands."""
    name = posixpath.basename(command.words[0]) if command.words else ""
    out = CommandWrites()
    if name not in EVERY_OPERAND | LAST_OPERAND | IN_PLACE and name not in ("dd", "mv"):
        return out
    args = command.words[1:]
    if name == "dd":
        targets = [w[3:] for w in args if w.startswith("of=")]
    else:
        operands, target, in_place, script_given = _operands(name, args)
        if name in IN_PLACE:  # the script (unless -e gives it), then the files
            targets = (operands if script_given else operands[1:]) if in_place else []
        elif name in LAST_OPERAND or name == "mv":
            targets = _copied(operands, target, moves=name == "mv")
        else:
            targets = operands
    for word in targets:
        if DYNAMIC in word or any(c in word for c in "*?["):
            out.trees.append(static_dir(word, cwd))
        else:
            out.files.append(word)
    if command.open_ended:  # `xargs rm`: more operands at run time
        out.trees.append(cwd)
    return out


def _copied(operands: list[str], target: str | None, *, moves: bool) -> list[str]:
    """The destination, each source's name inside it (the destination may be a
    directory), and for `mv` the sources it removes."""
    if target is None and not operands:
        return []
    dest = target if target is not None else operands[-1]
    sources = operands if target is not None else operands[:-1]
    inside = [posixpath.join(dest, posixpath.basename(src.rstrip("/"))) for src in sources]
    return [dest, *inside, *(sources if moves else [])]


SCRIPT_OPTIONS = {"sed": "ef", "perl": "eE"}
"""Options that give the script, so every operand is a file."""


def _operands(name: str, args: tuple[str, ...]) -> tuple[list[str], str | None, bool, bool]:
    """(operands, the `-t` directory, `-i` given, the script given by an option)."""
    valued = VALUE_OPTIONS.get(name, "")
    operands: list[str] = []
    target: str | None = None
    in_place = script_given = False
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if word == "--":
            operands.extend(args[i:])
            break
        if word.startswith("--") and len(word) > 2:
            in_place |= word.startswith("--in-place")
            script_given |= word.startswith(("--expression", "--file"))
            if word.startswith("--target-directory"):
                value = word.partition("=")[2]
                if not value and i < len(args):
                    value, i = args[i], i + 1
                target = value
            continue
        if word.startswith("-") and len(word) > 1:
            for j, flag in enumerate(word[1:]):
                in_place |= flag == "i" and name in IN_PLACE
                script_given |= flag in SCRIPT_OPTIONS.get(name, "")
                if flag in valued:
                    value = word[j + 2 :]
                    if not value and i < len(args):
                        value, i = args[i], i + 1
                    if flag == TARGET and name in LAST_OPERAND | {"mv"}:
                        target = value
                    break
            continue
        operands.append(word)
    return operands, target, in_place, script_given
