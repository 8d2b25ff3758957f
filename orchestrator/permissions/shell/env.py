"""Which variable assignments a proven command may contain.

`VAR=value cmd` (and `env VAR=value cmd`) changes the environment of a program the
rules allow; most variables can make a program load or run something else
(`PATH`, `LD_PRELOAD`, `GIT_CONFIG_GLOBAL`, `XDG_CONFIG_HOME`, `PYTHONSTARTUP`,
`NODE_OPTIONS`, `*_PAGER`, `EDITOR`, `BASH_ENV`, …). So a prefix passes only for
the small allowlist below, each with a literal value of a harmless shape; anything
else asks.

A standalone assignment (`x=1; …`) or a `for x in` loop variable only changes a
shell variable, which matters when the name is special to bash (`PATH`, `IFS`,
`BASH_CMDS`, `PS4`, `CDPATH`, …) or already exported (then later commands see it).
Special and conventionally exported names are upper case, so such assignments pass
for lower-case names (and the prefix allowlist); `*_proxy` and bash's lower-case
specials (`histchars`, `auto_resume`) ask.
"""

from __future__ import annotations

import re

from orchestrator.permissions.shell.parser import Unprovable, Word

_LOCALE = re.compile(r"[A-Za-z0-9_.@-]*")
_TOKEN = re.compile(r"[A-Za-z0-9_.:@+-]*")
_NUMBER = re.compile(r"\d{1,6}")
_TZ = re.compile(r":?[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+)*")

PREFIX_ALLOWLIST: dict[str, re.Pattern[str]] = {
    # locale (a value with '/' would be a path to locale data: refused)
    "LANG": _LOCALE,
    "LANGUAGE": re.compile(r"[A-Za-z0-9_.@:-]*"),
    "LC_ALL": _LOCALE,
    "LC_CTYPE": _LOCALE,
    "LC_COLLATE": _LOCALE,
    "LC_MESSAGES": _LOCALE,
    "LC_NUMERIC": _LOCALE,
    "LC_TIME": _LOCALE,
    "LC_MONETARY": _LOCALE,
    "TZ": _TZ,
    # colour and terminal size
    "NO_COLOR": _TOKEN,
    "FORCE_COLOR": _TOKEN,
    "CLICOLOR": _TOKEN,
    "CLICOLOR_FORCE": _TOKEN,
    "TERM": re.compile(r"[A-Za-z0-9_.+-]*"),
    "COLUMNS": _NUMBER,
    "LINES": _NUMBER,
    # harmless switches read by test runners and build tools
    "CI": _TOKEN,
    "PYTHONDONTWRITEBYTECODE": _TOKEN,
    "PYTHONUNBUFFERED": _TOKEN,
    "PYTHONHASHSEED": re.compile(r"\d{1,10}|random"),
    "PYTHONUTF8": re.compile(r"[01]"),
    "RUST_BACKTRACE": _TOKEN,
    "CARGO_TERM_COLOR": _TOKEN,
}
"""Variables a command prefix may set, with the value shape each accepts."""

_BASH_LOWER_SPECIALS = frozenset({"histchars", "auto_resume"})
_LOCAL_NAME = re.compile(r"[a-z_][a-z0-9_]*")


def check_prefix(name: str, value: Word, where: str = "") -> None:
    """`NAME=value cmd`: passes only for the allowlist; raises `Unprovable` otherwise."""
    shape = PREFIX_ALLOWLIST.get(name)
    if shape is None:
        raise Unprovable(
            f"environment prefix '{name}=' {where}(only harmless variables such as LANG, "
            "LC_*, TZ, TERM, NO_COLOR, CI are proven; see policies/README.md)"
        )
    _check_value(name, value, shape)


def check_variable(name: str, value: Word | None = None) -> None:
    """A standalone assignment or loop variable: a lower-case name or the allowlist."""
    if name in PREFIX_ALLOWLIST and value is not None:
        _check_value(name, value, PREFIX_ALLOWLIST[name])
        return
    if not _LOCAL_NAME.fullmatch(name) or name in _BASH_LOWER_SPECIALS or name.endswith("proxy"):
        raise Unprovable(
            f"assignment to '{name}' (only lower-case shell variables are proven; "
            "upper-case names may be special to bash or exported)"
        )


def _check_value(name: str, value: Word, shape: re.Pattern[str]) -> None:
    if value.dynamic or value.glob or value.tilde or not shape.fullmatch(value.value):
        raise Unprovable(f"'{name}={value.raw}' is not a plain value for {name}")
