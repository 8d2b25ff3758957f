"""Locks in, with the host's bash 5.2 and dash 0.5.12 as oracles, that a write through
`/dev/stdin`, `/dev/stdout`, `/dev/stderr`, `/dev/fd/N` or `/proc/self/fd/N` is a write
to the file that descriptor holds (from a redirection of the command, of a group or
loop around it, or of the command running a nested script); that a nested script is
read in the dialect of the shell that runs it; that a digit run before `<`/`>` is a
descriptor only as each shell takes it; and that no input makes a decision raise or
resolve a path beyond PATH_MAX (it asks).

Every generated command runs in a fresh temporary directory with only `echo`,
`printf`, `ls`, `cat` and `true`; the files it changed are compared with the
analyser's writes."""

from __future__ import annotations

import itertools
import os
import random
import subprocess
from pathlib import Path

import pytest

from orchestrator.config import AnalyserBound
from orchestrator.permissions import (
    EffectivePolicy,
    Mode,
    ToolCall,
    analyser_bound,
    evaluate,
    parse_rule,
)
from orchestrator.permissions.shell import analyse
from orchestrator.permissions.sources import BUILT_IN_ASK, BUILT_IN_SOURCE

FILES = ("a.txt", "b.txt", "c.txt")
ALLOW = ("Bash(echo:*)", "Bash(printf:*)", "Bash(ls:*)", "Bash(cat:*)", "Bash(true)",
         "Bash(sh:*)", "Bash(bash:*)", "Bash(dash:*)", "Bash(exec:*)")
"""Shells and `exec` are allowed too: a command that runs another needs its own rule
(as in Claude Code), and these tests are about what the nested command does."""


def _policy(mode: Mode = "default", rules: tuple[str, ...] = ALLOW) -> EffectivePolicy:
    parsed = tuple(parse_rule(r, "allow", "test", "test") for r in rules)
    parsed += tuple(parse_rule(r, "ask", BUILT_IN_SOURCE, "built-in") for r in BUILT_IN_ASK)
    return EffectivePolicy(rules=parsed, mode=mode, mode_source="test", sources=("test",))


def _decide(command: str, mode: Mode = "default") -> str:
    call = ToolCall(tool_name="Bash", tool_input={"command": command}, tool_use_id="t")
    return evaluate(_policy(mode), call).decision.behavior


def _changed(shell: str, command: str, cwd: Path) -> set[str]:
    """Files of FILES the real shell rewrote, truncated or appended to."""
    for name in FILES:
        (cwd / name).write_text(f"original {name}\n")
    before = {n: (cwd / n).read_bytes() for n in FILES}
    subprocess.run(
        [shell, "-c", command], cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True,
        timeout=10, env={"PATH": "/usr/bin:/bin", "HOME": str(cwd)},
    )
    return {n for n in FILES if (cwd / n).read_bytes() != before[n]}


def _reopen_cases(seed: int, count: int) -> list[str]:
    """Commands that give a descriptor a file and then open a descriptor path."""
    rnd = random.Random(seed)
    paths = {0: ["/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"], 1: ["/dev/stdout", "/dev/fd/1"],
             2: ["/dev/stderr", "/dev/fd/2"], 3: ["/dev/fd/3", "/proc/self/fd/3"],
             4: ["/dev/fd/4"]}
    cmds = ["echo pwned", "printf x", "ls", "true", "cat /dev/null"]
    out = []
    for _ in range(count):
        src = rnd.choice(FILES)
        n = rnd.choice([0, 1, 2, 3, 4])
        give = {0: f"<{src}", 1: f"1<{src}", 2: f"2<{src}", 3: f"3<{src}", 4: f"3<{src} 4<&3"}[n]
        target = rnd.choice(paths[n])
        op = rnd.choice([">", ">>", ">|"])
        cmd = rnd.choice(cmds)
        form = rnd.randrange(7)
        if form == 0:
            out.append(f"{cmd} {give} {op}{target}")
        elif form == 1:
            out.append(f"{{ {cmd} {op}{target}; }} {give}")
        elif form == 2:
            out.append(f"for i in 1; do {cmd} {op}{target}; done {give}")
        elif form == 3:
            out.append(f"sh -c '{cmd} {op}{target}' {give}")
        elif form == 4:
            out.append(f"bash -c 'eval \"{cmd} {op}{target}\"' {give}")
        elif form == 5:
            out.append(f"if true; then ( {cmd} {op}{target} ); fi {give}")
        else:
            out.append(f"{cmd} {op}{target} {give}")  # opened before the file is given
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_every_file_bash_writes_through_a_descriptor_path_is_a_write(
    tmp_path: Path, seed: int
) -> None:
    missed = []
    for command in _reopen_cases(seed, 60):
        changed = _changed("/bin/bash", command, tmp_path)
        analysis = analyse(command)
        if analysis.problems:
            continue  # asks: nothing to compare
        if not changed <= set(analysis.writes):
            missed.append((command, sorted(changed), analysis.writes))
        if changed:
            assert _decide(command) == "ask", command
    assert not missed, missed


@pytest.mark.parametrize(
    "command",
    [
        "ls <a.txt >/dev/stdin",
        "echo pwned 3<a.txt >/dev/fd/3",
        "printf '[core]\\n\\tfsmonitor = touch x\\n' <a.txt >/dev/stdin",
        "{ echo pwned >/dev/stdin; } <a.txt",
        "while true; do echo pwned >/dev/stdin; break; done <a.txt",
        "sh -c 'echo pwned >/dev/fd/3' 3<a.txt",
        "echo pwned 3<a.txt 4<&3 >/dev/fd/4",
        "echo pwned <a.txt >/proc/self/fd/0",
    ],
)
def test_the_issue_attacks_rewrite_the_file_in_bash_and_now_ask(
    tmp_path: Path, command: str
) -> None:
    assert _changed("/bin/bash", command, tmp_path) == {"a.txt"}
    assert "a.txt" in analyse(command).writes
    assert _decide(command) == "ask"
    # acceptEdits allows a workspace write, like `echo pwned > a.txt`; a protected
    # file behind the descriptor asks there too
    assert _decide(command.replace("a.txt", ".git/config"), "acceptEdits") == "ask"


def test_descriptor_paths_with_no_file_behind_them_stay_harmless() -> None:
    for command in ["echo hi >/dev/stdout", "echo hi >/dev/stderr 2>&1", "ls >/dev/fd/1",
                    "cat <<EOF >/dev/stdin\nx\nEOF", "cat <<<y >/dev/stdin"]:
        analysis = analyse(command)
        assert analysis.understood and analysis.writes == [], command
        assert _decide(command) == "allow", command


def test_a_script_nested_in_sh_is_read_as_dash_reads_it(tmp_path: Path) -> None:
    # dash's eval does no brace expansion: `env -u{x,} rm ls` runs `rm` there, where
    # bash would read `env -ux -u rm ls`
    probe = subprocess.run(["/bin/dash", "-c", "eval 'echo {x,}'"], capture_output=True, text=True)
    assert probe.stdout == "{x,}\n"
    for command in ["sh -c \"eval 'env -u{x,} rm ls'\"", "dash -c \"eval 'echo {a,b}'\"",
                    "sh -c \"eval \\$'echo a'\""]:
        assert _decide(command) == "ask", command
    # dash's exec takes no options: `exec -c echo hi` runs a program called -c
    probe = subprocess.run(["/bin/dash", "-c", "exec -c echo hi"], capture_output=True, text=True)
    assert "-c: not found" in probe.stderr
    assert [c.words for c in analyse("sh -c 'exec -c echo hi'").commands] == [("-c", "echo", "hi")]
    assert _decide("sh -c 'exec -c echo hi'") == "ask"
    assert _decide("bash -c 'exec -c echo hi'") == "allow"


@pytest.mark.parametrize(
    ("shell", "prefix"),
    list(itertools.product(["bash", "sh"], ["1", "12", "0001", "2147483647", "2147483648",
                                             "99999999999999999999", "2&"])),
)
def test_a_digit_run_is_a_descriptor_only_as_the_shell_takes_it(
    tmp_path: Path, shell: str, prefix: str
) -> None:
    inner = f"echo a {prefix}>x"
    command = inner if shell == "bash" else f"sh -c '{inner}'"
    (tmp_path / "x").unlink(missing_ok=True)
    run = subprocess.run(
        ["/bin/bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=10
    )
    written = (tmp_path / "x").read_text() if (tmp_path / "x").exists() else ""
    printed = (written or run.stdout).split()
    analysis = analyse(command)
    if not analysis.understood:
        return  # asks (tree-sitter disagrees on a long digit run): nothing to compare
    echo = next(c.words for c in analysis.commands if c.words[0] == "echo")
    if "Bad file descriptor" in run.stderr:
        printed = ["a"]  # bash took the digits as a descriptor it could not open
    assert list(echo[1:]) == printed, (command, run)


def _huge_inputs() -> list[str]:
    return [
        "echo x > " + "a/" * 32000 + "b",
        "[ -n a " + "-a -n a " * 600 + "]",
        "[[ " + "! " * 990 + "a ]]",
        "[[ a " + "&& a " * 990 + "]]",
        "test " + "! " * 3000 + "a",
    ]


def test_no_input_makes_a_decision_raise_or_resolve_past_path_max() -> None:
    for command in _huge_inputs():
        call = ToolCall(tool_name="Bash", tool_input={"command": command}, tool_use_id="t")
        decision = evaluate(_policy("acceptEdits"), call).decision
        assert decision.behavior in ("ask", "allow"), command[:40]
    long_path = "a/" * 32000 + "b"
    for tool in ("Read", "Write", "Edit"):
        call = ToolCall(
            tool_name=tool, tool_input={"file_path": long_path, "content": "x"}, tool_use_id="t"
        )
        decision = evaluate(_policy("bypassPermissions"), call).decision
        assert decision.behavior == "ask" and "PATH_MAX" in decision.reason
    # the 32,000-component redirection asks, naming the limit
    assert "PATH_MAX" in " ".join(analyse(_huge_inputs()[0]).problems)


def test_a_failure_inside_the_evaluation_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    bash_decision = sys.modules["orchestrator.permissions.bash_decision"]

    def broken(command: str) -> None:
        raise RecursionError("deep")

    monkeypatch.setattr(bash_decision, "analyse_bounded", broken)
    call = ToolCall(tool_name="Bash", tool_input={"command": "echo hi"}, tool_use_id="t")
    decision = evaluate(_policy("bypassPermissions"), call).decision
    assert decision.behavior == "ask" and "RecursionError" in decision.reason
    assert evaluate(_policy("dontAsk"), call).decision.behavior == "deny"


def test_a_glob_rule_matches_a_long_command_as_the_glob_says() -> None:
    # What the glob matches, not the analyser's deadline: a 16,000-character line goes
    # to a worker, which on a loaded machine may need more than the default second.
    analyser_bound.configure(AnalyserBound(deadline_ms=120_000))
    try:
        policy = _policy(rules=("Bash(echo * a * b * z)",))
        for text, expect in [("echo " + "a b " * 4000 + "z", "allow"),
                             ("echo " + "a b " * 4000, "ask"),
                             ("echo x a y b w z", "allow"), ("echo a b z", "ask")]:
            call = ToolCall(tool_name="Bash", tool_input={"command": text}, tool_use_id="t")
            decision = evaluate(policy, call).decision
            assert decision.behavior == expect, (text[:30], decision.reason)
    finally:
        analyser_bound.configure(AnalyserBound())


def test_path_resolution_follows_links_in_a_deep_tree(tmp_path: Path) -> None:
    from orchestrator.permissions import paths

    deep = tmp_path / "/".join(["d"] * 200)
    deep.mkdir(parents=True)
    os.symlink("/workspace/.git", deep / "link")
    path = "/workspace/" + "d/" * 200 + "link/config"
    assert "/workspace/.git/config" in paths.spellings(path, tmp_path)
    assert paths.spellings("/workspace/" + "d/" * 200 + "../" * 200 + "x", tmp_path)[-1] == (
        "/workspace/x"
    )
