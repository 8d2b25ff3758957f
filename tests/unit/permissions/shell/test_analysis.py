"""Locks in that Bash rules cannot be stretched by shell composition: every simple
command must be allowed on its own, substitutions are analysed, redirections are
writes, and what the analyser does not understand asks (denies in dontAsk)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from orchestrator.behavior import Behavior
from orchestrator.permissions import EffectivePolicy, ToolCall, evaluate
from orchestrator.permissions.rules import parse_rule
from orchestrator.permissions.shell import analyse
from orchestrator.permissions.sources import PolicySource, merge


def policy(
    allow: list[str], deny: Sequence[str] = (), ask: Sequence[str] = (), mode: str = "default"
) -> EffectivePolicy:
    rules = [parse_rule(r, "allow", "test", "t") for r in allow]
    rules += [parse_rule(r, "deny", "test", "t") for r in deny]
    rules += [parse_rule(r, "ask", "test", "t") for r in ask]
    return merge([PolicySource("test", rules, mode)])  # type: ignore[arg-type]


GIT = policy(
    ["Bash(git diff:*)", "Bash(git status)", "Bash(npm run test:*)", "Bash(ls *)", "Bash(cat:*)"]
)


def bash(command: str, pol: EffectivePolicy = GIT) -> Behavior:
    return evaluate(
        pol, ToolCall(tool_name="Bash", tool_input={"command": command})
    ).decision.behavior


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("git diff", "allow"),
        ("git diff --stat HEAD~1", "allow"),
        ("git status", "allow"),
        ("git status --short", "ask"),  # exact rule: nothing may follow
        ("git diffx", "ask"),  # prefix is word-wise
        ("npm run test:unit", "ask"),
        ("npm run test --watch", "allow"),
        ("ls", "allow"),  # a single trailing ` *` is optional
        ("ls -la", "allow"),
        ("lsof", "ask"),
        ("git diff ';'", "allow"),  # quoted operator is an argument
        ('git diff "a && b"', "allow"),
        ("git diff \\; rm", "allow"),  # escaped ; is an argument too
        ("LANG=C git diff", "allow"),  # an allowlisted environment prefix
        ("FOO=1 git diff", "ask"),  # was allowed: an unknown variable may change what git does
        ("git diff 2>/dev/null", "allow"),
        ("git diff 2>&1", "allow"),
        ("git diff && git status", "allow"),
        ("git diff | cat", "allow"),
        ("git diff $HOME", "allow"),  # a variable is data, not a command
        ("# just a comment\ngit diff", "allow"),
        ("git diff; curl x | sh", "ask"),
        ("git diff && rm -rf /workspace", "ask"),
        ("git diff || rm x", "ask"),
        ("git diff $(evil)", "ask"),
        ('git diff "$(evil)"', "ask"),
        ("git diff `evil`", "ask"),
        ("git diff <(evil)", "ask"),
        ("eval git diff", "ask"),  # analysed, but eval itself needs a rule (Claude Code asks)
        ("eval 'git diff; rm -rf /'", "ask"),
        ('eval "$CMD"', "ask"),
        ("git diff > /etc/x", "ask"),
        ("git diff >> out.txt", "ask"),
        ("git diff &> out.txt", "ask"),
        ("git diff >& out.txt", "ask"),
        ("git diff > $F", "ask"),
        ("git diff\nrm -rf /", "ask"),
        ("git diff & rm x", "ask"),
        ("(git diff; rm x)", "ask"),
        ("{ git diff; rm x; }", "ask"),
        ("bash -c 'git diff'", "ask"),  # bash itself needs a rule, as in Claude Code
        ("sh -c 'git diff; rm -rf /'", "ask"),
        ('sh -c "$X"', "ask"),
        ("exec rm x", "ask"),
        ("env git diff", "ask"),  # env itself needs a rule
        ("env rm x", "ask"),
        ("PATH=/tmp/evil git diff", "ask"),  # changes what `git` is
        ("GIT_EXTERNAL_DIFF=/tmp/x git diff", "ask"),
        ("git diff | xargs rm", "ask"),
        ("find . -exec rm {} \\;", "ask"),
        ("if git diff; then rm x; fi", "ask"),
        ("for f in *; do git diff; done", "allow"),  # loop bodies are analysed now
        ("for f in *; do rm $f; done", "ask"),
        ("cat <<EOF\n$(rm -rf /)\nEOF", "ask"),  # unquoted heredoc expands
        ("cat <<'EOF'\n$(rm -rf /)\nEOF", "allow"),  # quoted heredoc is data
        ("cat <<EOF\nhello\nEOF\nrm x", "ask"),
        ("$CMD", "ask"),
        ("{rm,-rf,/}", "ask"),
        ("g?t diff", "ask"),
        ("git diff ${X:-$(evil)}", "ask"),
        ("git diff $((1+2))", "ask"),
        ("'unclosed", "ask"),
        ("git diff )", "ask"),
        ("f() { rm x; }; f", "ask"),
        ("git diff\\\n --stat", "allow"),  # line continuation
        ("git diff;rm x", "ask"),
        ("git diff|sh", "ask"),
        ("git diff>x", "ask"),
        ("PATH=/tmp/evil; git diff", "ask"),  # an assignment alone still changes `git`
        ("IFS=/ ; git diff", "ask"),
        ("x=1; git diff", "allow"),
        ("X=1; git diff", "ask"),  # was allowed: an upper-case name may be exported or special
        ("git diff > >(sh)", "ask"),
        ("git diff <<< $(rm x)", "ask"),
        ("cat <<EOF; rm x\nbody\nEOF", "ask"),
        ("ls\r", "ask"),  # bash would look for a command named 'ls\r'
        ("setsid git diff", "ask"),  # setsid itself needs a rule
        ("git diff '$(rm x)'", "allow"),  # single quotes: data
        ('git diff "\\`rm x\\`"', "allow"),  # escaped backticks: data
        ('git diff "`rm x`"', "ask"),
        ("git diff # ; rm x", "allow"),  # a comment
        ("git diff a#b", "allow"),
        ("\\git diff", "allow"),
        ('"git" diff', "allow"),
        ("git -C /tmp diff", "ask"),
        ("git diff $(", "ask"),
        ("${CMD} x", "ask"),
        ("builtin eval 'rm x'", "ask"),
        ("timeout --signal=KILL 5 git diff", "allow"),
        ("git diff |& cat", "allow"),
        ("git diff &&\n git status", "allow"),
    ],
)
def test_bash_composition(command: str, expected: Behavior) -> None:
    assert bash(command) == expected


def test_not_understood_is_denied_in_dont_ask_and_allowed_only_in_bypass() -> None:
    dont = policy(["Bash(git diff:*)"], mode="dontAsk")
    assert bash("git diff $(evil)", dont) == "deny"
    assert bash("git diff ${x:-y}", dont) == "deny"
    bypass = policy([], deny=["Bash(rm:*)"], mode="bypassPermissions")
    assert bash("for x in a; do ls; done", bypass) == "allow"
    assert bash("ls && rm -rf /", bypass) == "deny"


@pytest.mark.parametrize(
    "command",
    [
        "ls; rm -rf /",
        "ls && /bin/rm -rf /",
        "echo $(rm x)",
        "echo `rm x`",
        "ls | xargs rm",
        "find . -exec rm {} +",
        "bash -c 'rm x'",
        "eval rm x",
        "nohup rm x &",
        "timeout 5 rm x",
        "nice -n 5 rm x",
        "command rm x",
        "cat <(rm x)",
        "setsid rm x",
        "stdbuf -oL rm x",
        "time rm x",
        "! rm x",
        "[[ $(rm x) ]]",
        "[[ $(rm x) -eq 1 ]]",
        "xargs sh -c 'rm x'",
    ],
)
def test_deny_rule_matches_any_simple_command(command: str) -> None:
    pol = policy(["Bash"], deny=["Bash(rm:*)"])
    assert bash(command, pol) == "deny"


def test_input_redirect_obeys_read_denies() -> None:
    pol = policy(["Bash(cat:*)", "Bash(wc:*)"], deny=["Read(./.env)"])
    assert bash("wc -l < .env", pol) == "deny"
    assert bash("cat < src/../.env", pol) == "deny"
    assert bash("wc -l < README.md", pol) == "allow"
    assert bash("cd / && cat < workspace/.env", pol) == "deny"  # a .env at any depth (gitignore)


def test_redirect_writes_need_an_edit_allow() -> None:
    pol = policy(["Bash(git diff:*)", "Edit(out/**)"], deny=["Edit(//etc/**)"])
    assert bash("git diff > out/patch.txt", pol) == "allow"
    assert bash("git diff > src/x", pol) == "ask"
    assert bash("git diff > /etc/passwd", pol) == "deny"
    assert bash("git diff > out/../src/x", pol) == "ask"
    assert bash("cd out && git diff > x", pol) == "ask"  # relative path after cd is unknown
    accept = policy(["Bash(git diff:*)"], mode="acceptEdits")
    assert bash("git diff > notes.txt", accept) == "allow"
    assert bash("git diff > /tmp/notes.txt", accept) == "ask"


def test_analyser_splits_what_bash_runs() -> None:
    found = analyse("LANG=C git diff ';' && (ls | wc -l) > n.txt; echo `id` $(whoami)")
    assert [c.text for c in found.commands] == [
        "git diff ;",
        "ls",
        "wc -l",
        "id",
        "whoami",
        "echo \x00 \x00",
    ]
    assert found.writes == ["n.txt"]
    assert found.understood


def test_explanation_lists_each_part() -> None:
    exp = evaluate(GIT, ToolCall(tool_name="Bash", tool_input={"command": "git diff && rm x"}))
    parts = {p.text: (p.verdict, p.rule) for p in exp.subcommands}
    assert parts == {"git diff": ("allow", "Bash(git diff:*)"), "rm x": (None, None)}
    assert "rm x" in exp.decision.reason


def test_rule_words_may_be_quoted_and_deny_assumes_the_worst_for_open_commands() -> None:
    quoted = policy(['Bash(git commit -m "wip":*)', "Bash(echo 'a b')"])
    assert bash('git commit -m "wip" --no-verify', quoted) == "allow"
    assert bash("git commit -m wip", quoted) == "allow"
    assert bash("echo 'a b'", quoted) == "allow"
    assert bash("echo a b c", quoted) == "ask"
    exact_deny = policy(["Bash"], deny=["Bash(rm)"])
    assert bash("rm", exact_deny) == "deny"
    assert bash("ls | xargs rm", exact_deny) == "deny"  # runs `rm FILES...`
    assert bash("rm -f x", exact_deny) == "allow"  # an exact rule is exact
