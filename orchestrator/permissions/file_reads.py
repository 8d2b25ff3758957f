"""Which files a simple command reads, so Bash is held to the Read rules too.

`cat .env` reads `.env` just as `Read(.env)` does: with `Read(./.env)` denied, no
`Bash(cat:*)` allow rule may let it run. `reads(command)` lists, for the commands
below, the operands that name files (options and their values skipped, as GNU
getopt reads them). An operand that is only known at run time (a variable, a
the files `xargs` adds) or a tree a recursive search walks is returned as a
*tree*: the evaluator asks when a Read deny or ask rule could lie under it. A glob
operand is returned as itself (`globs`), for the evaluator to decide exactly.

Commands not listed here are not read as file readers (a rule for them decides);
the list covers the POSIX and GNU tools that print, search or copy a file's bytes.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

from orchestrator.permissions.shell import DYNAMIC, SimpleCommand

ALL_OPERANDS = frozenset(
    {
        "cat",
        "tac",
        "nl",
        "head",
        "tail",
        "less",
        "more",
        "most",
        "od",
        "hexdump",
        "xxd",
        "strings",
        "base64",
        "base32",
        "wc",
        "sort",
        "uniq",
        "cut",
        "paste",
        "fold",
        "fmt",
        "pr",
        "expand",
        "unexpand",
        "rev",
        "md5sum",
        "sha1sum",
        "sha224sum",
        "sha256sum",
        "sha384sum",
        "sha512sum",
        "b2sum",
        "cksum",
        "sum",
        "diff",
        "cmp",
        "comm",
        "join",
        "iconv",
        "column",
        "view",
        "vi",
        "vim",
        "nano",
        "emacs",
        "ed",
        "bat",
        "batcat",
        "zcat",
        "bzcat",
        "xzcat",
        "gunzip",
        "zless",
        "zmore",
        "python3",
        "python",
        "perl",
        "ruby",
        "node",
        "bash",
        "sh",
        "source",
        ".",
        "cp",
        "install",
        "dd",
        "tee",
        "split",
        "csplit",
        "shuf",
        "tsort",
        "file",
        "diff3",
        "sdiff",
    }
)
"""Commands whose every operand may be a file they read."""
PATTERN_FIRST = frozenset({"grep", "egrep", "fgrep", "rg", "sed", "awk", "gawk", "mawk", "jq"})
"""Commands whose first operand is a pattern or program (unless `-e`/`-f` gives it)."""
RECURSIVE_BY_DEFAULT = frozenset({"rg"})
NOT_A_READ = frozenset({"tee"})
"""Listed above only so their options are skipped; their operands are written."""
VALUE_OPTIONS: dict[str, str] = {
    "head": "nc",
    "tail": "ncsF",
    "sort": "koSTt",
    "cut": "bcdf",
    "uniq": "fsw",
    "grep": "efmABCD",
    "egrep": "efmABCD",
    "fgrep": "efmABCD",
    "rg": "efgmtTABCEjM",
    "sed": "efl",
    "awk": "fvF",
    "gawk": "fvF",
    "mawk": "fvF",
    "jq": "fL",
    "od": "AjNtw",
    "xxd": "cglos",
    "nl": "bdfhilnsvw",
    "fold": "w",
    "fmt": "wgp",
    "pr": "hlwoN",
    "split": "abCln",
    "csplit": "bfn",
    "diff": "CUFIxSXL",
    "join": "aejot12",
    "paste": "d",
    "column": "csntN",
    "iconv": "ft",
    "base64": "w",
    "wc": "",
    "shuf": "inoe",
    "dd": "",
    "cp": "StT",
    "install": "gmoStT",
    "python3": "cmW",
    "python": "cmW",
    "perl": "eEIlmMx",
    "ruby": "eIrx",
    "node": "er",
    "bash": "cO",
    "sh": "cO",
    "less": "bhjkoOpPtTxyz",
}
"""Short options that take a value, per command (the value is not a file operand)."""
FILE_VALUE_OPTIONS: dict[str, str] = {
    "grep": "f",
    "egrep": "f",
    "fgrep": "f",
    "rg": "f",
    "sed": "f",
    "awk": "f",
    "gawk": "f",
    "mawk": "f",
    "jq": "f",
}
"""Short options whose value is a file the command reads (`grep -f PATTERNS`)."""
PATTERN_OPTIONS = frozenset({"e", "f"})
"""Options that give the pattern/program, so the first operand is a file again."""
RECURSIVE_FLAGS = frozenset({"-r", "-R", "--recursive", "--dereference-recursive"})
RECURSIVE_SHORT: dict[str, str] = {"grep": "rR", "egrep": "rR", "fgrep": "rR", "cp": "rRa"}
"""Short flags that make a command read whole trees (`cp -r dir` copies dir/.env)."""
RECURSIVE_LONG: dict[str, frozenset[str]] = {
    **dict.fromkeys(("grep", "egrep", "fgrep"), RECURSIVE_FLAGS),
    "cp": frozenset({"--recursive", "--archive"}),
}


@dataclass
class CommandReads:
    """What one command reads: files, and trees (or unknown paths) it may read under."""

    files: list[str] = field(default_factory=list)
    trees: list[str] = field(default_factory=list)
    globs: list[str] = field(default_factory=list)
    """Operands with wildcards (and nothing known only at run time): the caller
    decides them exactly (`glob_reads`) or reads them as the tree `static_dir` names."""


def _name(command: SimpleCommand) -> str:
    return posixpath.basename(command.words[0]) if command.words else ""


def reads(command: SimpleCommand, cwd: str) -> CommandReads:
    """The files `command` reads (see the module doc); an empty result for others."""
    name = _name(command)
    out = CommandReads()
    if name not in ALL_OPERANDS and name not in PATTERN_FIRST:
        return out
    operands, given, recursive, option_files = _operands(name, command.words[1:])
    out.files.extend(option_files)
    if name in PATTERN_FIRST and not given and operands:
        operands = operands[1:]  # the pattern or program
    if name in ("dd",):
        operands = [w[3:] for w in command.words[1:] if w.startswith("if=")]
    if name in ("python3", "python", "perl", "ruby", "node", "bash", "sh") and operands:
        operands = operands[:1]  # the script; later operands are its arguments
    if name in NOT_A_READ:
        operands = []
    if name in ("cp", "install") and not _targeted(command.words[1:]):
        operands = operands[:-1]  # the last operand is the destination
    tree = recursive or name in RECURSIVE_BY_DEFAULT
    if tree and not operands and name in ("rg", "grep", "egrep", "fgrep"):
        out.trees.append(cwd)
    for word in operands:
        if DYNAMIC not in word and any(c in word for c in "*?[") and not tree:
            out.globs.append(word)
        elif DYNAMIC in word or any(c in word for c in "*?["):
            out.trees.append(static_dir(word, cwd))
        elif tree:
            out.trees.append(word)
        else:
            out.files.append(word)
    if command.open_ended:  # `xargs cat`: more operands at run time
        out.trees.append(cwd)
    return out


def _targeted(args: tuple[str, ...]) -> bool:
    """`cp -t DIR SRC...`: every operand is a source (a short-option cluster holding
    `t` counts, which at worst also checks the destination)."""
    return any(
        w.startswith("--target-directory") or (w[:1] == "-" and w[1:2] != "-" and "t" in w[1:])
        for w in args
    )


def static_dir(word: str, cwd: str) -> str:
    """The directory a word's wildcards (or run-time parts) lie under."""
    cut = min(i for i in (word.find(c) for c in ("*", "?", "[", DYNAMIC)) if i >= 0)
    head = word[:cut]
    directory = head if head.endswith("/") else posixpath.dirname(head)
    return directory.rstrip("/") or ("/" if word.startswith("/") else cwd)


def _operands(name: str, args: tuple[str, ...]) -> tuple[list[str], bool, bool, list[str]]:
    """(operands, pattern given by an option, recursive, files named by options)."""
    valued = VALUE_OPTIONS.get(name, "")
    file_valued = FILE_VALUE_OPTIONS.get(name, "")
    operands: list[str] = []
    option_files: list[str] = []
    given = recursive = False
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if word == "--":
            operands.extend(args[i:])
            break
        if word.startswith("--") and len(word) > 2:
            recursive |= word in RECURSIVE_LONG.get(name, ())
            given |= word.startswith(("--regexp", "--file", "--expression"))
            if word.startswith("--file="):
                option_files.append(word.split("=", 1)[1])
            continue
        if word.startswith("-") and len(word) > 1 and not word[1].isdigit():
            for j, flag in enumerate(word[1:]):
                if flag in RECURSIVE_SHORT.get(name, ""):
                    recursive = True
                if flag in valued:
                    value = word[j + 2 :] or (args[i] if i < len(args) else "")
                    if not word[j + 2 :]:
                        i += 1
                    if flag in PATTERN_OPTIONS and name in PATTERN_FIRST:
                        given = True
                    if flag in file_valued:
                        option_files.append(value)
                    break
            continue
        operands.append(word)
    return operands, given, recursive, option_files
