"""Shape limits: command lines refused before any parse, by linear counts.

Owns the first half of the analyser's cost bound (issue 32): the shapes whose parse
grows faster than the text (here-documents pending on one line, deep nesting, long
lists and pipelines, long word lists) are counted here, with C-speed string scans
and no parse, and a line past a limit is asked about unparsed. The second half, a
deadline on whatever parse is left, is `permissions.analyser_bound`'s.

The limits sit where a parse would come near the deadline anyway: below them, a line
is still parsed (in a worker, `analyser_bound`) and tree-sitter still lists the
commands of an unproven one, so a deny rule matches a command hidden in padding.

The counts skip here-document bodies (a 60 KB source file written through `cat
<<'EOF'` has thousands of `;` and `(` that bash never reads as syntax). What looks
like a here-document operator inside quotes is skipped the same way: that only
undercounts, and whatever is not refused here is still parsed under the deadline.
"""

from __future__ import annotations

import re

from orchestrator.permissions.shell.words import MAX_COMMAND_CHARS

MAX_HEREDOCS = 64
"""Most here-document operators (`<<`, `<<-`) in one command line, counted before any
parse (also inside quotes and bodies: a count cannot tell). tree-sitter-bash's parse
grows with the square of the here-documents pending on one line (4,700 in 63 KB took
7 s, holding the interpreter); at this cap the worst shape measured takes about 0.2 s
(`bench/bench_decision_cost.py`)."""
MAX_SHAPE_DEPTH = 1024
"""Most parentheses open at once outside here-document bodies (`(`, `$(`, `<(`,
`$((`): the strict parser proves at most `MAX_NESTING` levels; tree-sitter still
lists the commands of a deeper line for deny rules, but 5,000 nested subshells took
it 2.6 s on a loaded machine."""
MAX_SHAPE_SEPARATORS = 8192
"""Most `|`, `;`, `&` and newlines outside here-document bodies: the strict parser
proves at most `MAX_COMMANDS` commands, tree-sitter lists the commands of a longer
line for deny rules up to `MAX_LOOSE_CHARS` (16 KiB, at most about 8,000 commands),
and a pipeline of 8,000 took it 1.6 s."""
MAX_SHAPE_WORDS = 8192
"""Most words (runs of non-blanks) outside here-document bodies (8,192 words of one
letter fill 16 KiB)."""

_HEREDOC_OPERATOR = re.compile(r"(?<!<)<<(?!<)")
_HEREDOC = re.compile(
    r"(?<!<)<<(?!<)(-?)[ \t]*(?:'([^'\n]*)'|\"([^\"\n]*)\"|\\?([^\s;&|<>()'\"`]+))"
)
_NOT_PAREN = re.compile(r"[^()]+")
_ASKED = (
    "so it was not parsed and not checked against deny rules: split it into smaller "
    "commands, or write long text with the Write tool"
)


def refused_shape(command: str) -> str | None:
    """Why `command` is asked about without being parsed (its parse could cost more
    than one decision may take), or None. Linear in the command."""
    if len(command) > MAX_COMMAND_CHARS:
        return f"longer than {MAX_COMMAND_CHARS // 1024} KiB, {_ASKED}"
    if command.count("<<") > MAX_HEREDOCS:  # an upper bound of the operators: cheap first
        for count, _ in enumerate(_HEREDOC_OPERATOR.finditer(command), start=1):
            if count > MAX_HEREDOCS:
                return f"more than {MAX_HEREDOCS} here-document operators ('<<'), {_ASKED}"
    outside = outside_bodies(command) if "<<" in command else command
    if outside.count("(") > MAX_SHAPE_DEPTH and paren_depth(outside) > MAX_SHAPE_DEPTH:
        return f"nested more than {MAX_SHAPE_DEPTH} parentheses deep, {_ASKED}"
    separators = sum(outside.count(c) for c in "|;&\n")
    if separators > MAX_SHAPE_SEPARATORS:
        return (
            f"more than {MAX_SHAPE_SEPARATORS} command separators ('|', ';', '&', newlines), "
            f"{_ASKED}"
        )
    if len(outside) > 2 * MAX_SHAPE_WORDS and len(outside.split()) > MAX_SHAPE_WORDS:
        return f"more than {MAX_SHAPE_WORDS} words, {_ASKED}"
    return None


def paren_depth(text: str) -> int:
    """Most parentheses open at once in `text` (a `)` with none open is ignored)."""
    depth = deepest = 0
    for c in _NOT_PAREN.sub("", text):
        if c == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif depth:
            depth -= 1
    return deepest


def outside_bodies(command: str) -> str:
    """`command` without its here-document bodies (each body from the line after its
    operator's line to its delimiter line, or to the end when the delimiter never
    comes). Called with at most MAX_HEREDOCS operators; each body's end is found by
    one regex search from where the previous body ended."""
    kept: list[str] = []
    pos = 0
    operators = list(_HEREDOC.finditer(command))
    k = 0
    while k < len(operators):
        if operators[k].start() < pos:  # inside a body already skipped
            k += 1
            continue
        newline = command.find("\n", operators[k].end())
        if newline < 0:
            break
        on_line = []
        while k < len(operators) and operators[k].start() < newline:
            on_line.append(operators[k])
            k += 1
        kept.append(command[pos : newline + 1])
        pos = newline + 1
        for op in on_line:
            delimiter = next(g for g in op.groups()[1:] if g is not None)
            tabs = r"\t*" if op.group(1) else ""
            end = re.compile(rf"^{tabs}{re.escape(delimiter)}$", re.M).search(command, pos)
            if end is None:
                return "".join(kept)
            pos = end.end() + 1
    kept.append(command[pos:])
    return "".join(kept)
