"""Commands that run other commands (`eval`, `sh -c`, `exec`, `env`, `nice`,
`timeout`, `xargs`, ...): what they really run, for the shell analyser."""

from __future__ import annotations

import re

DYNAMIC = "\x00"
"""Stands for text only known at run time ($VAR, $(...)); matches only a `*` in rules."""

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "busybox sh"})
OPENERS = frozenset({"if", "then", "else", "elif", "do", "while", "until", "!", "{", "time"})
CLOSERS = frozenset({"fi", "done", "}"})
UNSUPPORTED_KEYWORDS = frozenset({"for", "case", "select", "function", "coproc", "esac"})
DIR_CHANGERS = frozenset({"cd", "pushd", "popd"})
DANGEROUS_ENV = re.compile(
    r"^(PATH|IFS|ENV|BASH_ENV|SHELLOPTS|BASHOPTS|PS4|PROMPT_COMMAND|CDPATH|HOME|"
    r"LD_\w*|DYLD_\w*|GIT_\w*|PAGER|\w*_PAGER|EDITOR|VISUAL|PYTHON\w*|PERL\w*|RUBY\w*|"
    r"NODE_OPTIONS|NODE_PATH|BASH_FUNC_\w*|GCONV_PATH|TMPDIR)$"
)
"""Environment prefixes that change what a command runs; such a command is not understood."""

_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?\+?=")


class Unparsable(Exception):
    """The analyser does not understand a command; the message says what."""


_Unwrapped = tuple[list[str], bool] | str | None


def unwrap(name: str, argv: list[str]) -> _Unwrapped:
    """For a command that runs another command, that command (argv, open_ended) or
    script text; None when `argv` is an ordinary command."""
    args = argv[1:]
    if name in ("setsid", "stdbuf", "ionice"):
        while args and args[0].startswith("-"):
            flag = args.pop(0)
            if flag in ("-i", "-o", "-e", "-c", "-n", "-p", "-t") and name != "setsid":
                _need(args, f"{name} {flag}")
                args.pop(0)
        return (args, False) if args else None
    if name in ("exec", "nohup", "builtin", "command"):
        if name == "command" and args and args[0] in ("-v", "-V"):
            return None
        while args and args[0].startswith("-") and name in ("exec", "command"):
            flag = args.pop(0)
            if flag == "-a" and name == "exec":
                _need(args, "exec -a")
                args.pop(0)
        return (args, False)
    if name == "eval":
        text = " ".join(args)
        if DYNAMIC in text:
            raise Unparsable("eval of text that is only known at run time")
        return text
    if name in SHELLS:
        return _shell_c(name, args)
    if name == "env":
        return _env(args)
    if name == "nice":
        while args and args[0].startswith("-"):
            if args.pop(0) == "-n":
                _need(args, "nice -n")
                args.pop(0)
        return (args, False) if args else None
    if name == "timeout":
        while args and args[0].startswith("-"):
            if args.pop(0) in ("-s", "-k"):
                _need(args, "timeout")
                args.pop(0)
        _need(args, "timeout")
        args.pop(0)
        return (args, False)
    if name == "xargs":
        return _xargs(args)
    return None


def _need(args: list[str], what: str) -> None:
    if not args:
        raise Unparsable(f"'{what}' is missing an argument")


def _shell_c(name: str, args: list[str]) -> _Unwrapped:
    i = 0
    script_flag = False
    while i < len(args) and args[i].startswith("-") and args[i] not in ("-", "--"):
        if args[i].startswith("--"):
            raise Unparsable(f"'{name} {args[i]}' is not analysed")
        if "c" in args[i]:
            script_flag = True
        if args[i] in ("-o", "+o") or args[i].endswith("o"):
            i += 1
        i += 1
    if not script_flag:
        return None
    if i >= len(args):
        raise Unparsable(f"'{name} -c' without a script")
    if DYNAMIC in args[i]:
        raise Unparsable(f"'{name} -c' with a script only known at run time")
    return args[i]


def _env(args: list[str]) -> _Unwrapped:
    while args and args[0].startswith("-"):
        flag = args.pop(0)
        if flag in ("-u", "--unset"):
            _need(args, "env -u")
            args.pop(0)
        elif flag in ("-i", "-", "--ignore-environment", "-0", "--null") or flag.startswith(
            "--unset="
        ):
            continue
        else:
            raise Unparsable(f"'env {flag}' is not analysed")
    while args and _ASSIGNMENT.match(args[0]):
        name = _ASSIGNMENT.match(args[0]).group(1)  # type: ignore[union-attr]
        if DANGEROUS_ENV.match(name):
            raise Unparsable(f"'env {name}=' changes what the command runs")
        args.pop(0)
    return (args, False) if args else None


_XARGS_WITH_VALUE = frozenset({"-n", "-I", "-i", "-d", "-P", "-L", "-s", "-E", "-a", "-e"})
_XARGS_FLAGS = frozenset({"-0", "-r", "-t", "-x", "-p", "--null", "--no-run-if-empty", "--verbose"})


def _xargs(args: list[str]) -> _Unwrapped:
    while args and args[0].startswith("-"):
        flag = args.pop(0)
        if flag in _XARGS_WITH_VALUE:
            _need(args, f"xargs {flag}")
            args.pop(0)
        elif flag in _XARGS_FLAGS or (len(flag) > 2 and flag[:2] in _XARGS_WITH_VALUE):
            continue
        else:
            raise Unparsable(f"'xargs {flag}' is not analysed")
    return (args or ["echo"], True)
