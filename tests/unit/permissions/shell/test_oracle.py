"""Locks in that what the analyser proves is what bash 5.2 really does: generated
commands (fixed seed) that the analyser accepts are run by the host's bash with an
empty PATH and a `command_not_found_handle` that only logs each argv, and every
command bash tried to run must be one the analyser listed. Literal words are also
compared with bash's own word splitting (`printf '%s\\0'`).

Nothing generated runs a program: PATH is empty, the alphabet holds no builtins that
act, and the working directory is a fresh temporary directory."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from orchestrator.permissions.shell import DYNAMIC, analyse

BASH = "/bin/bash"
CASES = 500
SEED = 20261123

PIECES = [
    "aa", "bb", "cc dd", "'q q'", '"d q"', "x\\ y", "\\'", '"a\\"b"', "$'s'", "$'s\\'t'",
    '"\\$x"', "'#'", "a#b", "#c", "\\#", '"\\\\"', "\\\\", '"$(bb c)"', "$(aa)", "`bb`",
    "<(aa)", "{a,b}", "a{b}", "[ab]", "x=1", "LANG=C", ">out", "2>&1", "<<EOF\nbody\nEOF\n",
    "<<'E F'\nb $(aa)\nE F\n", "\\\n", "\\\n ", '"a\\\nb"', "${x}", "$x", ";", "&&", "||", "|",
    "&", "\n", "(", ")", "{ ", " }", "if", "then", "fi", "for i in a b; do", "done",
    "case a in a)", ";;", "esac", "$((1))", "${x:-aa}", '\\"', "'", '"', "$", "$(", "`", "2>",
    "<", ">|o2", "&>o3", "!", "time", "eval aa", "sh -c 'bb z'", 'bash -c "cc"', "env aa",
    "xargs -n1 bb", "timeout 1 cc", "\t", "#", "$'a'b", "a\\\nb", "$'a\\\\'b'", "${x@P}",
    "$\\\n(aa)", "<<E$\nx\nE$\n", "<<\"E\"'F'\nx\nEF\n", ")#", "BASH_CMDS[aa]=x",
    "cat <<EOF $(", "EOF", '"', "$\\", "a\\\n#", "<<-EOF\n\tx\n\tEOF\n", "`aa \\`bb\\``",
    '"`aa`"', "$(aa #)\n)", "$(case a in a) aa;; esac)", "x${x}y", "\\$(aa)", "'$(aa)'",
    "\"'$(aa)'\"", "${x}$(aa)", "$'\\''", "<<<$(aa)", "<&0", ">&2", "3>&-", "a=(1)",
    "f() { aa; }", "{aa,bb}", "!(aa)", "[[ -n $(aa) ]]", "while aa; do", "until bb; do",
    "[[ -f x ]]", "[[ $(aa) == b* ]]", "[[ a < b && ! -z c ]]", "[[ x =~ ^a.*$ ]]", "]]",
]
"""Fragments that agents write and fragments that broke earlier analysers."""
_WRAPPERS = {"env", "xargs", "timeout", "sh", "bash"}
_HANDLER = (
    "command_not_found_handle() { { printf '%s\\x1f' \"$@\"; printf '\\x1e'; } >> \"$LOG\";"
    " return 1; }\n"
)


def _generate(rnd: random.Random, depth: int = 0) -> str:
    out = ""
    for _ in range(rnd.randint(1, 6)):
        r = rnd.random()
        if r < 0.1 and depth < 2:
            out += "$(" + _generate(rnd, depth + 1) + ")"
        elif r < 0.15 and depth < 2:
            out += "`" + _generate(rnd, depth + 1).replace("`", "") + "`"
        elif r < 0.2 and depth < 2:
            out += '"' + _generate(rnd, depth + 1).replace('"', "") + '"'
        else:
            out += rnd.choice(PIECES)
        out += rnd.choice([" ", " ", "", "\n", "; "])
    return out


def _bash_runs(command: str, cwd: Path) -> set[tuple[str, ...]] | None:
    log = cwd / "log"
    log.write_text("")
    env = {"LOG": str(log), "PATH": "/nonexistent", "HOME": str(cwd)}
    try:
        subprocess.run(
            ["/usr/bin/timeout", "2", BASH, "-c", _HANDLER + command],
            cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=10,
        )
    except subprocess.TimeoutExpired:
        return None
    data = log.read_text(encoding="utf-8", errors="replace")
    return {tuple(rec.split("\x1f")[:-1]) for rec in data.split("\x1e") if rec}


def _covers(mine: tuple[str, ...], argv: tuple[str, ...]) -> bool:
    def loose(word: str) -> bool:
        return DYNAMIC in word or any(g in word for g in "*?[")

    if any(loose(w) for w in mine):
        return mine[0] == argv[0] or loose(mine[0])
    return mine == argv


def test_every_command_bash_runs_was_listed(tmp_path: Path) -> None:
    rnd = random.Random(SEED)
    accepted = 0
    failures: list[str] = []
    for _ in range(CASES):
        command = _generate(rnd)
        found = analyse(command)
        if found.problems:
            continue
        accepted += 1
        syntax = subprocess.run([BASH, "-n", "-c", command], capture_output=True)
        if syntax.returncode != 0:
            failures.append(f"{command!r}: proven, but bash -n rejects it")
            continue
        ran = _bash_runs(command, tmp_path)
        for argv in ran or set():
            if argv and argv[0] in _WRAPPERS:
                continue
            if not any(_covers(c.words, argv) for c in found.commands):
                failures.append(f"{command!r}: bash ran {argv!r}, analyser listed "
                                f"{[c.words for c in found.commands]!r}")
    assert not failures, "\n".join(failures[:20])
    assert accepted > CASES // 20  # the generator still produces proven commands


@pytest.mark.parametrize(
    "words",
    [
        "a 'b c' \"d e\" f\\ g",
        "'a'\"b\"c\\d",
        "\"a\\\"b\" 'c\\' \"\\\\\" \"\\$x\" \"\\`\"",
        "\"a\\\nb\" c \\\n d",
        "$'plain' a$'b'c",
        "a#b '#' \"#\" \\#x",
        "{} HEAD@{1} a{b}c '{a,b}' \"{1..2}\"",
        "\"it's\" 'say \"hi\"' \"\\n\" '\\n'",
        "-n -e -- --x=y",
        "ä ö 'ü' \"ß\"",
        "a\\ \\\n b",
        '"a  b" "" \'\'',
        "\"$\" 'x$' a$ \"a$\"",
        "\"a\\b\" \"\\'\"",
        "src/{components,utils} file{,.bak} x={a,b} a-{1,2}.txt %{a,b}@",
    ],
)
def test_literal_words_match_bash_word_splitting(words: str) -> None:
    found = analyse("printf " + words)
    assert found.problems == []
    out = subprocess.run(
        [BASH, "-c", "printf '%s\\0' " + words], capture_output=True, check=True
    ).stdout.decode()
    assert list(found.commands[0].words[1:]) == out.split("\0")[:-1]
