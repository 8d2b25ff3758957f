"""Commands that run other commands, with option grammars taken from their manuals
(GNU coreutils 9.1, findutils 4.9, util-linux 2.38, procps-ng 4.0 as in Debian
bookworm; bash 5.2 for the builtins).

For each wrapper warden looks through, `unwrap` finds the command it runs: options
are read as GNU getopt_long reads them (clustered short options, a required value
attached or in the next word, an optional value only attached, `--long=value` or
`--long value`, unambiguous long prefixes, `--` ends the options, the first operand
ends them too: all these wrappers use a leading `+` in their option string). An
option not in the manual, or one that changes what runs (`env -S`, `env -C`,
`xargs --process-slot-var`), is not proven (asks).

Wrappers not modelled here are ordinary commands: their own name needs a rule, and
their arguments are never looked through. Privilege and root changers (`sudo`, `su`,
`doas`, `chroot`, …) and GNU `parallel` are not proven at all.

One idea over 400 lines: a table of grammars (one per wrapper, from its manual)
and the one getopt reader they share; splitting the table would scatter it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from orchestrator.permissions.shell.parser import BASH, DASH, Dialect, Unprovable, Word

STANDARD_DIRS = ("/bin/", "/usr/bin/", "/usr/local/bin/", "/sbin/", "/usr/sbin/")
NOT_PROVEN = frozenset(
    {
        "sudo",
        "su",
        "doas",
        "pkexec",
        "runuser",
        "chroot",
        "parallel",
        "sg",
        "newgrp",
        "setpriv",
        "unshare",
        "nsenter",
        "fakechroot",
        "busybox",
    }
)
ANY_SHELL: Dialect = "bash or dash"
"""The dialect of a script run by `$SHELL` (`flock -c`): proven only when it is
proven both as bash and as dash."""
DASH_HAS_NO = frozenset({"builtin"})
"""bash builtins dash lacks: under dash they are programs looked up in PATH."""
OTHER_SHELLS = frozenset(
    {"zsh", "ksh", "ksh93", "mksh", "ash", "rbash", "fish", "csh", "tcsh", "yash", "posh"}
)


@dataclass(frozen=True)
class Grammar:
    """A getopt_long option grammar."""

    flags: str = ""
    """Short options without a value."""
    required: str = ""
    """Short options with a required value."""
    optional: str = ""
    """Short options with an optional (attached only) value."""
    long_flags: frozenset[str] = frozenset()
    long_required: frozenset[str] = frozenset()
    long_optional: frozenset[str] = frozenset()
    aliases: dict[str, str] = field(default_factory=dict)
    """Long name -> the short letter it stands for (so both spellings compare equal)."""


def _g(
    flags: str = "",
    required: str = "",
    optional: str = "",
    *,
    lf: str = "",
    lr: str = "",
    lo: str = "",
    aliases: dict[str, str] | None = None,
) -> Grammar:
    return Grammar(
        flags,
        required,
        optional,
        frozenset(lf.split()),
        frozenset(lr.split()),
        frozenset(lo.split()),
        aliases or {},
    )


GRAMMARS: dict[str, Grammar] = {
    "env": _g(
        "i0v",
        "uCS",
        lf="ignore-environment null debug list-signal-handling help version",
        lr="unset chdir split-string",
        lo="block-signal default-signal ignore-signal",
        aliases={
            "ignore-environment": "i",
            "null": "0",
            "debug": "v",
            "unset": "u",
            "chdir": "C",
            "split-string": "S",
        },
    ),
    "timeout": _g(
        "fpv",
        "ks",
        lf="foreground preserve-status verbose help version",
        lr="kill-after signal",
        aliases={"kill-after": "k", "signal": "s"},
    ),
    "nice": _g("", "n", lf="help version", lr="adjustment", aliases={"adjustment": "n"}),
    "ionice": _g(
        "thV",
        "cnpPu",
        lf="ignore help version",
        lr="class classdata pid pgid uid",
        aliases={"pid": "p", "pgid": "P", "uid": "u", "help": "h", "version": "V"},
    ),
    "stdbuf": _g("", "ioe", lf="help version", lr="input output error"),
    "setsid": _g("cfwhV", lf="ctty fork wait help version", aliases={"help": "h", "version": "V"}),
    "nohup": _g(lf="help version"),
    "xargs": _g(
        "0prtxo",
        "aEIdLnPs",
        "eil",
        lf="null interactive no-run-if-empty verbose exit show-limits open-tty help version",
        lr="arg-file delimiter max-args max-procs max-chars process-slot-var",
        lo="eof replace max-lines",
        aliases={"replace": "i", "arg-file": "a", "help": "h", "version": "V"},
    ),
    "flock": _g(
        "sxenouFhV",
        "wEc",
        lf="shared exclusive unlock nonblock nb close no-fork verbose help version",
        lr="timeout wait conflict-exit-code command",
        aliases={"command": "c", "help": "h", "version": "V"},
    ),
    "watch": _g(
        "bcCegptwxhv",
        "nq",
        "d",
        lf="beep color no-color errexit chgexit precise "
        "no-title no-wrap exec no-rerun help version",
        lr="interval equexit",
        lo="differences",
        aliases={"exec": "x", "help": "h", "version": "v"},
    ),
    "unbuffer": _g("p"),
    "command": _g("pvV"),
    "exec": _g("cl", "a"),
}
"""Each wrapper's options, from its manual page."""
SHELL_ONLY = frozenset(
    {
        "command",
        "builtin",
        "eval",
        "exec",
        "cd",
        "pushd",
        "popd",
        "dirs",
        "read",
        "source",
        ".",
        "export",
        "declare",
        "typeset",
        "local",
        "readonly",
        "unset",
        "set",
        "shopt",
        "alias",
        "unalias",
        "trap",
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
        "wait",
        "jobs",
        "fg",
        "bg",
        "disown",
        "suspend",
        "logout",
        "exit",
        "return",
        "break",
        "continue",
        "shift",
        "times",
        "caller",
        "help",
        "type",
        ":",
        "function",
        "coproc",
        "select",
    }
)
"""bash builtins with no program of the same name (Debian bookworm): run by `env`,
`xargs`, `find -exec`, `exec`, … they are looked up in PATH, not run as builtins."""
EXECS_ITS_COMMAND = frozenset(
    {
        "env",
        "timeout",
        "nice",
        "ionice",
        "stdbuf",
        "setsid",
        "nohup",
        "xargs",
        "flock",
        "watch",
        "unbuffer",
        "exec",
        "find",
    }
)
"""Wrappers that run their command with execvp, so the command is never a builtin."""
RUNS_ITS_ARGUMENTS = frozenset(
    {*GRAMMARS, "eval", "builtin", "find", "sh", "bash", "dash", *OTHER_SHELLS, *NOT_PROVEN}
)
"""Commands whose arguments can name a command to run."""


@dataclass
class Unwrapped:
    """What a wrapper runs: a command (argv), or script text, plus side effects."""

    argv: list[Word] | None = None
    script: str | None = None
    dialect: Dialect = BASH
    open_ended: bool = False
    """More arguments are added at run time (`xargs`, `find -exec … +`)."""
    writes: list[Word] = field(default_factory=list)
    reads: list[Word] = field(default_factory=list)
    replace: str | None = None
    """xargs -I: this string in the command's words is replaced at run time."""
    default_command: bool = False
    """No command was given; the wrapper runs a default (`xargs` runs `echo`)."""
    joins_arguments: bool = False
    """The script is the wrapper's arguments joined (`eval`, `watch`)."""
    extra: list[list[Word]] = field(default_factory=list)
    """Further commands run beside the wrapper itself (`find -exec`)."""


def wrapper_name(word: Word) -> str | None:
    """The wrapper a command word names (`env`, `/usr/bin/env`); None for `./env`."""
    if word.dynamic or word.glob or word.tilde:
        return None
    value = word.value
    if "/" not in value:
        return value
    base = value.rsplit("/", 1)[1]
    return base if any(value == d + base for d in STANDARD_DIRS) else None


def parse_options(
    name: str, grammar: Grammar, args: list[Word]
) -> tuple[list[tuple[str, str | None]], int]:
    """Read options the way getopt_long does with a leading `+`; (options, first operand)."""
    longs = grammar.long_flags | grammar.long_required | grammar.long_optional
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(args):
        word = args[i]
        text = word.value
        if word.dynamic or word.glob or word.tilde:
            if text.startswith("-") or text.startswith("\x00") or word.glob or word.tilde:
                raise Unprovable(f"'{name}' option {word.raw!r} is only known at run time")
            return out, i
        if text == "--":
            return out, i + 1
        if not text.startswith("-") or text == "-":
            return out, i
        if text.startswith("--"):
            body, eq, value = text[2:].partition("=")
            matches = [n for n in longs if n == body] or [n for n in longs if n.startswith(body)]
            if len(matches) != 1:
                raise Unprovable(f"'{name} {text}' is not an option in its manual")
            opt = matches[0]
            key = grammar.aliases.get(opt, opt)
            if opt in grammar.long_flags:
                if eq:
                    raise Unprovable(f"'{name} {text}' takes no value")
                out.append((key, None))
            elif opt in grammar.long_optional:
                out.append((key, value if eq else None))
            else:
                if not eq:
                    i += 1
                    if i >= len(args):
                        raise Unprovable(f"'{name} --{opt}' is missing its value")
                    value = args[i].value
                out.append((key, value))
            i += 1
            continue
        j = 1
        while j < len(text):
            c = text[j]
            if c in grammar.flags:
                out.append((c, None))
                j += 1
                continue
            if c in grammar.optional:
                out.append((c, text[j + 1 :]))
                break
            if c in grammar.required:
                value = text[j + 1 :]
                if not value:
                    i += 1
                    if i >= len(args):
                        raise Unprovable(f"'{name} -{c}' is missing its value")
                    value = args[i].value
                out.append((c, value))
                break
            raise Unprovable(f"'{name} -{c}' is not an option in its manual")
        i += 1
    return out, i


def unwrap(name: str, argv: list[Word], dialect: Dialect = BASH) -> Unwrapped | None:
    """For a command that runs another command, what it runs; None for other commands.
    `dialect`: the shell running `argv` (its builtins differ: dash's `exec` and
    `eval` take no options, and dash has no `builtin`)."""
    args = argv[1:]
    if dialect == DASH and name in DASH_HAS_NO:
        return None
    if dialect == DASH and name == "exec":
        if not args:
            raise Unprovable("'exec' without a command changes the shell's file descriptors")
        return Unwrapped(argv=args)
    if name in NOT_PROVEN:
        raise Unprovable(f"'{name}' runs commands in a way warden does not analyse")
    if name in ("sh", "dash", "bash"):
        return _shell(name, args)
    if name in OTHER_SHELLS:
        if any(a.value.startswith("-") and "c" in a.value for a in args):
            raise Unprovable(f"'{name} -c' (only bash and sh/dash scripts are analysed)")
        return None
    if name == "eval":
        if any(a.dynamic for a in args):
            raise Unprovable("'eval' of text only known at run time")
        return Unwrapped(
            script=" ".join(a.value for a in args), dialect=dialect, joins_arguments=True
        )
    if name == "builtin":
        return Unwrapped(argv=args) if args else None
    if name == "find":
        return _find(args)
    grammar = GRAMMARS.get(name)
    if grammar is None:
        return None
    if name == "nice" and args and re.fullmatch(r"-[+-]?\d+", args[0].value):
        args = [Word("-n", "-n"), Word(args[0].value[1:], args[0].raw), *args[1:]]
    opts, k = parse_options(name, grammar, args)
    keys = {o for o, _ in opts}
    rest = args[k:]
    if keys & {"help", "version", "h", "V"} or (name == "watch" and "v" in keys):
        return None
    handler = _HANDLERS.get(name)
    if handler is not None:
        return handler(name, opts, rest)
    if not rest:
        if name in ("stdbuf", "setsid", "nohup", "unbuffer"):
            raise Unprovable(f"'{name}' without a command")
        return None
    result = Unwrapped(argv=rest)
    if name == "nohup":
        result.writes.append(Word("nohup.out", "nohup.out"))
    return result


def _env(name: str, opts: list[tuple[str, str | None]], rest: list[Word]) -> Unwrapped | None:
    from orchestrator.permissions.shell.env import check_prefix

    for key, _ in opts:
        if key in ("S", "C"):
            raise Unprovable(f"'env -{key}' ({'split-string' if key == 'S' else 'chdir'})")
    if rest and rest[0].value == "-" and not rest[0].quoted:
        rest = rest[1:]
    while rest and not rest[0].quoted and re.match(r"[A-Za-z_][A-Za-z0-9_]*=", rest[0].value):
        var, _, value = rest[0].value.partition("=")
        raw = rest[0].raw.partition("=")[2]
        check_prefix(var, Word(value, raw, rest[0].dynamic, rest[0].glob), "after 'env' ")
        rest = rest[1:]
    if rest and "=" in rest[0].value:
        raise Unprovable(f"'env' argument {rest[0].raw!r} that may be an assignment")
    return Unwrapped(argv=rest) if rest else None


def _timeout(name: str, opts: list[tuple[str, str | None]], rest: list[Word]) -> Unwrapped:
    if len(rest) < 2:
        raise Unprovable("'timeout' without a duration and a command")
    return Unwrapped(argv=rest[1:])


def _nice(name: str, opts: list[tuple[str, str | None]], rest: list[Word]) -> Unwrapped | None:
    return Unwrapped(argv=rest) if rest else None


def _ionice(name: str, opts: list[tuple[str, str | None]], rest: list[Word]) -> Unwrapped | None:
    if any(k in ("p", "P", "u", "pid", "pgid", "uid") for k, _ in opts) or not rest:
        return None
    return Unwrapped(argv=rest)


def _xargs(name: str, opts: list[tuple[str, str | None]], rest: list[Word]) -> Unwrapped:
    result = Unwrapped(
        argv=rest or [Word("echo", "echo")], open_ended=True, default_command=not rest
    )
    for key, value in opts:
        if key == "process-slot-var":
            raise Unprovable(
                "'xargs --process-slot-var' sets a variable in the command's environment"
            )
        if key in ("I", "i"):
            result.replace = value or "{}"
        if key == "a":
            result.reads.append(Word(value or "", value or ""))
    return result


def _flock(name: str, opts: list[tuple[str, str | None]], rest: list[Word]) -> Unwrapped | None:
    script = next((v for k, v in opts if k == "c"), None)
    if not rest:
        raise Unprovable("'flock' without a file or descriptor")
    target, rest = rest[0], rest[1:]
    if target.value.isdigit() and script is None and not rest:
        return None
    result = Unwrapped()
    result.writes.append(target)
    if script is not None:
        if rest:
            raise Unprovable("'flock -c' with extra arguments")
        result.script, result.dialect = script, ANY_SHELL
    elif rest:
        result.argv = rest
    else:
        raise Unprovable("'flock' without a command")
    return result


def _watch(name: str, opts: list[tuple[str, str | None]], rest: list[Word]) -> Unwrapped:
    if not rest:
        raise Unprovable("'watch' without a command")
    if any(k == "x" for k, _ in opts):
        return Unwrapped(argv=rest)
    if any(w.dynamic for w in rest):
        raise Unprovable("'watch' of text only known at run time")
    return Unwrapped(script=" ".join(w.value for w in rest), dialect=DASH, joins_arguments=True)


def _command(name: str, opts: list[tuple[str, str | None]], rest: list[Word]) -> Unwrapped | None:
    if any(k in ("v", "V") for k, _ in opts) or not rest:
        return None
    return Unwrapped(argv=rest)


def _exec(name: str, opts: list[tuple[str, str | None]], rest: list[Word]) -> Unwrapped | None:
    if not rest:
        raise Unprovable("'exec' without a command changes the shell's file descriptors")
    return Unwrapped(argv=rest)


_HANDLERS = {
    "env": _env,
    "timeout": _timeout,
    "nice": _nice,
    "ionice": _ionice,
    "xargs": _xargs,
    "flock": _flock,
    "watch": _watch,
    "command": _command,
    "exec": _exec,
}

_SHELL_FLAGS = "euxvfCbhn"
"""Shell options that do not change what runs (`-a` would export every assignment,
`+B` would turn brace expansion off, `-i`/`-l` read start-up files: those ask)."""
_SAFE_SET_O = frozenset(
    {"errexit", "nounset", "pipefail", "xtrace", "verbose", "noglob", "noclobber"}
)


def _shell(name: str, args: list[Word]) -> Unwrapped | None:
    """`bash`/`sh`/`dash` options (bash(1) INVOCATION, dash(1)); `-c` runs its operand."""
    script_flag = False
    i = 0
    while i < len(args):
        word = args[i]
        text = word.value
        if word.dynamic or word.glob:
            if text[:1] in ("-", "+", "\x00"):
                raise Unprovable(f"'{name}' option {word.raw!r} is only known at run time")
            break
        if text in ("--", "-"):
            i += 1
            break
        if text in ("--norc", "--noprofile") and name == "bash":
            i += 1
            continue
        if text[:1] not in ("-", "+") or len(text) < 2 or text.startswith("--"):
            if text.startswith("--"):
                raise Unprovable(f"'{name} {text}' is not analysed")
            break
        for j, c in enumerate(text[1:], 1):
            if c == "c" and text[0] == "-":
                script_flag = True
            elif c == "o":
                if j != len(text) - 1 or i + 1 >= len(args):
                    raise Unprovable(f"'{name} {text}' without an option name")
                i += 1
                if args[i].value not in _SAFE_SET_O:
                    raise Unprovable(f"'{name} -o {args[i].raw}' is not analysed")
            elif c not in _SHELL_FLAGS:
                raise Unprovable(f"'{name} {text[0]}{c}' is not analysed")
        i += 1
    if not script_flag:
        return None
    if i >= len(args):
        raise Unprovable(f"'{name} -c' without a script")
    if args[i].dynamic:
        raise Unprovable(f"'{name} -c' with a script only known at run time")
    return Unwrapped(script=args[i].value, dialect=BASH if name == "bash" else DASH)


def _find(args: list[Word]) -> Unwrapped | None:
    """`find`'s actions that run commands (`-exec`, `-execdir`, `-ok`, `-okdir`) or write
    files (`-fprint`, `-fprint0`, `-fprintf`, `-fls`). Returns the extra effects; the
    `find` command itself is still a command."""
    result = Unwrapped()
    execs: list[list[Word]] = []
    i = 0
    while i < len(args):
        text = args[i].value
        if args[i].dynamic and args[i].value.startswith("\x00"):
            raise Unprovable("a 'find' expression only known at run time")
        if text in ("-exec", "-execdir", "-ok", "-okdir"):
            j = i + 1
            while j < len(args):
                if args[j].value == ";" or (args[j].value == "+" and args[j - 1].value == "{}"):
                    break
                j += 1
            if j >= len(args) or j == i + 1:
                raise Unprovable(f"'find {text}' without a command and ';' or '+'")
            execs.append(args[i + 1 : j])
            i = j + 1
            continue
        if text in ("-fprint", "-fprint0", "-fls", "-fprintf"):
            if i + 1 >= len(args):
                raise Unprovable(f"'find {text}' without a file")
            result.writes.append(args[i + 1])
            i += 3 if text == "-fprintf" else 2
            continue
        i += 1
    result.extra = execs
    return result
