"""A second opinion from tree-sitter-bash: the simple commands, their words and the
redirections it sees, compared with what `parser` found.

tree-sitter's grammar is written independently of ours and is maintained against
real scripts, so a lexing mistake in one of them (where a quote ends, where a word
splits, what a `#` means) shows up as a disagreement. Any ERROR or MISSING node, any
node type outside the supported subset, or any difference in the multiset of
commands (assignments + words) or redirections makes the command ask.
"""

from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

from orchestrator.permissions.shell.parser import DYNAMIC, Unit

_CommandKey = tuple[tuple[tuple[str, str], ...], tuple[str, ...]]
_RedirectKey = tuple[str, str, str]

_STRUCTURE = frozenset(
    {
        "program",
        "list",
        "pipeline",
        "redirected_statement",
        "subshell",
        "compound_statement",
        "if_statement",
        "elif_clause",
        "else_clause",
        "while_statement",
        "for_statement",
        "case_statement",
        "case_item",
        "do_group",
        "negated_command",
        "comment",
        "heredoc_body",
        "heredoc_content",
        "heredoc_start",
        "heredoc_end",
        "variable_name",
        "command_name",
        "file_descriptor",
        "special_variable_name",
        "unary_expression",
        "binary_expression",
        "parenthesized_expression",
        "test_operator",
        "regex",
    }
)
"""Named node types the walker accepts; any other named type is a disagreement."""
_EXPANSIONS = frozenset(
    {"simple_expansion", "expansion", "command_substitution", "process_substitution"}
)
_TEST_PARTS = frozenset(
    {"unary_expression", "binary_expression", "parenthesized_expression", "test_operator"}
)


_BLANK = re.compile(rb"(?:[ \t\n]|\\\n)*")


class Disagreement(Exception):
    """tree-sitter reads the command differently (or cannot read it)."""


@lru_cache(maxsize=1)
def _parser() -> Parser:
    return Parser(Language(tree_sitter_bash.language()))


def disagreement(src: str, unit: Unit) -> str | None:
    """None when tree-sitter sees the same commands and redirections as `unit`."""
    tree = _parser().parse(src.encode("utf-8", "surrogateescape"))
    if tree.root_node.has_error:
        return "tree-sitter-bash cannot parse it (syntax error)"
    walker = _Walker(src.encode("utf-8", "surrogateescape"))
    try:
        walker.visit(tree.root_node)
    except Disagreement as exc:
        return f"the two parsers disagree: {exc}"
    mine_cmds: Counter[_CommandKey] = Counter(
        (tuple((n, w.value) for n, w in c.assignments), tuple(w.value for w in c.words))
        for c in unit.commands
        if c.words or c.assignments
    )
    mine_reds: Counter[_RedirectKey] = Counter((r.fd, r.op, r.target.value) for r in unit.redirects)
    if walker.commands != mine_cmds:
        only_mine = list((mine_cmds - walker.commands).elements())
        only_ts = list((walker.commands - mine_cmds).elements())
        return (
            "the two parsers disagree on the commands "
            f"(warden: {_show_cmds(only_mine)}; tree-sitter: {_show_cmds(only_ts)})"
        )
    if walker.redirects != mine_reds:
        return "the two parsers disagree on the redirections"
    if walker.conditions != Counter(unit.conditions):
        return "the two parsers disagree on a '[[ … ]]' condition"
    return None


def loose_commands(src: str) -> list[list[str]]:
    """Best-effort words of every simple command tree-sitter finds, for deny and ask
    rules when the command is not proven (never used to allow anything)."""
    out: list[list[str]] = []
    stack = [_parser().parse(src.encode("utf-8", "surrogateescape")).root_node]
    while stack:
        node = stack.pop()
        stack.extend(reversed(node.children))
        if node.type == "command":
            words: list[str] = []
            for i, child in enumerate(node.children):
                part = node.field_name_for_child(i)
                target = (
                    child.named_children[0] if part == "name" and child.named_children else child
                )
                if part in ("name", "argument"):
                    try:
                        words.append(_cook(target))
                    except Disagreement:
                        words.append(DYNAMIC)
            if words and words[0]:
                out.append(words)
    return out


def _show_cmds(cmds: list[_CommandKey]) -> str:
    if not cmds:
        return "nothing"
    return ", ".join(repr(" ".join(words).replace(DYNAMIC, "$…")) for _, words in cmds[:3])


class _Walker:
    def __init__(self, src: bytes) -> None:
        self.src = src
        self.commands: Counter[_CommandKey] = Counter()
        self.redirects: Counter[_RedirectKey] = Counter()
        self.conditions: Counter[tuple[str, ...]] = Counter()
        self.extra: dict[int, list[str]] = {}
        """Words tree-sitter left out of a command, by the command node's id."""

    def _check_gaps(self, node: Node) -> None:
        """Text between a structural node's children must be blanks: tree-sitter must
        not silently skip anything (it drops a lone `-` before `<<`, a known quirk
        that is put back as a word)."""
        cursor = node.start_byte
        previous: Node | None = None
        for child in node.children:
            gap = self.src[cursor : child.start_byte]
            if not _BLANK.fullmatch(gap):
                if (
                    gap.strip() == b"-"
                    and previous is not None
                    and previous.type == "command"
                    and child.type == "heredoc_redirect"
                ):
                    self.extra.setdefault(previous.id, []).append("-")
                else:
                    raise Disagreement(f"tree-sitter skips the text {_decode(gap.strip())!r}")
            cursor = max(cursor, child.end_byte)
            previous = child

    def visit(self, root: Node) -> None:
        """Every node, parents before children, without recursion (lists nest deeply)."""
        stack = [root]
        while stack:
            node = stack.pop()
            self._visit_one(node)
            stack.extend(reversed(node.children))

    def _visit_one(self, node: Node) -> None:
        t = node.type
        if node.is_missing or t == "ERROR":
            raise Disagreement("tree-sitter found a syntax error")
        if (t in _STRUCTURE or t == "command") and t not in ("heredoc_body", "heredoc_content"):
            self._check_gaps(node)
        if t == "command":
            self._command(node)
        elif t == "variable_assignment":
            if node.parent is None or node.parent.type not in ("command", "variable_assignments"):
                self.commands[((_assignment(node),), ())] += 1
        elif t == "variable_assignments":
            self.commands[(tuple(_assignment(c) for c in node.named_children), ())] += 1
        elif t in ("file_redirect", "heredoc_redirect", "herestring_redirect"):
            self.redirects[_redirect(node)] += 1
        elif t == "test_command":
            self._test(node)
        elif node.is_named and t not in _STRUCTURE and t not in _EXPANSIONS and not _is_word(t):
            raise Disagreement(f"tree-sitter sees a {t.replace('_', ' ')}")

    def _command(self, node: Node) -> None:
        assigns: list[tuple[str, str]] = []
        words: list[str] = []
        for i, child in enumerate(node.children):
            name = node.field_name_for_child(i)
            if child.type == "variable_assignment":
                assigns.append(_assignment(child))
            elif name == "name":
                word = _cook(child.named_children[0]) if child.named_children else ""
                if word or child.named_children[0].type != "word":
                    words.append(word)
            elif name == "argument":
                words.append(_cook(child))
        words.extend(self.extra.get(node.id, []))
        first = node.child_by_field_name("name")
        if first is not None and _raw(first) == "time":
            words = words[2:] if words[1:2] == ["-p"] else words[1:]
        self.commands[(tuple(assigns), tuple(words))] += 1

    def _test(self, node: Node) -> None:
        words = [_raw(node.children[0])]
        for child in node.children[1:]:
            words.extend(_flatten_test(child))
        if words[0] == "[[":
            self.conditions[tuple(words[1:-1])] += 1
        else:
            self.commands[((), tuple(words))] += 1


def _flatten_test(root: Node) -> list[str]:
    """The words and operators of a test expression, in order, without recursion
    (`[ a -a b -a … ]` nests one level per operator)."""
    out: list[str] = []
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type in _TEST_PARTS and node.type != "test_operator":
            stack.extend(reversed(node.children))
        elif node.type in ("test_operator", "regex") or not node.is_named:
            out.append(_raw(node))
        else:
            out.append(_cook(node))
    return out


def _is_word(t: str) -> bool:
    return t in (
        "word",
        "number",
        "string",
        "string_content",
        "raw_string",
        "concatenation",
        "ansi_c_string",
        "extglob_pattern",
    )


def _raw(node: Node) -> str:
    return _decode(node.text or b"")


def _assignment(node: Node) -> tuple[str, str]:
    name = node.child_by_field_name("name")
    value = node.child_by_field_name("value")
    if name is None or name.type != "variable_name":
        raise Disagreement("tree-sitter sees an assignment to something other than a name")
    return _raw(name), "" if value is None else _cook(value)


def _redirect(node: Node) -> _RedirectKey:
    fd = ""
    op = ""
    target = ""
    for child in node.children:
        if child.type.endswith("_redirect"):
            continue
        if child.type == "file_descriptor":
            fd = _raw(child)
        elif not child.is_named:
            op = _raw(child)
        elif child.type == "heredoc_start":
            raw = _raw(child)
            target = raw.strip("'\"").lstrip("\\")
        elif child.type in ("heredoc_body", "heredoc_end"):
            continue
        else:
            target = _cook(child)
    if op in (">&-", "<&-"):
        op, target = op[:2], "-"
    return fd, op, target


def _cook(node: Node) -> str:
    """A word node's value after quote removal; expansions become DYNAMIC."""
    t = node.type
    raw = _raw(node)
    if t in _EXPANSIONS:
        return DYNAMIC
    if t in ("word", "extglob_pattern") or (t == "number" and not node.named_children):
        return _unescape(raw, quoted=False)
    if t == "raw_string":
        return raw[1:-1]
    if t == "ansi_c_string" and "\\" not in raw:
        return raw[2:-1]
    size = node.end_byte - node.start_byte
    if t == "string":
        return _join(node, 1, size - 1, quoted=True)
    if t == "concatenation":
        return _join(node, 0, size, quoted=False)
    raise Disagreement(f"tree-sitter sees a {t.replace('_', ' ')} in a word")


def _join(node: Node, lo: int, hi: int, *, quoted: bool) -> str:
    """Cook the children of a string or concatenation, with the text between them
    (byte offsets `lo`..`hi` of the node)."""
    base = node.start_byte
    data = node.text or b""
    out: list[str] = []
    cursor = lo
    for child in node.children:
        start, end = child.start_byte - base, child.end_byte - base
        if start < lo or end > hi:
            continue
        if start > cursor:
            out.append(_unescape(_decode(data[cursor:start]), quoted))
        if child.type == "string_content":
            out.append(_unescape(_raw(child), quoted=True))
        elif child.is_named:
            out.append(_cook(child))
        else:
            out.append(_raw(child))
        cursor = end
    if cursor < hi:
        out.append(_unescape(_decode(data[cursor:hi]), quoted))
    return "".join(out)


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def _unescape(text: str, quoted: bool) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "\n":
                pass
            elif not quoted or nxt in '"\\$`':
                out.append(nxt)
            else:
                out.append(c + nxt)
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)
