"""What programs a rule allows do through their options and scripts: files they read
or write that are not operands, commands they run, and paths that reach a file
through another name. An allow rule names a program (`Bash(git diff:*)`); it does
not prove that `git diff --no-index /dev/null .env` reads no denied file or that
`sort -o FILE` writes no protected one.

`effects(command)` returns, for one simple command:

- files it reads or writes by an option or a script command (held to the Read and
  Edit rules like operands: `sort -o protected/p` is an Edit of `protected/p`,
  `sed '1r .env'` a Read of `.env`, `git diff -- .env` too);
- problems: what cannot be proven, so the command asks (denied in `dontAsk`).
  Options that run another command (`git -c`, `sed e`, `awk system()`, `tar -I`,
  `sort --compress-program`) need a person, as that command would need its own
  rule; so do options that move the command elsewhere (`git -C`, `--git-dir`,
  `tar -C`), read a list of names from a file (`--files0-from`, `tar -T`), compare
  files outside the repository (`git diff --no-index`), and paths spelt through
  `/proc/*/cwd`, `/proc/*/root`, `/proc/*/fd`, `/dev/fd/N/…` or a tilde other than
  `~/`, and a link made earlier in the same command line (`ln -s x l && cat l`).

These are decisions about what to ask, not walls: what a Read or Edit deny rule
names that exists when a sandbox starts is masked or read-only there whatever this
module says (`workspace.walls`). The grammars are the GNU tools' (sed 4.9, gawk
5.2, tar 1.34, coreutils 9.1, findutils 4.9, git 2.39, as in Debian bookworm).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field

from orchestrator.permissions.sed_scripts import SedEffects, read_sed_script
from orchestrator.permissions.shell import DYNAMIC, SimpleCommand

HIDDEN_ROUTE = re.compile(
    r"(?:^|[=:,])(?:/proc/[^/]+/(?:cwd|root|fd|fdinfo|map_files|task|exe)(?:/|$)"
    r"|/dev/(?:fd/\d+|std(?:in|out|err))/)"
)
"""A path that reaches a file through a process's directory or descriptor."""
ODD_TILDE = re.compile(r"(?:^|[=:])~(?!/|$)")
"""`~+`, `~-`, `~0`, `~user`: a directory known only at run time."""
LINK_MAKERS = frozenset({"ln", "link", "symlink"})
GIT_GLOBAL_VALUED = frozenset({"-c", "-C", "--config-env", "--exec-path", "--git-dir",
                               "--work-tree", "--namespace", "--super-prefix", "--attr-source"})  # fmt: skip
GIT_GLOBAL_PROBLEM = frozenset({"-c", "-C", "--config-env", "--exec-path", "--git-dir",
                                "--work-tree", "--super-prefix"})  # fmt: skip
"""git options before the subcommand that run configured commands or move git elsewhere."""
GIT_OPTION_PROBLEM = (
    "--output", "--output-directory", "--no-index", "--upload-pack", "--receive-pack", "--exec", "--extcmd",
    "--open-files-in-pager", "--template", "--config", "--separate-git-dir", "--reference",
    "--git-dir", "--work-tree", "--contrib", "--run",
)  # fmt: skip
"""Subcommand options (and their `=value` forms) that write, read or run files."""
GIT_SHORT_PROBLEM = {
    "clone": "uco",
    "fetch": "u",
    "pull": "u",
    "ls-remote": "u",
    "archive": "o",
    "grep": "O",
    "format-patch": "o",
    "rebase": "x",
    "difftool": "xt",
}
"""Short options per subcommand that do the same (`clone -u`, `grep -O`, `rebase -x`)."""
GIT_RUNNERS = frozenset({"bisect", "filter-branch", "mergetool", "submodule", "send-email",
                         "daemon", "instaweb", "web--browse", "upload-pack", "receive-pack",
                         "shell", "archimport", "cvsimport", "svn", "p4", "difftool"})  # fmt: skip
"""Subcommands that run configured or given commands."""
GIT_PATH_READERS = frozenset({"diff", "log", "show", "blame", "annotate", "grep", "whatchanged",
                              "cat-file", "diff-files", "diff-index", "range-diff"})  # fmt: skip
"""Subcommands whose operands may name working-tree files they print."""
TAR_PROBLEM_LONG = (
    "--use-compress-program", "--to-command", "--checkpoint-action", "--info-script",
    "--new-volume-script", "--rsh-command", "--rmt-command", "--directory", "--files-from",
    "--listed-incremental", "--index-file", "--remove-files", "--absolute-names",
    "--exclude-from", "--volno-file",
)  # fmt: skip
TAR_PROBLEM_SHORT = "ICFTgPX"
TAR_VALUED_SHORT = "bCfFgHIKLNTVX"
SORT_VALUED = "kotST"
MAX_SCRIPT_CHARS = 64 * 1024
"""Longest sed or awk script looked into (a longer one asks)."""


@dataclass
class Effects:
    """What one command does beyond what its name and operands say."""

    reads: list[str] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)
    write_trees: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def effects(command: SimpleCommand) -> Effects:
    """See the module doc; empty for commands without such options."""
    out = Effects()
    if not command.words:
        return out
    name = posixpath.basename(command.words[0])
    args = command.words[1:]
    for word in command.words:
        if HIDDEN_ROUTE.search(word):
            out.problems.append(f"'{_shown(word)}' reaches a file through a process's directory")
        elif ODD_TILDE.search(word):
            out.problems.append(f"'{_shown(word)}' starts at a directory known only at run time")
    check = _PROGRAMS.get(name)
    if check is not None:
        check(name, args, out)
    return out


def route_problems(paths: list[str]) -> list[str]:
    """Problems of redirection targets spelt through a process's directory."""
    return [
        f"'{_shown(p)}' reaches a file through a process's directory"
        for p in paths
        if HIDDEN_ROUTE.search(p) or ODD_TILDE.search(p)
    ]


def link_problems(commands: list[SimpleCommand]) -> list[str]:
    """A link made by one command of a line can point a later one at any file."""
    for command in commands[:-1]:
        if command.words and _makes_links(command):
            return [f"'{command.display()}' makes a link that later commands may read through"]
    return []


def _makes_links(command: SimpleCommand) -> bool:
    name = posixpath.basename(command.words[0])
    if name in LINK_MAKERS:
        return True
    if name != "cp":
        return False
    for word in command.words[1:]:
        if word in ("--link", "--symbolic-link") or (
            word.startswith("-") and not word.startswith("--") and ("s" in word or "l" in word)
        ):
            return True
    return False


def _shown(word: str) -> str:
    return word.replace(DYNAMIC, "$…")


# -- git ----------------------------------------------------------------------------


def _git(name: str, args: tuple[str, ...], out: Effects) -> None:
    i = 0
    while i < len(args) and args[i].startswith("-"):
        option = args[i].split("=", 1)[0]
        if option in GIT_GLOBAL_PROBLEM:
            out.problems.append(f"'git {option}' runs configured commands or moves git elsewhere")
        if option in GIT_GLOBAL_VALUED and "=" not in args[i] and option != "--exec-path":
            i += 1
        i += 1
    if i >= len(args):
        return
    sub, rest = args[i], args[i + 1 :]
    if sub in GIT_RUNNERS:
        out.problems.append(f"'git {sub}' runs commands")
    shorts = GIT_SHORT_PROBLEM.get(sub, "")
    operands: list[str] = []
    options_done = False
    for word in rest:
        if options_done or not word.startswith("-") or word == "-":
            operands.append(word)
            continue
        if word == "--":
            options_done = True
            continue
        if word.startswith("--"):
            option = word.split("=", 1)[0]
            if any(
                option == p or (p.startswith(option) and len(option) > 4)
                for p in GIT_OPTION_PROBLEM
            ):
                out.problems.append(f"'git {sub} {option}' reads, writes or runs other files")
        elif any(c in shorts for c in word[1:]):
            out.problems.append(f"'git {sub} {word}' reads, writes or runs other files")
    if sub in GIT_PATH_READERS:
        for word in operands:
            if DYNAMIC in word:
                continue
            if word.startswith(":") or word.startswith("/") or word.startswith(".."):
                out.problems.append(
                    f"'git {sub} {_shown(word)}' may read files outside the repository"
                )
            path = word.split(":", 1)[1] if ":" in word else word
            if path:
                out.reads.append(path)


# -- sed ----------------------------------------------------------------------------


def _sed(name: str, args: tuple[str, ...], out: Effects) -> None:
    scripts: list[str] = []
    operands: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if word == "--":
            operands.extend(args[i:])
            break
        if word.startswith("--"):
            option, eq, value = word.partition("=")
            if option in ("--expression", "--expr", "--e"):
                if not eq and i < len(args):
                    value, i = args[i], i + 1
                scripts.append(value)
            elif "--file".startswith(option) and len(option) > 3:
                out.problems.append("'sed --file' reads its script from a file")
            elif option.startswith("--line") and not eq:
                i += 1
            continue
        if word.startswith("-") and len(word) > 1:
            for j, flag in enumerate(word[1:]):
                if flag in "efl":
                    value = word[j + 2 :]
                    if not value and i < len(args):
                        value, i = args[i], i + 1
                    if flag == "e":
                        scripts.append(value)
                    elif flag == "f":
                        out.problems.append("'sed -f' reads its script from a file")
                    break
            continue
        operands.append(word)
    if not scripts and operands:
        scripts.append(operands[0])
    for script in scripts:
        if DYNAMIC in script or len(script) > MAX_SCRIPT_CHARS:
            out.problems.append("a sed script only known at run time (or too long to read)")
            continue
        found: SedEffects = read_sed_script(script)
        out.reads += found.reads
        out.writes += found.writes
        out.problems += found.problems


# -- awk, tar, sort, wc/du, find ------------------------------------------------------

AWK_RUNS = re.compile(r"\bsystem\s*\(|\bgetline\b|(?<!\|)\|(?!\|)|@|\bprintf?\b[^;\n}]*>")
"""system(), getline (from a file or a command), pipes, gawk's @load/@include, and a
print redirected to a file."""


def _awk(name: str, args: tuple[str, ...], out: Effects) -> None:
    program: str | None = None
    given = False
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if word == "--":
            if not given and i < len(args):
                program = args[i]
            break
        if word.startswith("--"):
            option = word.split("=", 1)[0]
            if option in ("--source", "--so"):
                program = word.partition("=")[2] or (args[i] if i < len(args) else "")
                given, i = True, i + (0 if "=" in word else 1)
            elif option in ("--field-separator", "--assign") and "=" not in word:
                i += 1
            elif option not in ("--posix", "--traditional", "--re-interval", "--sandbox",
                                "--characters-as-bytes", "--use-lc-numeric"):  # fmt: skip
                out.problems.append(f"'{name} {option}' is not analysed")
            continue
        if word.startswith("-") and len(word) > 1:
            flag, value = word[1], word[2:]
            if flag in "Fv":
                i += 0 if value else 1
            elif flag == "e":
                program, given = value or (args[i] if i < len(args) else ""), True
                i += 0 if value else 1
            else:
                out.problems.append(f"'{name} -{flag}' reads a program or library from a file")
            continue
        if not given:
            program = word
        break
    if program is None:
        return
    if DYNAMIC in program or len(program) > MAX_SCRIPT_CHARS or AWK_RUNS.search(program):
        out.problems.append(
            f"the {name} program may run commands or read or write other files "
            "(system, getline, a pipe or a redirected print)"
        )


def _tar(name: str, args: tuple[str, ...], out: Effects) -> None:
    words = list(args)
    if words and not words[0].startswith("-"):
        words[0] = "-" + words[0]  # the old style: `tar xzf a.tgz`
    mode = ""
    archive: str | None = None
    operands: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word.startswith("--") and len(word) > 2:
            option = word.split("=", 1)[0]
            if any(p.startswith(option) and len(option) > 4 for p in TAR_PROBLEM_LONG):
                out.problems.append(f"'tar {option}' runs a command, moves or reads a list")
            if option in ("--file",):
                archive = word.partition("=")[2] or (words[i] if i < len(words) else None)
                i += 0 if "=" in word else 1
            for long, letter in (("--create", "c"), ("--extract", "x"), ("--get", "x"),
                                 ("--append", "r"), ("--update", "u"), ("--catenate", "A")):  # fmt: skip
                if option == long:
                    mode += letter
            continue
        if word.startswith("-") and len(word) > 1:
            for j, flag in enumerate(word[1:]):
                if flag in "cxruAt":
                    mode += flag
                if flag in TAR_PROBLEM_SHORT:
                    out.problems.append(f"'tar -{flag}' runs a command, moves or reads a list")
                if flag in TAR_VALUED_SHORT:
                    rest = word[j + 2 :]
                    value = rest
                    if not rest and i < len(words):
                        value, i = words[i], i + 1
                    if flag == "f":
                        archive = value
                    if rest:
                        break
            continue
        operands.append(word)
    writing = any(m in mode for m in "cruA")
    if archive and archive != "-":
        (out.writes if writing else out.reads).append(archive)
    if writing:
        out.reads.extend(operands)
    if "x" in mode:
        out.write_trees.append(".")


def _sort(name: str, args: tuple[str, ...], out: Effects) -> None:
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if word == "--":
            break
        if word.startswith("--"):
            option, eq, value = word.partition("=")
            if "--output".startswith(option) and len(option) > 4:
                out.writes.append(value if eq else (args[i] if i < len(args) else ""))
                i += 0 if eq else 1
            elif any(p.startswith(option) and len(option) > 4 for p in
                     ("--compress-program", "--files0-from", "--temporary-directory")):  # fmt: skip
                out.problems.append(
                    f"'sort {option}' runs a command, reads a list or writes elsewhere"
                )
            continue
        if word.startswith("-") and len(word) > 1:
            for j, flag in enumerate(word[1:]):
                if flag in SORT_VALUED:
                    value = word[j + 2 :] or (args[i] if i < len(args) else "")
                    i += 0 if word[j + 2 :] else 1
                    if flag == "o":
                        out.writes.append(value)
                    elif flag == "T":
                        out.problems.append("'sort -T' writes temporary files elsewhere")
                    break


def _files0(name: str, args: tuple[str, ...], out: Effects) -> None:
    for k, word in enumerate(args):
        if word == "--":
            break
        if word.startswith("--files0") or word.startswith("--files"):
            out.problems.append(
                f"'{name} {word.split('=', 1)[0]}' reads the names of its files from a file"
            )
            value = word.partition("=")[2] or (args[k + 1] if k + 1 < len(args) else "")
            if value and value != "-":
                out.reads.append(value)


def _find(name: str, args: tuple[str, ...], out: Effects) -> None:
    starts: list[str] = []
    for word in args:
        if word.startswith("-") or word in ("(", "!", ")"):
            break
        starts.append(word)
    if "-delete" in args:
        out.write_trees.extend(starts or ["."])
    if "-files0-from" in args:
        out.problems.append("'find -files0-from' reads the names of its start points from a file")


_PROGRAMS = {
    "git": _git,
    "sed": _sed,
    "awk": _awk,
    "gawk": _awk,
    "mawk": _awk,
    "nawk": _awk,
    "tar": _tar,
    "sort": _sort,
    "wc": _files0,
    "du": _files0,
    "find": _find,
}
