"""The Bash analyser: what a command line runs, proven or asked.

`analyse(command)` returns the simple commands bash would run (through lists,
pipelines, compound commands, substitutions, `eval`, `sh -c` and the wrappers in
`wrappers.py`) and the files its redirections write and read. It proves this with
two independent parsers: the strict whitelist parser in `parser.py` and
tree-sitter-bash (`tree.py`); they must agree. Then the semantic checks below
refuse what would make a later command differ from what was parsed: builtins that
change the shell's state, environment prefixes outside the allowlist
(`env.py`), dynamic command names, device redirections. Whatever is not
proven becomes a *problem* naming the construct; a command with problems is never
allowed by a rule (it asks, or is denied in `dontAsk`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from orchestrator.permissions.shell.descriptors import descriptor_of, files_held
from orchestrator.permissions.shell.env import check_prefix, check_variable
from orchestrator.permissions.shell.parser import (
    BASH,
    DASH,
    DYNAMIC,
    MAX_COMMAND_CHARS,
    MAX_NESTING,
    Command,
    Dialect,
    Redirect,
    Unprovable,
    Word,
    is_safe_device,
    parse,
)
from orchestrator.permissions.shell.shape import MAX_HEREDOCS, refused_shape
from orchestrator.permissions.shell.tree import disagreement, loose_commands
from orchestrator.permissions.shell.words import expand_braces
from orchestrator.permissions.shell.wrappers import (
    ANY_SHELL,
    EXECS_ITS_COMMAND,
    RUNS_ITS_ARGUMENTS,
    SHELL_ONLY,
    Unwrapped,
    unwrap,
    wrapper_name,
)

__all__ = [
    "DYNAMIC",
    "MAX_COMMAND_CHARS",
    "MAX_HEREDOCS",
    "MAX_NESTING",
    "ShellAnalysis",
    "SimpleCommand",
    "analyse",
    "is_safe_device",
    "refused_shape",
]

log = logging.getLogger(__name__)

PATH_MAX = 4096
"""Longest path the kernel opens (bytes, with its terminating NUL): a longer one
fails with ENAMETOOLONG, so the analyser asks rather than resolve it."""
DIR_CHANGERS = frozenset({"cd", "pushd", "popd"})
STATE_BUILTINS = frozenset(
    {
        "declare",
        "typeset",
        "local",
        "export",
        "readonly",
        "unset",
        "set",
        "shopt",
        "alias",
        "unalias",
        "trap",
        "source",
        ".",
        "enable",
        "hash",
        "let",
        "mapfile",
        "readarray",
        "getopts",
        "bind",
        "complete",
        "compgen",
        "compopt",
        "fc",
        "history",
        "ulimit",
        "umask",
        "function",
        "coproc",
        "select",
    }
)
"""Builtins that change what later commands do (or evaluate text as code): never proven."""
_WRITE_OPS = frozenset({">", ">>", ">|", "&>", "&>>"})


@dataclass(frozen=True)
class SimpleCommand:
    """One command bash would run: its words as literal text (run-time parts are DYNAMIC)."""

    words: tuple[str, ...]
    open_ended: bool = False
    """True when more arguments are added at run time (`xargs`, `find -exec`)."""

    @property
    def text(self) -> str:
        return " ".join(self.words)

    def display(self) -> str:
        shown = " ".join(w.replace(DYNAMIC, "$…") for w in self.words)
        return shown + (" …" if self.open_ended else "")


@dataclass
class ShellAnalysis:
    """Everything `analyse` found in one command line."""

    commands: list[SimpleCommand] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)
    """Files that output redirections write (as written; relative to the cwd)."""
    reads: list[str] = field(default_factory=list)
    """Files that input redirections read."""
    problems: list[str] = field(default_factory=list)
    """What the analyser could not prove; empty when it proved everything."""
    changes_dir: bool = False
    """A `cd`/`pushd`/`popd` makes later relative paths unknowable."""
    wrappers: list[SimpleCommand] = field(default_factory=list)
    """Commands that run another command (`sh -c`, `timeout`, `xargs`, `env`, ...), as
    written; what they run is in `commands`."""
    settled: bool = field(default=True, repr=False, compare=False)
    """False when an unexpected failure (a bug, or a limit of this process such as its
    recursion depth) shaped the result: the same command may come out otherwise next
    time, so the result is never cached."""

    @property
    def understood(self) -> bool:
        return not self.problems

    def copy(self) -> ShellAnalysis:
        """A copy whose lists the caller may change (the commands are frozen)."""
        return ShellAnalysis(
            list(self.commands),
            list(self.writes),
            list(self.reads),
            list(self.problems),
            self.changes_dir,
            list(self.wrappers),
            self.settled,
        )


ANALYSIS_CACHE_SIZE = 256
"""Analyses kept, most recently used first: a subagent repeats its commands (tests,
builds, `git status`), and each analysis parses the command twice (about 30-110 us)."""
ANALYSIS_CACHE_MAX_CHARS = 4096
"""Longer commands are analysed every time, so the cache holds at most about
ANALYSIS_CACHE_SIZE x 4 KiB of commands (plus their analyses)."""


class _Unsettled(Exception):
    """Carries an analysis out of the cache unstored (`ShellAnalysis.settled`)."""

    def __init__(self, analysis: ShellAnalysis) -> None:
        super().__init__("unsettled analysis")
        self.analysis = analysis


def analyse(command: str) -> ShellAnalysis:
    """Split `command` into simple commands, redirect targets and problems.

    A pure function of the string (this package reads no file, clock or environment:
    what the paths it returns resolve to is the caller's to check, every time), so the
    last ANALYSIS_CACHE_SIZE results are reused for the same exact string; each caller
    gets its own copy. A command of a shape whose parse is superlinear
    (`refused_shape`) is not parsed: it has one problem, so it asks."""
    refused = refused_shape(command)
    if refused is not None:
        return ShellAnalysis(problems=[refused])
    if len(command) > ANALYSIS_CACHE_MAX_CHARS:
        return _analyse(command)
    try:
        return _cached_analysis(command).copy()
    except _Unsettled as exc:  # not cached (lru_cache never stores an exception)
        return exc.analysis


@lru_cache(maxsize=ANALYSIS_CACHE_SIZE)
def _cached_analysis(command: str) -> ShellAnalysis:
    """The analysis kept by the cache; never handed out itself (`analyse` copies it)."""
    result = _analyse(command)
    if not result.settled:
        raise _Unsettled(result)
    return result


def _analyse(command: str) -> ShellAnalysis:
    result = ShellAnalysis()
    try:
        _Analyser(result).unit(command, BASH, 0, [])
    except Unprovable as exc:
        result.problems.append(str(exc))
        _loose(command, result)
    except Exception as exc:  # a bug or a resource limit: never a crash, always an ask
        log.exception("the Bash analyser failed on a command of %d characters", len(command))
        result.problems.append(f"the analyser failed ({type(exc).__name__})")
        result.settled = False
        _loose(command, result)
    return result


MAX_LOOSE_CHARS = 16 * 1024
"""Longest unproven command whose commands tree-sitter lists for deny and ask rules.
Its GLR parse grows faster than linearly on long pipelines (about 3 s of host CPU for
64 KB); a longer command is only asked about, and says that rules were not checked."""


def _loose(command: str, result: ShellAnalysis) -> None:
    """For a command that is not proven, the commands tree-sitter sees, so deny and ask
    rules still match them (the command cannot be allowed by a rule anyway)."""
    if len(command) > MAX_LOOSE_CHARS:
        result.problems.append(
            f"longer than {MAX_LOOSE_CHARS // 1024} KiB, so its commands were not checked "
            "against deny rules"
        )
        return
    try:
        found = loose_commands(command)
    except ValueError:
        return
    except RecursionError:
        result.settled = False
        return
    seen = {c.words for c in result.commands}
    for words in found:
        loose = ShellAnalysis()
        try:
            _Analyser(loose)._run(
                [Word(w, w, dynamic=DYNAMIC in w) for w in words], BASH, 0, [], open_ended=False
            )
        except Unprovable:  # keep the words as they are
            loose.commands.append(SimpleCommand(tuple(words)))
        except Exception:  # any other failure: the same, and not cached
            loose.commands.append(SimpleCommand(tuple(words)))
            result.settled = False
        for cmd in loose.commands:
            if cmd.words not in seen:
                seen.add(cmd.words)
                result.commands.append(cmd)


class _Analyser:
    def __init__(self, result: ShellAnalysis) -> None:
        self.result = result

    def unit(self, src: str, dialect: Dialect, depth: int, inherited: Sequence[Redirect]) -> None:
        """Analyse a script; `inherited`: the redirections in force where it runs (the
        descriptors a nested `sh -c`, `eval` or `bash -c` script starts with)."""
        if dialect == ANY_SHELL:  # run by $SHELL: it must be proven as bash and as dash
            self.unit(src, BASH, depth, inherited)
            self.unit(src, DASH, depth, inherited)
            return
        parsed = parse(src, dialect, depth)
        for name in parsed.loop_names:
            check_variable(name)
        for group in parsed.groups:
            scope = [*group.scope, *inherited]
            for red in group.redirects:
                self._redirect(red, scope)
        for cmd in parsed.commands:
            self._command(cmd, dialect, depth, [*cmd.group.scope, *inherited])
        why = disagreement(src, parsed)
        if why:
            raise Unprovable(why)

    def _command(
        self, cmd: Command, dialect: Dialect, depth: int, scope: Sequence[Redirect]
    ) -> None:
        if not cmd.words:
            for name, value in cmd.assignments:
                check_variable(name, value)
            return
        for name, value in cmd.assignments:
            check_prefix(name, value)
        words = [
            expanded
            for word in cmd.words
            for expanded in (
                [Word(w, w, glob="*" in w or "?" in w) for w in expand_braces(word.raw)]
                if word.brace
                else [word]
            )
        ]
        self._run(words, dialect, depth, scope, open_ended=False)

    def _run(
        self,
        words: list[Word],
        dialect: Dialect,
        depth: int,
        scope: Sequence[Redirect],
        *,
        open_ended: bool,
        replace: str | None = None,
        execvp: bool = False,
    ) -> None:
        """Record what `words` runs; `execvp`: a program run by a wrapper, never a builtin."""
        if depth > MAX_NESTING:
            raise Unprovable(f"nested deeper than {MAX_NESTING} levels")
        head = words[0]
        if head.dynamic or head.glob or head.tilde or (replace and replace in head.value):
            raise Unprovable(f"command name {head.raw!r} is only known at run time")
        if not head.value:
            raise Unprovable("an empty command name")
        name = wrapper_name(head)
        if execvp and name in SHELL_ONLY:
            name = None  # `xargs command x` looks for a program called `command`
        if name in DIR_CHANGERS:
            self.result.changes_dir = True
        elif self.result.changes_dir and "/" in head.value and not head.value.startswith("/"):
            raise Unprovable(f"'{head.value}' is run after a cd, so which file it is is unknown")
        if name is not None:
            _check_builtin(name, words)
        unwrapped = unwrap(name, words, dialect) if name is not None else None
        if open_ended and name in RUNS_ITS_ARGUMENTS:
            _check_open_wrapper(name, unwrapped)
        record = SimpleCommand(tuple(w.value for w in words), open_ended)
        if unwrapped is None:
            self.result.commands.append(record)
            return
        if name != "find":
            self.result.wrappers.append(record)
        for w in [*unwrapped.writes, *unwrapped.reads]:
            if replace and replace in w.value:
                raise Unprovable(f"'{name}' file {w.raw!r} is replaced at run time")
        for w in unwrapped.writes:
            self._target(w, scope, write=True)
        for w in unwrapped.reads:
            self._target(w, scope, write=False)
        if name == "find":
            self.result.commands.append(record)
            for inner in unwrapped.extra:
                if "{}" in inner[0].value:
                    raise Unprovable("'find -exec {}' runs a command only known at run time")
                self._run(
                    inner, dialect, depth + 1, scope, open_ended=True, replace="{}", execvp=True
                )
            return
        if unwrapped.script is not None:
            if replace and replace in unwrapped.script:
                raise Unprovable(f"a script with {replace!r}, replaced at run time")
            self.unit(unwrapped.script, unwrapped.dialect, depth + 1, scope)
        elif unwrapped.argv:
            self._run(
                unwrapped.argv,
                dialect,
                depth + 1,
                scope,
                open_ended=open_ended or unwrapped.open_ended,
                replace=unwrapped.replace or replace,
                execvp=execvp or name in EXECS_ITS_COMMAND,
            )

    def _redirect(self, red: Redirect, scope: Sequence[Redirect]) -> None:
        op, target = red.op, red.target
        if op in ("<<", "<<-", "<<<"):
            return
        if op in (">&", "<&") and (target.value.isdigit() or target.value == "-"):
            if target.dynamic:
                raise Unprovable(f"redirection '{op}{target.raw}' is only known at run time")
            return
        if op == "<&" or (op == ">&" and red.fd):
            raise Unprovable(f"redirection '{red.fd}{op}{target.raw}'")
        if op == "<" and target.raw.startswith("<(") and target.dynamic:
            return
        self._target(target, scope, write=op in _WRITE_OPS or op == ">&")

    def _target(self, target: Word, scope: Sequence[Redirect], *, write: bool) -> None:
        if target.dynamic or target.glob or target.tilde or "~" in target.value or not target.value:
            raise Unprovable(f"redirection target {target.raw!r} is not a literal path")
        path = target.value
        if len(path.encode("utf-8", "surrogateescape")) >= PATH_MAX:
            raise Unprovable(f"a path longer than PATH_MAX ({PATH_MAX} bytes)")
        fd = descriptor_of(path)
        if fd is not None and write:
            # Opening /dev/fd/N reopens the file N holds, for writing: a write to it.
            for held in files_held(fd, scope):
                if held.value not in self.result.writes:
                    self._target(held, [], write=True)
        if path.startswith("/dev/"):
            if is_safe_device(path):
                return
            raise Unprovable(f"redirection to the device {path!r}")
        (self.result.writes if write else self.result.reads).append(path)


def _check_open_wrapper(name: str, unwrapped: Unwrapped | None) -> None:
    """A wrapper that gets more arguments at run time (`xargs xargs`, `find -exec env`)
    is proven only when its command is already a literal word: otherwise the added
    arguments choose what runs."""
    if (
        unwrapped is None
        or name == "find"
        or unwrapped.default_command
        or (unwrapped.script is not None and unwrapped.joins_arguments)
        or (unwrapped.argv is None and unwrapped.script is None)
    ):
        raise Unprovable(f"'{name}' gets arguments at run time that may choose what it runs")


def _check_builtin(name: str, words: list[Word]) -> None:
    """Builtins whose arguments bash may evaluate as code or names."""
    if name in STATE_BUILTINS:
        raise Unprovable(f"'{name}' changes the shell's state or evaluates text as code")
    args = words[1:]
    if name == "printf" and args and (args[0].dynamic or args[0].value.startswith("-v")):
        raise Unprovable("'printf -v' assigns a variable")
    if name == "wait" and any(a.value.startswith("-") and "p" in a.value for a in args):
        raise Unprovable("'wait -p' assigns a variable")
    if name == "read":
        names = [a for a in args if a.value != "-r" or a.dynamic]
        if any(a.value.startswith("-") for a in names):
            raise Unprovable("'read' with options other than -r")
        for a in names:
            if a.dynamic or a.glob:
                raise Unprovable("'read' into a variable only known at run time")
            check_variable(a.value)
    if name in ("test", "["):
        inner = args[:-1] if name == "[" else args
        if any(a.value in ("-v", "-R") for a in inner):
            raise Unprovable(f"'{name} -v' evaluates a variable name")
        dynamic = sum(2 if not a.quoted else 1 for a in inner if a.dynamic)
        if dynamic >= 2 or (dynamic and any("[" in a.value for a in inner)):
            raise Unprovable(f"'{name}' with run-time operands that could form a '-v' test")
