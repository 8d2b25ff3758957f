"""A glob operand of a command that reads files (`wc -l *.py`), decided exactly.

bash (default options: no `dotglob`, `globstar`, `extglob` or `nullglob`) turns
`DIR/PATTERN` into the entries of DIR whose names match PATTERN, never a name
starting with `.` unless the pattern spells the dot, or into the word itself when
nothing matches. So the command reads a path of the language

    DIR/(names PATTERN matches) | the word as written

and a Read deny or ask rule can only be at stake when its own language (the paths
it covers, and everything below them) meets that one: a question for two finite
automata (`interegular`). When they cannot meet, the only other way the command
reaches a file such a rule covers is a symlink among today's matches, so the
directory's matching entries are listed on the host and each is checked like a
named file (its links resolved). A pattern with wildcards in a directory part, a
character class warden does not parse, or a directory with too many entries is
left to the caller's safe answer (`None`).
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path

from interegular import InvalidSyntax, Unsupported, parse_pattern
from interegular.fsm import Alphabet
from interegular.patterns import REFlags

from orchestrator.permissions import paths
from orchestrator.permissions.rules import Rule

MAX_GLOB_ENTRIES = 2000
"""Directory entries listed for one glob operand; a bigger directory is not decided
exactly (the command asks)."""
WILDCARDS = "*?["
POSIX_BRACKET = re.compile(r"\[[:=]|\[\.[^\]]*\.\]")
"""`[:alpha:]`, `[=a=]`, `[.x.]` inside a bracket expression: not read here."""


@dataclass
class GlobOperand:
    """What one glob operand may read: the paths' language as a regular expression
    (one per spelling of its directory), and the entries it matches today."""

    regexes: list[str] = field(default_factory=list)
    matches: list[str] = field(default_factory=list)
    """Container paths of the directory's entries the pattern matches now."""


def is_glob(word: str) -> bool:
    return any(c in word for c in WILDCARDS)


def glob_operand(word: str, cwd: str, workspace_host: Path | None) -> GlobOperand | None:
    """The operand's language and today's matches; None when it cannot be decided
    exactly (wildcards before the last `/`, a POSIX class, a backslash)."""
    if "\\" in word or POSIX_BRACKET.search(word):
        return None
    directory, _, pattern = word.rstrip("/").rpartition("/")
    if is_glob(directory) or not pattern or pattern in (".", ".."):
        return None
    try:
        name = _name_regex(pattern, at_start=not pattern.startswith("."))
    except _Undecided:
        return None

    base = directory if word.startswith("/") and directory else (directory or ".")
    if word.startswith("/") and not directory:
        base = "/"
    literal = posixpath.normpath(posixpath.join(cwd, word))
    found = GlobOperand()
    for spelled in paths.spellings(base, workspace_host, cwd):
        if spelled.startswith("\x00"):
            return None  # a symlink loop: nothing is known
        prefix = re.escape(spelled.rstrip("/") + "/")
        # bash passes the word as written when nothing matches
        found.regexes.append(
            re.escape(literal) if name is None else f"(?:{prefix}{name}|{re.escape(literal)})"
        )
    if workspace_host is not None:
        listed = _entries(base, pattern, cwd, workspace_host)
        if listed is None:
            return None
        found.matches = listed
    return found


def glob_may_read(rule: Rule, operand: GlobOperand) -> bool:
    """Whether a path rule (deny or ask: read strictly) may cover a path the operand reads."""
    if rule.whole_tool:
        return True
    assert rule.specifier is not None
    return any(may_read_under(operand, p) for p in paths.rule_patterns(rule.specifier, strict=True))


def may_read_under(operand: GlobOperand, rule_pattern: str) -> bool:
    """Whether a path of the operand's language lies at or under `rule_pattern` (an
    absolute container glob from `paths.rule_patterns`). True when unsure."""
    regex = paths.pattern_regex(rule_pattern, fold=True)  # deny/ask: either case
    covering = f"{regex}(?:/.*)?" if rule_pattern != "/" else "/.*"
    return any(_overlap(regex, covering) for regex in operand.regexes)


def _overlap(a: str, b: str) -> bool:
    try:
        pa, pb = parse_pattern("(?s)" + a), parse_pattern("(?s)" + b)
        no_flags = REFlags(0)
        alphabet = Alphabet.union(pa.get_alphabet(no_flags), pb.get_alphabet(no_flags))[0]
        fa, fb = pa.to_fsm(alphabet, (0, 0)), pb.to_fsm(alphabet, (0, 0))
    except (InvalidSyntax, Unsupported, ValueError):
        return True
    return not fa.isdisjoint(fb)


class _Undecided(Exception):
    """A pattern this module does not read exactly."""


def _name_regex(pattern: str, *, at_start: bool) -> str | None:
    """The names a bash pattern matches (one path component), as a regex; None when
    it matches none. `at_start`: the next character matched is the name's first and
    may not be a `.` (bash matches a leading dot only with a pattern that starts
    with one). _Undecided for a class with a range there."""
    if not pattern:
        return None if at_start else ""
    c, rest = pattern[0], pattern[1:]
    if c == "*":
        if not at_start:
            return _join("[^/]*", _name_regex(rest, at_start=False))
        options = [
            o
            for o in (
                _join("[^/.][^/]*", _name_regex(rest, at_start=False)),
                _name_regex(rest, at_start=True) if rest else None,
            )
            if o is not None
        ]
        return "(?:" + "|".join(options) + ")" if options else None
    if c == "?":
        return _join("[^/.]" if at_start else "[^/]", _name_regex(rest, at_start=False))
    if c == "[":
        first = 2 if rest[:1] in ("!", "^") else 1
        end = pattern.find("]", first + 1)
        if end > 0:
            cls = _class(pattern[1:end], at_start)
            tail = _name_regex(pattern[end + 1 :], at_start=False)
            return None if cls is None else _join(cls, tail)
    if at_start and c == ".":
        return None
    return _join(re.escape(c), _name_regex(rest, at_start=False))


def _class(body: str, at_start: bool) -> str | None:
    """A bracket expression as a regex class (never `/`; at the start of a name never `.`)."""
    negated = body[:1] in ("!", "^")
    chars = body[1:] if negated else body
    if negated:
        return f"[^/{'.' if at_start else ''}{_class_chars(chars)}]"
    spans_dot = any(a <= "." <= b for a, b in re.findall(r"(.)-(.)", chars))
    if not at_start or ("." not in chars and not spans_dot):
        return f"[{_class_chars(chars)}]"
    if spans_dot:
        raise _Undecided(body)  # a range that holds the dot
    kept = chars.replace(".", "")
    return f"[{_class_chars(kept)}]" if kept else None


def _class_chars(chars: str) -> str:
    return "".join("\\" + ch if ch in "\\[]^" else ch for ch in chars)


def _join(head: str, tail: str | None) -> str | None:
    return None if tail is None else head + tail


def _entries(base: str, pattern: str, cwd: str, workspace_host: Path) -> list[str] | None:
    """Container paths of `base`'s entries that `pattern` matches, listed on the host
    (outside the workspace nothing is listed: the host cannot see the container).
    `base` is resolved as the container would (a link to `/etc` means the container's
    `/etc`, which the host cannot list) and opened without following a link: a link
    a sandbox planted never makes the host list a host directory."""
    container = posixpath.normpath(posixpath.join(cwd, base))
    resolved = paths.resolve_symlinks(container, workspace_host)
    if resolved is None:
        return None  # a link loop: nothing is known
    fd = paths.open_directory(resolved, workspace_host)
    if fd is None:
        return []
    try:
        with os.scandir(fd) as listing:
            names = []
            for i, entry in enumerate(listing):
                if i >= MAX_GLOB_ENTRIES:
                    return None
                names.append(entry.name)
    except OSError:
        return []
    finally:
        os.close(fd)
    hidden_ok = pattern.startswith(".")
    return [
        posixpath.join(container, n)
        for n in sorted(names)
        if fnmatch.fnmatchcase(n, pattern) and (hidden_ok or not n.startswith("."))
    ]
