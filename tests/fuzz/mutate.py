"""The mutation stage: character and fragment edits over a seed corpus, and
`evolve`, which edits cases the analyser allowed earlier in a run."""

from __future__ import annotations

import random
import re

from tests.fuzz.netrule import net_safe

MUTATION_ALPHABET = " \t\n\r\x0b\xa0;&|<>()${}[]'\"`\\#*?!=~-_./:,%^@+0123456789abcdefghirstxyz"
DENIED_SNIPPETS = ("touch pwned", "rm -f x.txt", "id", "mkdir d", "echo hi > out", "sh -c id")
"""Commands with an effect no rule allows, spliced in by one mutation."""
MAX_CASE_CHARS = 2000
"""Longest case kept; longer ones are regenerated (bounded work per case)."""

SEED_CORPUS = (
    "echo hi",
    "ls -la | grep x",
    "cat x.txt | wc -l",
    "echo $'\\x41' > /dev/null",
    "printf '%s\\n' a b",
    "git status && echo ok",
    'echo "$HOME"',
    "head -n 1 x.txt",
    "echo ${x:-default}",
    "tail -n 5 x.txt 2>&1",
    "echo `date`",
    "seq 3 | tr 1 2",
    "cat <<'EOF'\nhi\nEOF",
    "echo hi; true",
    "echo $(( 1 + 2 ))",
    "ls ./*",
    "cat < /dev/null",
    "echo a\\\nb",
    "echo 'it''s'",
    "basename a/b",
    "echo {a,b}",
)


def mutate(r: random.Random, text: str, fragments: list[str]) -> str:
    """1-4 edits: insert/delete/duplicate characters, splice fragments, flip quotes,
    insert backslash-newline."""
    for _ in range(r.randint(1, 4)):
        if not text:
            text = r.choice(SEED_CORPUS)
        i = r.randrange(len(text) + 1)
        op = r.randint(0, 7)
        if op == 0:
            text = text[:i] + r.choice(MUTATION_ALPHABET) + text[i:]
        elif op == 1 and text:
            j = min(len(text), i + r.randint(1, 3))
            text = text[:i] + text[j:]
        elif op == 2:
            j = min(len(text), i + r.randint(1, 8))
            text = text[:j] + text[i:j] + text[j:]
        elif op == 3:
            frag = r.choice(fragments)
            a = r.randrange(len(frag) + 1)
            b = min(len(frag), a + r.randint(1, 24))
            text = text[:i] + frag[a:b] + text[i:]
        elif op == 4:
            quotes = [m.start() for m in re.finditer("['\"]", text)]
            if quotes:
                q = r.choice(quotes)
                text = text[:q] + r.choice(["'", '"', "$'", '$"', "\\'", "`"]) + text[q + 1 :]
        elif op == 5:
            text = text[:i] + "\\\n" + text[i:]
        elif op == 6:
            text = (
                text[:i]
                + r.choice(["$(", ")", "${", "}", "<(", ">(", "<<", "#", "`", "$'"])
                + text[i:]
            )
        else:
            text = text[:i] + " " + r.choice(DENIED_SNIPPETS) + " " + text[i:]
    return text


DANGER_FRAGMENTS = [
    "$(touch p)",
    "`id`",
    "; rm -f x.txt",
    ">out",
    "$'\\''",
    "\\\n",
    "#",
    "<(id)",
    ">(id)",
    "${x:-",
    "}",
    "'",
    '"',
    "a[$(id)]",
    "\r\n",
    "&>",
    "<>",
    "{fd}>",
    "sh -c ",
    "xargs ",
    "env -S ",
    "eval ",
    "<<E\n",
    "\nE\n",
    "$((",
    "))",
    "${!",
    "@P}",
    "\n",
    ";",
    "&",
    "|",
    "touch p",
    " -exec ",
    "$0",
    "$1",
    "\\",
    "$",
    "(",
    ")",
    "{",
    "2>",
    "3<.",
    "/dev/fd/3/x",
    "PATH=bin ",
    "HOME=. ",
    "BASH_ENV=bashenv ",
    "x=touch; $x",
    "exec ",
    "source ",
]


def evolve(seed: int, index: int, pool: list[str]) -> str:
    """Case `index` of an evolving run: a case the analyser allowed earlier, with 1-4
    edits that splice in dangerous fragments (loopback-only)."""
    r = random.Random(f"evolve:{seed}:{index}")
    while True:
        case = mutate(r, r.choice(pool), DANGER_FRAGMENTS)
        if case.strip() and len(case) <= MAX_CASE_CHARS and net_safe(case):
            return case
