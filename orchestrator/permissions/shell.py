"""A conservative analyser for Bash commands, so a rule for one command cannot be
stretched over a whole shell script.

`analyse(command)` splits a command line into the simple commands bash would run
(through `;`, `&&`, `||`, `|`, `&`, newlines, subshells, groups, `$( )`, backticks,
`<( )`, `eval`, `sh -c`, `exec`, `env`, `xargs`, `find -exec`, ...) and the files
its redirections write. It does not try to understand everything: what it does not
understand becomes a *problem*, and a command with problems is never allowed by a
rule (it falls to ask, or deny in `dontAsk`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from orchestrator.permissions.wrappers import (
    _ASSIGNMENT,
    CLOSERS,
    DANGEROUS_ENV,
    DIR_CHANGERS,
    DYNAMIC,
    OPENERS,
    UNSUPPORTED_KEYWORDS,
    Unparsable,
    unwrap,
)

MAX_COMMAND_CHARS = 64 * 1024
"""Longest command the analyser reads; a longer one is not understood (asks)."""
MAX_NESTING = 8
"""Deepest nesting of substitutions / `sh -c` / `eval` the analyser follows."""
SAFE_WRITE_TARGETS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})

_REDIRECT = re.compile(r"(\d*)(&>>|&>|>>|>\||>&|<<<|<<-|<<|<>|<&|>|<)")
_METACHARS = frozenset(" \t\n;&|<>()")


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
    """Why the analyser does not fully understand the command; empty when it does."""
    changes_dir: bool = False
    """A `cd`/`pushd`/`popd` makes later relative paths unknowable."""

    @property
    def understood(self) -> bool:
        return not self.problems


@dataclass
class _Word:
    value: str = ""
    dynamic: bool = False
    quoted: bool = False
    glob: bool = False
    brace: bool = False


def analyse(command: str) -> ShellAnalysis:
    """Split `command` into simple commands, redirect targets and problems."""
    result = ShellAnalysis()
    _analyse_into(command, result, depth=0)
    return result


def _analyse_into(source: str, result: ShellAnalysis, depth: int) -> None:
    if len(source) > MAX_COMMAND_CHARS:
        result.problems.append(f"command longer than {MAX_COMMAND_CHARS} characters")
        return
    if DYNAMIC in source:
        result.problems.append("command contains a NUL character")
        return
    if depth > MAX_NESTING:
        result.problems.append(f"nested deeper than {MAX_NESTING} levels")
        return
    parser = _Parser(source, result, depth)
    try:
        parser.parse_list(closer=None)
    except Unparsable as exc:
        result.problems.append(str(exc))


class _Parser:
    def __init__(self, src: str, result: ShellAnalysis, depth: int) -> None:
        self.src = src
        self.pos = 0
        self.result = result
        self.depth = depth
        self.heredocs: list[tuple[str, bool, bool]] = []

    # -- lexing helpers -------------------------------------------------------------
    def _peek(self, n: int = 1) -> str:
        return self.src[self.pos : self.pos + n]

    def _eof(self) -> bool:
        return self.pos >= len(self.src)

    def _skip_blanks(self) -> None:
        while not self._eof():
            c = self.src[self.pos]
            if c in " \t":
                self.pos += 1
            elif self._peek(2) == "\\\n":
                self.pos += 2
            elif c == "#":
                while not self._eof() and self.src[self.pos] != "\n":
                    self.pos += 1
            else:
                return

    # -- grammar --------------------------------------------------------------------
    def parse_list(self, closer: str | None) -> None:
        while True:
            self._skip_blanks()
            if self._eof():
                if closer is not None:
                    raise Unparsable(f"unclosed '{closer}'")
                return
            c = self.src[self.pos]
            if closer is not None and c == closer:
                self.pos += 1
                return
            if c == "\n":
                self.pos += 1
                self._read_heredocs()
            elif self._peek(2) == ";;":
                raise Unparsable("';;' outside a case statement")
            elif c in ";&|" and self._peek(2) not in ("&>",):
                self.pos += 2 if self._peek(2) in ("&&", "||", "|&") else 1
            elif c == "(":
                if self._peek(2) == "((":
                    raise Unparsable("arithmetic command '((' is not analysed")
                self.pos += 1
                self.parse_list(")")
                self._trailing_redirects()
            elif c == ")":
                raise Unparsable("unexpected ')'")
            else:
                self._simple_command()

    def _trailing_redirects(self) -> None:
        while True:
            self._skip_blanks()
            if not self._redirect():
                return

    def _simple_command(self) -> None:
        words: list[_Word] = []
        while True:
            self._skip_blanks()
            if self._eof():
                break
            c = self.src[self.pos]
            if c in "\n;|)" or (c == "&" and self._peek(2) not in ("&>",)):
                break
            if self._redirect():
                continue
            if c == "(":
                raise Unparsable("'(' inside a command (function definition?) is not analysed")
            word = self._word()
            if not words and not word.quoted and word.value in OPENERS | CLOSERS:
                continue
            if not words and not word.quoted and word.value in UNSUPPORTED_KEYWORDS:
                raise Unparsable(f"'{word.value}' blocks are not analysed")
            words.append(word)
        self._finish(words)

    def _redirect(self) -> bool:
        m = _REDIRECT.match(self.src, self.pos)
        if not m:
            return False
        fd, op = m.group(1), m.group(2)
        if op in (">", "<") and not fd and self.src[m.end() : m.end() + 1] == "(":
            return False  # process substitution, a word
        self.pos = m.end()
        self._skip_blanks()
        if self._eof() or self.src[self.pos] in "\n;&|()<>":
            raise Unparsable(f"redirection '{op}' without a target")
        target = self._word()
        if op in ("<<", "<<-"):
            self.heredocs.append((target.value, target.quoted, op == "<<-"))
            return True
        if op == "<<<":
            return True
        if op in (">&", "<&") and (target.value.isdigit() or target.value == "-"):
            return True
        if target.dynamic or target.glob or target.brace:
            raise Unparsable(f"redirection target '{_show(target.value)}' is not a literal path")
        if op in ("<", "<&"):
            self.result.reads.append(target.value)
        else:
            self.result.writes.append(target.value)
        return True

    def _read_heredocs(self) -> None:
        for delimiter, quoted, strip_tabs in self.heredocs:
            body: list[str] = []
            while not self._eof():
                end = self.src.find("\n", self.pos)
                end = len(self.src) if end < 0 else end
                line = self.src[self.pos : end]
                self.pos = min(end + 1, len(self.src))
                if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                    break
                body.append(line)
            text = "\n".join(body)
            if not quoted and ("$(" in text or "`" in text):
                raise Unparsable("here-document with command substitution is not analysed")
        self.heredocs.clear()

    # -- words ----------------------------------------------------------------------
    def _word(self) -> _Word:
        w = _Word()
        start = self.pos
        if self._peek(2) in ("<(", ">("):
            self.pos += 2
            self._nested_list()
            w.value, w.dynamic = DYNAMIC, True
            return w
        while not self._eof():
            c = self.src[self.pos]
            if c in _METACHARS:
                break
            if c == "\\":
                nxt = self.src[self.pos + 1 : self.pos + 2]
                self.pos += 2
                if nxt != "\n":
                    w.value += nxt
                    w.quoted = True
            elif c == "'":
                end = self.src.find("'", self.pos + 1)
                if end < 0:
                    raise Unparsable("unclosed single quote")
                w.value += self.src[self.pos + 1 : end]
                w.quoted = True
                self.pos = end + 1
            elif c == '"':
                self.pos += 1
                self._double_quoted(w)
                w.quoted = True
            elif c == "$":
                self._dollar(w, in_quotes=False)
            elif c == "`":
                self._backtick(w)
            else:
                if c in "*?[":
                    w.glob = True
                w.value += c
                self.pos += 1
        raw = self.src[start : self.pos]
        if "{" in raw and "}" in raw and ("," in raw or ".." in raw):
            unquoted = re.sub(r"'[^']*'|\"[^\"]*\"", "", raw)
            w.brace = "{" in unquoted and ("," in unquoted or ".." in unquoted)
        return w

    def _double_quoted(self, w: _Word) -> None:
        while True:
            if self._eof():
                raise Unparsable("unclosed double quote")
            c = self.src[self.pos]
            if c == '"':
                self.pos += 1
                return
            if c == "\\":
                nxt = self.src[self.pos + 1 : self.pos + 2]
                if nxt in ('"', "\\", "$", "`"):
                    w.value += nxt
                elif nxt != "\n":
                    w.value += "\\" + nxt
                self.pos += 2
            elif c == "$":
                self._dollar(w, in_quotes=True)
            elif c == "`":
                self._backtick(w)
            else:
                w.value += c
                self.pos += 1

    def _dollar(self, w: _Word, in_quotes: bool) -> None:
        nxt = self.src[self.pos + 1 : self.pos + 2]
        if self._peek(3) == "$((":
            raise Unparsable("arithmetic expansion '$((' is not analysed")
        if nxt == "(":
            self.pos += 2
            self._nested_list()
        elif nxt == "{":
            end = self._matching_brace(self.pos + 1)
            inner = self.src[self.pos + 2 : end]
            if "$(" in inner or "`" in inner or "<(" in inner:
                raise Unparsable("command substitution inside '${...}' is not analysed")
            self.pos = end + 1
        elif nxt == "'" and not in_quotes:
            end = self.src.find("'", self.pos + 2)
            while end > 0 and self.src[end - 1] == "\\":
                end = self.src.find("'", end + 1)
            if end < 0:
                raise Unparsable("unclosed $'...' quote")
            literal = self.src[self.pos + 2 : end]
            self.pos = end + 1
            w.quoted = True
            if "\\" not in literal:
                w.value += literal
                return
        elif nxt == '"' and not in_quotes:
            self.pos += 2
            self._double_quoted(w)
            w.quoted = True
            return
        elif nxt and (nxt.isalnum() or nxt == "_"):
            self.pos += 1
            while not self._eof() and (self.src[self.pos].isalnum() or self.src[self.pos] == "_"):
                self.pos += 1
                if nxt.isdigit():
                    break
        elif nxt and nxt in "@*#?-$!":
            self.pos += 2
        else:
            w.value += "$"
            self.pos += 1
            return
        w.value += DYNAMIC
        w.dynamic = True

    def _matching_brace(self, start: int) -> int:
        depth = 0
        for i in range(start, len(self.src)):
            if self.src[i] == "{":
                depth += 1
            elif self.src[i] == "}":
                depth -= 1
                if depth == 0:
                    return i
        raise Unparsable("unclosed '${'")

    def _nested_list(self) -> None:
        if self.depth + 1 > MAX_NESTING:
            raise Unparsable(f"nested deeper than {MAX_NESTING} levels")
        self.depth += 1
        try:
            self.parse_list(")")
        finally:
            self.depth -= 1

    def _backtick(self, w: _Word) -> None:
        i = self.pos + 1
        inner: list[str] = []
        while i < len(self.src) and self.src[i] != "`":
            if self.src[i] == "\\" and i + 1 < len(self.src) and self.src[i + 1] in "`\\$":
                inner.append(self.src[i + 1])
                i += 2
                continue
            inner.append(self.src[i])
            i += 1
        if i >= len(self.src):
            raise Unparsable("unclosed backtick")
        self.pos = i + 1
        _analyse_into("".join(inner), self.result, self.depth + 1)
        w.value += DYNAMIC
        w.dynamic = True

    # -- simple commands ------------------------------------------------------------
    def _finish(self, words: list[_Word]) -> None:
        while words and not words[0].quoted and _ASSIGNMENT.match(words[0].value):
            name = _ASSIGNMENT.match(words[0].value).group(1)  # type: ignore[union-attr]
            if DANGEROUS_ENV.match(name):
                raise Unparsable(f"'{name}=' changes what commands run")
            words = words[1:]
        if not words:
            return
        head = words[0]
        if head.dynamic or head.glob or head.brace:
            raise Unparsable(f"command name '{_show(head.value)}' is not a literal")
        for word in words[1:]:
            if word.brace:
                raise Unparsable(f"brace expansion '{word.value}' is not analysed")
        self._record([w.value for w in words], open_ended=False)

    def _record(self, argv: list[str], open_ended: bool) -> None:
        if not argv:
            return
        name = argv[0].rsplit("/", 1)[-1]
        if name in DIR_CHANGERS:
            self.result.changes_dir = True
        unwrapped = unwrap(name, argv)
        if isinstance(unwrapped, str):
            _analyse_into(unwrapped, self.result, self.depth + 1)
            return
        if unwrapped is not None:
            inner, extra_open = unwrapped
            if inner and DYNAMIC in inner[0]:
                raise Unparsable(f"'{name}' runs a command that is not a literal")
            self._record(inner, open_ended or extra_open)
            return
        if name == "find":
            self._find_exec(argv)
        self.result.commands.append(SimpleCommand(tuple(argv), open_ended))

    def _find_exec(self, argv: list[str]) -> None:
        i = 0
        while i < len(argv):
            if argv[i] in ("-exec", "-execdir", "-ok", "-okdir"):
                j = i + 1
                while j < len(argv) and argv[j] not in (";", "+"):
                    j += 1
                if j >= len(argv):
                    raise Unparsable(f"find {argv[i]} without ';' or '+'")
                self._record(argv[i + 1 : j], open_ended=True)
                i = j
            i += 1


def _show(value: str) -> str:
    return value.replace(DYNAMIC, "$…")
