"""Words for the strict bash parser (`parser.py`): quoting, `$` expansions and
substitutions, read exactly as bash 5.2 reads them for the supported subset; any
other construct raises `Unprovable` naming it. Also the values the parser produces.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

DYNAMIC = "\x00"
"""Stands for text only known at run time ($VAR, $(…)); matches only a `*` in rules."""

MAX_COMMAND_CHARS = 64 * 1024
"""Longest command the analyser reads; a longer one is not proven (asks)."""
MAX_COMMANDS = 256
"""Most commands one command line may hold (pipeline stages, list items, nested ones
counted per level); beyond it the analyser asks instead of spending seconds of host
CPU proving a line a hostile subagent padded."""
MAX_NESTING = 8
"""Deepest nesting of substitutions, compound commands, `sh -c` and `eval`."""

Dialect = str
BASH: Dialect = "bash"
DASH: Dialect = "dash"
"""`/bin/sh` in the images: POSIX syntax; bash-only syntax asks."""


class Unprovable(Exception):
    """The parser cannot prove what bash runs; the message names the construct."""


@dataclass(frozen=True)
class Word:
    """One word after quote removal; run-time parts are DYNAMIC."""

    value: str
    raw: str
    dynamic: bool = False
    glob: bool = False
    """Has unquoted `*`, `?` or `[…]`: bash expands it to file names."""
    tilde: bool = False
    """Starts with an unquoted `~`: bash expands it to a home directory."""
    quoted: bool = False
    brace: bool = False
    """A plain `pre{a,b}post` brace expansion (see `expand_braces`)."""


@dataclass(frozen=True)
class Redirect:
    fd: str
    op: str
    target: Word


@dataclass(eq=False)
class RedirectGroup:
    """Redirections applied together (one simple command's, or the ones after a
    compound command), and those of every compound command around them: together
    they say which file each descriptor may hold while these are opened."""

    redirects: list[Redirect] = field(default_factory=list)
    enclosing: list[Redirect] = field(default_factory=list)
    """Redirections of the groups, loops and `if`s this one sits inside."""

    @property
    def scope(self) -> list[Redirect]:
        return [*self.redirects, *self.enclosing]


@dataclass
class Command:
    """One simple command as written: prefix assignments, words, redirections."""

    assignments: list[tuple[str, Word]] = field(default_factory=list)
    words: list[Word] = field(default_factory=list)
    redirects: list[Redirect] = field(default_factory=list)
    group: RedirectGroup = field(default_factory=RedirectGroup)
    """Its redirections with the enclosing ones (`group.redirects is redirects`)."""


@dataclass
class Unit:
    """Everything parsed from one source text (substitutions included)."""

    commands: list[Command] = field(default_factory=list)
    redirects: list[Redirect] = field(default_factory=list)
    """Every redirection, also those on compound commands."""
    groups: list[RedirectGroup] = field(default_factory=list)
    """Every redirection again, by the group it is applied with (each simple command
    has one, even without redirections)."""
    loop_names: list[str] = field(default_factory=list)
    """Variables assigned by `for NAME in`."""
    conditions: list[tuple[str, ...]] = field(default_factory=list)
    """The words and operators of each `[[ … ]]` (they run nothing themselves)."""


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SPECIAL_PARAMS = frozenset("@*#?-$!0123456789")
_DELIMS = frozenset(" \t\n;&|<>()")


class WordLexer:
    """The word-level half of the parser; `parser._Parser` adds the grammar."""

    src: str
    pos: int
    dialect: Dialect
    heredocs: list[tuple[str, bool, bool, int]]

    def _nested(self, closer: str) -> None:
        """Parse a `$(…)`/`<(…)` body up to its `)`."""
        raise NotImplementedError

    def _backtick(self) -> None:
        """Parse a backtick substitution."""
        raise NotImplementedError

    # -- characters -----------------------------------------------------------------
    def _c(self, off: int = 0) -> str:
        i = self.pos + off
        return self.src[i] if i < len(self.src) else ""

    def _at(self, s: str) -> bool:
        return self.src.startswith(s, self.pos)

    def _bash_only(self, what: str) -> None:
        if self.dialect == DASH:
            raise Unprovable(f"{what} is bash-only syntax in an sh/dash script")

    def _word(self, brace_ok: bool = False) -> Word:
        """One word; `brace_ok`: an argument, where a plain brace expansion is proven."""
        start = self.pos
        if self._at("<(") or self._at(">("):
            self._bash_only("process substitution")
            self.pos += 2
            self._nested(")")
            c = self._c()
            if c and c not in " \t\n;&|)":
                raise Unprovable(f"text right after a process substitution: {c!r}")
            return Word(DYNAMIC, self.src[start : self.pos], dynamic=True)
        parts: list[str] = []
        dynamic = glob = quoted = False
        tilde = self._c() == "~"
        brace = False
        unquoted: list[str] = []
        while self.pos < len(self.src):
            c = self.src[self.pos]
            if c in _DELIMS:
                break
            if c == "\\":
                nxt = self._c(1)
                if nxt == "\n":
                    if self._c(2) not in (" ", "\t"):
                        raise Unprovable("a line continuation (backslash-newline) inside a word")
                    self.pos += 2
                    break
                if nxt == "":
                    raise Unprovable("a backslash at the end of the command")
                parts.append(nxt)
                quoted = True
                self.pos += 2
            elif c == "'":
                end = self.src.find("'", self.pos + 1)
                if end < 0:
                    raise Unprovable("unclosed single quote")
                text = self.src[self.pos + 1 : end]
                if "\n" in text and self.heredocs:
                    raise Unprovable("a newline inside quotes while a here-document is pending")
                parts.append(text)
                quoted = True
                self.pos = end + 1
            elif c == '"':
                self.pos += 1
                d = self._double_quoted(parts)
                dynamic = dynamic or d
                quoted = True
            elif c == "$":
                kind = self._dollar(parts, in_quotes=False)
                dynamic = dynamic or kind == "dynamic"
                quoted = quoted or kind == "quoted"
            elif c == "`":
                self._backtick()
                parts.append(DYNAMIC)
                dynamic = True
            else:
                if c in "*?":
                    glob = True
                elif c == "{":
                    brace = True
                parts.append(c)
                unquoted.append(c)
                self.pos += 1
                continue
            unquoted.append("\x01")
        raw = self.src[start : self.pos]
        if not raw:
            raise Unprovable(f"unexpected {self._c()!r}")
        if self._at("<(") or self._at(">("):
            raise Unprovable(f"a process substitution joined to the word {raw!r}")
        value = "".join(parts)
        bracket = "".join(unquoted).find("[")
        if bracket >= 0 and "]" in raw[raw.find("[") + 1 :]:
            glob = True  # a bracket expression; its `]` may even be quoted
        if brace and raw not in ("{}", "{", "}") and _brace_expands("".join(unquoted)):
            self._bash_only("brace expansion")
            if brace_ok and _PLAIN_BRACE.fullmatch(raw) and all(w for w in expand_braces(raw)):
                return Word(value, raw, brace=True)
            raise Unprovable(f"brace expansion in {raw!r}")
        return Word(value, raw, dynamic, glob, tilde, quoted)

    def _double_quoted(self, parts: list[str]) -> bool:
        dynamic = False
        after_name = False
        while True:
            if self.pos >= len(self.src):
                raise Unprovable("unclosed double quote")
            c = self.src[self.pos]
            if c == '"':
                self.pos += 1
                return dynamic
            if c == "\\":
                nxt = self._c(1)
                if nxt == "\n":
                    if after_name or self.heredocs:
                        raise Unprovable("a line continuation right after '$NAME' in quotes")
                    self.pos += 2
                    continue
                if nxt in ('"', "\\", "$", "`"):
                    parts.append(nxt)
                    self.pos += 2
                else:
                    parts.append("\\")
                    self.pos += 1
                after_name = False
            elif c == "$":
                kind = self._dollar(parts, in_quotes=True)
                dynamic = dynamic or kind == "dynamic"
                after_name = kind == "dynamic"
            elif c == "`":
                self._backtick()
                parts.append(DYNAMIC)
                dynamic = True
                after_name = False
            else:
                if c == "\n" and self.heredocs:
                    raise Unprovable("a newline inside quotes while a here-document is pending")
                parts.append(c)
                self.pos += 1
                after_name = False

    def _dollar(self, parts: list[str], in_quotes: bool) -> str:
        """Read a `$` construct; 'dynamic', 'quoted' ($'…') or 'literal'."""
        nxt = self._c(1)
        if self._at("$(("):
            raise Unprovable("arithmetic expansion '$((…))'")
        if nxt == "(":
            self.pos += 2
            self._nested(")")
        elif nxt == "{":
            m = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*|[0-9]+)\}").match(self.src, self.pos)
            if not m:
                end = self.src.find("}", self.pos)
                shown = self.src[self.pos : end + 1 if end >= 0 else self.pos + 12]
                raise Unprovable(f"parameter expansion {shown!r} (only '${{NAME}}' is proven)")
            self.pos = m.end()
        elif nxt == "'" and not in_quotes:
            self._bash_only("ANSI-C quoting $'…'")
            end = self.src.find("'", self.pos + 2)
            if end < 0:
                raise Unprovable("unclosed $'…' quote")
            text = self.src[self.pos + 2 : end]
            if "\\" in text:
                raise Unprovable("ANSI-C quote $'…' with backslash escapes")
            parts.append(text)
            self.pos = end + 1
            return "quoted"
        elif nxt == '"' and not in_quotes:
            raise Unprovable('locale quoting $"…"')
        elif nxt and (nxt.isascii() and (nxt.isalpha() or nxt == "_")):
            m = _NAME.match(self.src, self.pos + 1)
            assert m is not None
            self.pos = m.end()
        elif nxt and nxt in _SPECIAL_PARAMS:
            self.pos += 2
        elif (
            nxt == ""
            or nxt in " \t\n"
            or (in_quotes and nxt == '"')
            or (not in_quotes and nxt in _DELIMS)
        ):
            parts.append("$")
            self.pos += 1
            return "literal"
        else:
            raise Unprovable(f"'${nxt}' (a '$' that is not a plain variable)")
        parts.append(DYNAMIC)
        return "dynamic"


_BRACE_TEXT = r"[A-Za-z0-9_./:=@%+*?-]"
_PLAIN_BRACE = re.compile(
    rf"(?P<pre>{_BRACE_TEXT}*)\{{(?P<items>{_BRACE_TEXT}*(?:,{_BRACE_TEXT}*)+)\}}"
    rf"(?P<post>{_BRACE_TEXT}*)"
)
"""The one brace expansion that is proven: literal text (and `*`, `?` globs), one
`{a,b,…}` list, no quotes, nesting, sequences or expansions."""


def expand_braces(raw: str) -> list[str]:
    """`pre{a,b}post` -> [`preapost`, `prebpost`], as bash expands it."""
    m = _PLAIN_BRACE.fullmatch(raw)
    assert m is not None
    return [m["pre"] + item + m["post"] for item in m["items"].split(",")]


def _brace_expands(unquoted: str) -> bool:
    """Whether an unquoted `{` may start a brace expansion: an unquoted `,` or `..`
    follows it (quoted text is masked out of `unquoted`)."""
    i = unquoted.find("{")
    return i >= 0 and ("," in unquoted[i:] or ".." in unquoted[i:])
