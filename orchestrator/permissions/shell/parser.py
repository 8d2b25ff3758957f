"""A strict parser for the subset of bash that agents write; anything else is refused.

Why home-made: no maintained, permissively licensed Python library parses bash
*and* says which constructs it did not fully understand (bashlex is GPL and
lenient; tree-sitter-bash recovers from errors and is used as a second opinion in
`tree.py`). Here the grammar is a whitelist: the parser accepts a construct
only when it can say exactly which simple commands bash runs, with which words
and redirections; everything else raises `Unprovable` naming the construct.

The supported subset (documented in `policies/README.md`):

* simple commands with prefix assignments, words and redirections;
* `'…'`, `"…"`, backslash escapes, `$'…'` without backslashes;
* `$NAME`, `${NAME}`, `$1`, `$@`, `$?`… as run-time data; `$(…)`, backticks
  without backslashes and whole-word `<(…)`/`>(…)`, parsed recursively;
* pipelines (`|`, `|&`, `!`, `time [-p]`), lists (`&&`, `||`, `;`, `&`, newlines);
* `( … )`, `{ …; }`, `if`, `while`, `until`, `for NAME in …`, `case`;
* redirections with literal targets or fd numbers; here-strings; here-documents
  with a plain delimiter whose bodies are checked;
* backslash-newline only between words (after a blank) and inside `"…"`.

Words (quoting, `$` expansions, substitutions) are read by `words.WordLexer`.
Bash joins backslash-newline before it tokenises; rather than re-implement that
pass (which depends on quoting context), a continuation is only accepted where
joining cannot change a token.

Its size (over 400 lines) is one idea: a recursive-descent grammar reads best
as one file, one method per production; words and wrappers are already apart.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from orchestrator.permissions.shell.words import (
    _DELIMS,
    _NAME,
    BASH,
    DASH,
    DYNAMIC,
    MAX_COMMAND_CHARS,
    MAX_COMMANDS,
    MAX_NESTING,
    Command,
    Dialect,
    Redirect,
    RedirectGroup,
    Unit,
    Unprovable,
    Word,
    WordLexer,
)

__all__ = [
    "BASH",
    "DASH",
    "DYNAMIC",
    "MAX_COMMANDS",
    "MAX_COMMAND_CHARS",
    "MAX_NESTING",
    "Command",
    "Dialect",
    "Redirect",
    "RedirectGroup",
    "Unit",
    "Unprovable",
    "Word",
    "is_safe_device",
    "parse",
]

_RESERVED = frozenset(
    {
        "if",
        "then",
        "elif",
        "else",
        "fi",
        "for",
        "while",
        "until",
        "do",
        "done",
        "case",
        "esac",
        "in",
        "{",
        "}",
        "!",
        "[[",
        "]]",
        "function",
        "select",
        "coproc",
        "time",
    }
)
_COND_ARITHMETIC = frozenset({"-eq", "-ne", "-lt", "-le", "-gt", "-ge", "-v", "-R"})
_CLOSERS = frozenset({"then", "elif", "else", "fi", "do", "done", "esac", "}", "in"})
_REDIRECT = re.compile(r"(\d*)(&>>|&>|>>|>\||>&|<<<|<<-|<<|<>|<&|>|<)")
_HEREDOC_DELIM = re.compile(
    r"(?P<plain>[A-Za-z0-9_.+-]+)|'(?P<sq>[A-Za-z0-9_.+ -]+)'|\"(?P<dq>[A-Za-z0-9_.+ -]+)\""
    r"|\\(?P<bs>[A-Za-z0-9_.+-]+)"
)
_SAFE_DEV = re.compile(r"/dev/(null|stdin|stdout|stderr|tty|fd/\d+)")
_NAMED_FD = re.compile(r"\{[A-Za-z_]\w*\}[<>]")
MAX_FD = 2**31 - 1
"""bash reads a digit run before `<`/`>` as a descriptor only when it fits an `int`
(`2147483648>x` is the word `2147483648` and `>x`); dash only a single digit."""
MAX_CONDITION_WORDS = 256
"""Most words and operators in one `[[ … ]]` (beyond it the analyser asks)."""


def parse(src: str, dialect: Dialect = BASH, depth: int = 0) -> Unit:
    """Parse `src`; raise `Unprovable` for anything outside the subset."""
    if len(src) > MAX_COMMAND_CHARS:
        raise Unprovable(f"command longer than {MAX_COMMAND_CHARS} characters")
    bad = next((c for c in src if (ord(c) < 32 and c not in "\n\t") or ord(c) == 127), None)
    if bad is not None:
        raise Unprovable(f"control character {bad!r} in the command")
    if depth > MAX_NESTING:
        raise Unprovable(f"nested deeper than {MAX_NESTING} levels")
    p = _Parser(src, dialect, Unit(), depth)
    p.parse_all()
    return p.unit


class _Parser(WordLexer):
    def __init__(self, src: str, dialect: Dialect, unit: Unit, depth: int) -> None:
        self.src = src
        self.dialect = dialect
        self.unit = unit
        self.pos = 0
        self.depth = depth
        self.frame = 0
        self.frames = 0
        self.heredocs: list[tuple[str, bool, bool, int]] = []
        self.commands = 0

    def _skip_blanks(self) -> None:
        while self.pos < len(self.src):
            c = self.src[self.pos]
            if c in " \t":
                self.pos += 1
            elif self._at("\\\n"):
                if (self.pos == 0 or self.src[self.pos - 1] not in " \t") and self._c(2) not in (
                    " ",
                    "\t",
                ):
                    raise Unprovable("a line continuation (backslash-newline) that joins tokens")
                self.pos += 2
            elif c == "#":
                if self.pos > 0 and self.src[self.pos - 1] not in " \t\n":
                    raise Unprovable(f"'#' right after {self.src[self.pos - 1]!r}")
                while self.pos < len(self.src) and self.src[self.pos] != "\n":
                    self.pos += 1
            else:
                return

    def _skip_newlines(self) -> None:
        while True:
            self._skip_blanks()
            if self._c() != "\n":
                return
            self.pos += 1
            self._read_heredocs()

    def _enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise Unprovable(f"nested deeper than {MAX_NESTING} levels")

    # -- lists and compound commands ------------------------------------------------
    def parse_all(self) -> None:
        end = self._list(frozenset())
        if end is not None:
            raise Unprovable(f"unexpected {end!r}")
        if self.heredocs:
            raise Unprovable("here-document without its body")

    def _peek_word(self) -> str | None:
        """The unquoted reserved word (or `(`/`)`) at the cursor, if any."""
        m = re.compile(r"[A-Za-z{}!\[\]]+").match(self.src, self.pos)
        if m and m.group() in _RESERVED:
            nxt = self.src[m.end() : m.end() + 1]
            if nxt == "" or nxt in _DELIMS:
                return m.group()
        return None

    def _closer(self, closers: frozenset[str]) -> str | None:
        for term in (";;&", ";;", ";&"):
            if self._at(term):
                return term if term in closers else None
        if self._c() == ")":
            return ")" if ")" in closers else None
        word = self._peek_word()
        return word if word in closers else None

    def _list(self, closers: frozenset[str]) -> str | None:
        """Parse commands until a closer (reserved word, `)`, `;;`) or the end."""
        seen = False
        while True:
            self._skip_newlines()
            if self.pos >= len(self.src):
                return None
            end = self._closer(closers)
            if end is not None:
                if not seen:
                    raise Unprovable(f"empty command list before {end!r}")
                return end
            self._and_or()
            seen = True
            self._skip_blanks()
            c = self._c()
            if c in ("", "\n") or self._closer(closers) is not None:
                continue
            if (c == "&" and not self._at("&&")) or (
                c == ";" and not self._at(";;") and not self._at(";&")
            ):
                self.pos += 1
            else:
                raise Unprovable(f"unexpected {self.src[self.pos : self.pos + 2]!r}")

    def _and_or(self) -> None:
        self._pipeline()
        while True:
            self._skip_blanks()
            if self._at("&&") or self._at("||"):
                self.pos += 2
                self._skip_newlines()
                self._pipeline()
            else:
                return

    def _pipeline(self) -> None:
        self._skip_blanks()
        if self._peek_word() == "time":
            self._bash_only("'time'")
            self.pos += 4
            self._skip_blanks()
            if self._at("-p") and (self._c(2) == "" or self._c(2) in _DELIMS):
                self.pos += 2
                self._skip_blanks()
        if self._peek_word() == "!":
            self.pos += 1
            self._skip_blanks()
        while True:
            self._command()
            self._skip_blanks()
            if self._at("||"):
                return
            if self._at("|&"):
                self._bash_only("'|&'")
                self.pos += 2
            elif self._c() == "|":
                self.pos += 1
            else:
                return
            self._skip_newlines()

    def _command(self) -> None:
        self.commands += 1
        if self.commands > MAX_COMMANDS:
            raise Unprovable(f"more than {MAX_COMMANDS} commands in one command line")
        self._skip_blanks()
        word = self._peek_word()
        if self._c() == "(":
            if self._at("(("):
                raise Unprovable("arithmetic command '((…))'")
            self.pos += 1
            self._compound(lambda: self._expect_list(frozenset({")"}), ")"))
            return
        if word is None or word in ("!", "]]"):
            if word == "]]" or word == "!":
                raise Unprovable(f"unexpected {word!r}")
            self._simple()
            return
        if word in _CLOSERS:
            raise Unprovable(f"unexpected {word!r}")
        if word in ("function", "select", "coproc", "time"):
            raise Unprovable(f"'{word}'")
        self.pos += len(word)
        if word == "[[":
            self._bash_only("'[[ … ]]'")
            self._compound(self._cond)
            return
        if word == "{":
            self._compound(lambda: self._expect_list(frozenset({"}"}), "}"))
        elif word == "if":
            self._compound(self._if)
        elif word in ("while", "until"):
            self._compound(self._while)
        elif word == "for":
            self._compound(self._for)
        elif word == "case":
            self._compound(self._case)

    def _compound(self, body: Callable[[], object]) -> None:
        first = len(self.unit.groups)
        self._enter()
        try:
            body()
        finally:
            self.depth -= 1
        group = RedirectGroup()
        self._trailing_redirects(group)
        for inner in self.unit.groups[first:]:
            inner.enclosing.extend(group.redirects)
        self.unit.groups.append(group)

    def _expect_list(self, closers: frozenset[str], want: str) -> str:
        end = self._list(closers)
        if end is None:
            raise Unprovable(f"missing {want!r}")
        if end in (")",):
            self.pos += 1
        else:
            self.pos += len(end)
        return end

    def _if(self) -> None:
        self._expect_list(frozenset({"then"}), "then")
        while True:
            end = self._expect_list(frozenset({"elif", "else", "fi"}), "fi")
            if end == "fi":
                return
            if end == "else":
                self._expect_list(frozenset({"fi"}), "fi")
                return
            self._expect_list(frozenset({"then"}), "then")

    def _while(self) -> None:
        self._expect_list(frozenset({"do"}), "do")
        self._expect_list(frozenset({"done"}), "done")

    def _for(self) -> None:
        self._skip_blanks()
        if self._at("(("):
            raise Unprovable("arithmetic 'for ((…))' loop")
        m = _NAME.match(self.src, self.pos)
        if not m or (self.src[m.end() : m.end() + 1] not in ("", *_DELIMS)):
            raise Unprovable("'for' without a plain variable name")
        self.unit.loop_names.append(m.group())
        self.pos = m.end()
        self._skip_newlines()
        if self._peek_word() == "in":
            self.pos += 2
            while True:
                self._skip_blanks()
                c = self._c()
                if c in (";", "\n"):
                    self.pos += 1
                    if c == "\n":
                        self._read_heredocs()
                    break
                if c == "" or c in _DELIMS:
                    raise Unprovable("unexpected text in a 'for … in' word list")
                self._word(brace_ok=True)
        elif self._c() == ";":
            self.pos += 1
        self._skip_newlines()
        if self._peek_word() != "do":
            raise Unprovable("'for' without 'do'")
        self.pos += 2
        self._expect_list(frozenset({"done"}), "done")

    def _case(self) -> None:
        self._skip_blanks()
        self._word()
        self._skip_newlines()
        if self._peek_word() != "in":
            raise Unprovable("'case' without 'in'")
        self.pos += 2
        while True:
            self._skip_newlines()
            if self._peek_word() == "esac":
                self.pos += 4
                return
            if self._c() == "(":
                self.pos += 1
            while True:
                self._skip_blanks()
                if self._c() == "" or self._c() in _DELIMS:
                    raise Unprovable("a 'case' pattern that is not a plain word")
                self._word()
                self._skip_blanks()
                if self._c() == "|":
                    self.pos += 1
                    continue
                if self._c() != ")":
                    raise Unprovable("a 'case' pattern without ')'")
                self.pos += 1
                break
            self._skip_newlines()
            if self._peek_word() == "esac":
                self.pos += 4
                return
            for term in (";;&", ";;", ";&"):
                if self._at(term):
                    break
            else:
                end = self._list(frozenset({";;", ";&", ";;&", "esac"}))
                if end is None:
                    raise Unprovable("'case' without 'esac'")
                if end == "esac":
                    self.pos += 4
                    return
            for term in (";;&", ";;", ";&"):
                if self._at(term):
                    if term != ";;":
                        self._bash_only(f"{term!r}")
                    self.pos += len(term)
                    break

    def _cond(self) -> None:
        """`[[ … ]]`: words are not split or globbed; arithmetic comparisons (operands
        evaluated as arithmetic, so as code) and `-v`/`-R` (names evaluated) ask."""
        tokens: list[str] = []
        while True:
            self._skip_blanks()
            c = self._c()
            if c in ("", "\n"):
                raise Unprovable("'[[' without ']]' on the same line")
            if self._peek_word() == "]]":
                self.pos += 2
                break
            if len(tokens) >= MAX_CONDITION_WORDS:
                raise Unprovable(f"more than {MAX_CONDITION_WORDS} words in one '[[ … ]]'")
            if self._at("&&") or self._at("||"):
                tokens.append(self.src[self.pos : self.pos + 2])
                self.pos += 2
                continue
            if (c in "()<>" and not (self._at("<(") or self._at(">("))) or (
                self._peek_word() == "!"
            ):
                tokens.append(c)
                self.pos += 1
                continue
            if c in ";&|":
                raise Unprovable(f"{c!r} inside '[[ … ]]'")
            word = self._word()
            if word.value in _COND_ARITHMETIC:
                what = "a variable name" if word.value in ("-v", "-R") else "arithmetic"
                raise Unprovable(f"'{word.value}' in '[[ … ]]' evaluates its operands as {what}")
            tokens.append(word.value)
            if word.value == "=~" and not word.quoted:
                self._skip_blanks()
                tokens.append(self._word().value)
                if self._c() not in (" ", "\t"):
                    raise Unprovable("a '[[ … =~ ]]' regular expression with operators in it")
        if not tokens:
            raise Unprovable("an empty '[[ ]]'")
        self.unit.conditions.append(tuple(tokens))

    def _trailing_redirects(self, group: RedirectGroup) -> None:
        while True:
            self._skip_blanks()
            red = self._redirect()
            if red is None:
                c = self._c()
                if c and c not in _DELIMS:
                    raise Unprovable(f"text right after a compound command: {c!r}")
                return
            self.unit.redirects.append(red)
            group.redirects.append(red)

    # -- simple commands --------------------------------------------------------------
    def _simple(self) -> None:
        cmd = Command()
        cmd.group = RedirectGroup(cmd.redirects)
        while True:
            self._skip_blanks()
            c = self._c()
            if c == "" or c in "\n;|)" or (c == "&" and not self._at("&>")):
                break
            red = self._redirect()
            if red is not None:
                cmd.redirects.append(red)
                self.unit.redirects.append(red)
                continue
            if c == "(":
                raise Unprovable("'(' inside a command (a function definition?)")
            start = self.pos
            word = self._word(brace_ok=bool(cmd.words))
            if not cmd.words:
                m = _NAME.match(self.src, start)
                if m and self.src[m.end() : m.end() + 1] == "[":
                    raise Unprovable(f"array assignment '{self.src[start : m.end()]}[…]'")
                if m and self.src.startswith(("=", "+="), m.end()):
                    if self.src.startswith("=(", m.end()) or self.src.startswith("+=(", m.end()):
                        raise Unprovable("array assignment")
                    skip = len(m.group()) + (2 if self.src[m.end()] == "+" else 1)
                    value = Word(
                        word.value[skip:],
                        word.raw[skip:],
                        word.dynamic,
                        word.glob,
                        word.raw[skip:].startswith("~"),
                        word.quoted,
                    )
                    cmd.assignments.append((m.group(), value))
                    continue
            cmd.words.append(word)
        if not cmd.words and not cmd.assignments and not cmd.redirects:
            raise Unprovable(f"empty command before {self._c()!r}")
        self.unit.commands.append(cmd)
        self.unit.groups.append(cmd.group)

    def _redirect(self) -> Redirect | None:
        if self._at("<(") or self._at(">("):
            return None
        m = _REDIRECT.match(self.src, self.pos)
        if not m:
            if self._c() == "{" and _NAMED_FD.match(self.src, self.pos):
                raise Unprovable("a '{name}' file-descriptor redirection")
            return None
        fd, op = m.group(1), m.group(2)
        if fd and not self._is_fd(fd, op):
            return None  # the digits are a word of their own (read by `_word`)
        if op in ("&>", "&>>", "<<<", "<>") or (op == ">&" and fd == ""):
            self._bash_only(f"'{op}'")
        if op == "<>":
            raise Unprovable("a '<>' read-write redirection")
        self.pos = m.end()
        self._skip_blanks()
        c = self._c()
        if c == "" or (c in "\n;&|()<>" and not (self._at("<(") or self._at(">("))):
            raise Unprovable(f"redirection '{op}' without a target")
        if c.isdigit() and _REDIRECT.match(self.src, self.pos):
            raise Unprovable(f"redirection '{op}' followed by another redirection")
        start = self.pos
        target = self._word()
        raw = self.src[start : self.pos]
        if op in ("<<", "<<-"):
            dm = _HEREDOC_DELIM.fullmatch(raw)
            if not dm:
                raise Unprovable(f"here-document delimiter {raw!r} is not a plain word")
            delim = next(g for g in dm.groups() if g is not None)
            self.heredocs.append((delim, dm.group("plain") is None, op == "<<-", self.frame))
            return Redirect(fd, op, Word(delim, raw))
        return Redirect(fd, op, target)

    def _is_fd(self, digits: str, op: str) -> bool:
        """Whether bash (or dash) reads `digits` right before `op` as a descriptor."""
        if op.startswith("&"):
            return False  # `2&>x` is the word `2`, then `&>x`
        if self.dialect == DASH:
            return len(digits) == 1
        return int(digits) <= MAX_FD

    def _read_heredocs(self) -> None:
        if not self.heredocs:
            return
        if any(h[3] != self.frame for h in self.heredocs):
            raise Unprovable("a here-document body inside a substitution it was not opened in")
        for delim, quoted, strip_tabs, _ in self.heredocs:
            while True:
                if self.pos >= len(self.src):
                    raise Unprovable(f"here-document without its '{delim}' line")
                end = self.src.find("\n", self.pos)
                end = len(self.src) if end < 0 else end
                line = self.src[self.pos : end]
                self.pos = min(end + 1, len(self.src))
                if (line.lstrip("\t") if strip_tabs else line) == delim:
                    break
                if not quoted:
                    _check_heredoc_line(line)
        self.heredocs.clear()

    # -- words ----------------------------------------------------------------------

    def _nested(self, closer: str) -> None:
        """Parse a `$(…)`/`<(…)` body up to its `)` as its own here-document frame."""
        outer = self.frame
        self.frames += 1
        self.frame = self.frames
        self._enter()
        try:
            end = self._list(frozenset({closer}))
            if end != closer:
                raise Unprovable(f"unclosed substitution (missing {closer!r})")
            if any(h[3] == self.frame for h in self.heredocs):
                raise Unprovable("a here-document left open at the end of a substitution")
            self.pos += 1
            c = self._c()
            if c == "#":
                raise Unprovable("'#' right after ')'")
        finally:
            self.depth -= 1
            self.frame = outer

    def _backtick(self) -> None:
        end = self.src.find("`", self.pos + 1)
        if end < 0:
            raise Unprovable("unclosed backtick")
        body = self.src[self.pos + 1 : end]
        if "\\" in body:
            raise Unprovable("a backslash inside backticks")
        if "\n" in body and self.heredocs:
            raise Unprovable("a newline inside backticks while a here-document is pending")
        self.pos = end + 1
        inner = _Parser(body, self.dialect, self.unit, self.depth + 1)
        if inner.depth > MAX_NESTING:
            raise Unprovable(f"nested deeper than {MAX_NESTING} levels")
        inner.parse_all()


def _check_heredoc_line(line: str) -> None:
    """An unquoted here-document body is expanded: only `$NAME`/`${NAME}` data passes."""
    if line.endswith("\\") and (len(line) - len(line.rstrip("\\"))) % 2 == 1:
        raise Unprovable("a line continuation inside an unquoted here-document")
    i = 0
    while i < len(line):
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c == "`":
            raise Unprovable("a backtick in an unquoted here-document")
        if c == "$":
            nxt = line[i + 1 : i + 2]
            if nxt == "{":
                m = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*|[0-9]+)\}").match(line, i + 1)
                if not m:
                    raise Unprovable("a '${…}' expansion in an unquoted here-document")
                i = m.end()
                continue
            if nxt in ("(", "["):
                raise Unprovable(f"'${nxt}' in an unquoted here-document")
        i += 1


def is_safe_device(path: str) -> bool:
    """`/dev/null`, `/dev/stdout`, `/dev/fd/N`, …: redirecting there writes no file."""
    return _SAFE_DEV.fullmatch(path) is not None
