"""Locks in "prove or ask": the Bash analyser lists exactly the commands bash runs for
the supported subset, and every construct outside it (or whose command depends on a
run-time value) is reported as a problem naming the construct, so it asks."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from orchestrator.permissions.shell import DYNAMIC, analyse
from tests.conftest import warden_argv, warden_env


def commands(command: str) -> list[str]:
    found = analyse(command)
    assert found.problems == [], found.problems
    return [c.display() for c in found.commands]


def problem(command: str) -> str:
    found = analyse(command)
    assert found.problems, f"{command!r} was proven: {[c.display() for c in found.commands]}"
    return found.problems[0]


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("git status", ["git status"]),
        ("a && b || c; d & e\nf", ["a", "b", "c", "d", "e", "f"]),
        ("a | b |& c", ["a", "b", "c"]),
        ("! a", ["a"]),
        ("time -p a | b", ["a", "b"]),
        ("(a; b) > /dev/null", ["a", "b"]),
        ("{ a; b; } 2>&1 | tail -n 5", ["a", "b", "tail -n 5"]),
        ("if a; then b; elif c; then d; else e; fi", ["a", "b", "c", "d", "e"]),
        ("while a; do b; done", ["a", "b"]),
        ("until a; do b; done", ["a", "b"]),
        ("for f in *.py; do wc -l $f; done", ["wc -l $…"]),
        ("for f in a b\ndo\n  echo $f\ndone", ["echo $…"]),
        ('case "$x" in a|b) echo a;; (*) echo b;; esac', ["echo a", "echo b"]),
        ("echo $(whoami) `id`", ["whoami", "id", "echo $… $…"]),
        ('echo "$(a "$(b)")"', ["b", "a $…", "echo $…"]),
        ("diff <(sort a) <(sort b)", ["sort a", "sort b", "diff $… $…"]),
        ("while read -r line; do echo $line; done < <(ls)", ["read -r line", "echo $…", "ls"]),
        ("echo 'a b' \"c d\" e\\ f $'g'", ["echo a b c d e f g"]),
        ('echo "${HOME}/x" $1 $@ $?', ["echo $…/x $… $… $…"]),
        ("cat <<'EOF'\n$(rm -rf /)\nEOF", ["cat"]),
        ("cat <<EOF\nhello $USER ${HOME}\nEOF", ["cat"]),
        ("cat <<-EOF\n\thi\n\tEOF\necho done", ["cat", "echo done"]),
        ("cat > f.py <<'EOF'\nimport os\nEOF", ["cat"]),
        ("git diff \\\n  --stat", ["git diff --stat"]),
        ("a &&\\\n  b", ["a", "b"]),
        ('echo "a\\\nb"', ["echo ab"]),
        ("echo a # comment ; rm x", ["echo a"]),
        ("echo a#b", ["echo a#b"]),
        ("LANG=C sort x", ["sort x"]),
        ("x=1; echo $x", ["echo $…"]),
        ("[ -f x ] && echo y", ["[ -f x ]", "echo y"]),
        ("[[ -f x && $(a) == b* ]] || echo n", ["a", "echo n"]),  # [[ runs nothing itself
        ('if [[ ! -z "$x" || ( a < b ) ]]; then c; fi', ["c"]),
        ("[[ $x =~ ^a.*$ ]] && d", ["d"]),
        ('test -n "$x"', ["test -n $…"]),
        ("find . -name '*.py' -exec grep -l x {} +", ["find . -name *.py -exec grep -l x {} +", "grep -l x {} …"]),
        ("echo {} HEAD@{1}", ["echo {} HEAD@{1}"]),
        ("mkdir -p src/{components,utils}", ["mkdir -p src/components src/utils"]),
        ("cp setup.cfg{,.bak}", ["cp setup.cfg setup.cfg.bak"]),
        ("wc -l src/*.{py,pyi}", ["wc -l src/*.py src/*.pyi"]),
        ("python -c 'print(1)'", ["python -c print(1)"]),
    ],
)
def test_proven_commands_are_listed_exactly(command: str, expected: list[str]) -> None:
    assert commands(command) == expected


@pytest.mark.parametrize(
    ("command", "reason"),
    [
        # ANSI-C quotes: any escape could hide the closing quote
        ("echo $'\\\\' ; rm x'", "ANSI-C quote"),
        ("echo $'\\x41'", "ANSI-C quote"),
        # parameter expansions other than ${NAME}
        ("echo ${x:-$(rm x)}", "parameter expansion"),
        ("echo ${x//a/b}", "parameter expansion"),
        ("echo ${v@P}", "parameter expansion"),
        ("echo ${#x}", "parameter expansion"),
        ("echo ${x[0]}", "parameter expansion"),
        ("echo ${!x}", "parameter expansion"),
        # arithmetic
        ("echo $((1+2))", "arithmetic"),
        ("((x++))", "arithmetic"),
        ("let x=1", "'let'"),
        ("for ((i=0;i<3;i++)); do echo; done", "arithmetic"),
        # text bash evaluates later as code or names
        ("a[$(rm x)]=1", "array assignment"),
        ("BASH_CMDS[ls]=/tmp/x; ls", "array assignment"),
        ("a=(1 2)", "array assignment"),
        ("printf -v 'a[$(rm x)]' x", "printf -v"),
        ("printf -vx y", "printf -v"),
        ("declare x=1", "'declare'"),
        ("typeset x", "'typeset'"),
        ("local x", "'local'"),
        ("export X=1", "'export'"),
        ("readonly x", "'readonly'"),
        ("unset x", "'unset'"),
        ("set -- a", "'set'"),
        ("shopt -s extglob", "'shopt'"),
        ("alias ls=rm", "'alias'"),
        ("trap 'rm x' EXIT", "'trap'"),
        ("source x.sh", "'source'"),
        (". x.sh", "'.'"),
        ("enable -f x.so y", "'enable'"),
        ("hash -p /tmp/evil git", "'hash'"),
        ("mapfile -t a < f", "'mapfile'"),
        ("read 'a[$(rm x)]'", "assignment to 'a[$(rm x)]'"),
        ("read -a arr", "read"),
        ('[ "$a" "$b" ]', "'-v'"),
        ("[ -v 'a[$(rm x)]' ]", "-v"),
        ("[[ $x -eq 1 ]]", "arithmetic"),
        ("[[ a[$(rm x)] -lt 1 ]]", "arithmetic"),
        ("[[ -v 'a[$(rm x)]' ]]", "variable name"),
        ("[[ -R x ]]", "variable name"),
        ("[[ $x =~ ^(a|b)$ ]]", "regular expression"),
        ("[[ -f x ]\n]", "'[['"),
        ("[[ a; ]]", "inside '[[ … ]]'"),
        ("f() { rm x; }; f", "function definition"),
        ("function f { rm x; }", "'function'"),
        ("coproc rm x", "'coproc'"),
        ("select x in a; do rm x; done", "'select'"),
        # assignments that change what later commands run
        ("PATH=/tmp/evil; git status", "'PATH'"),
        ("IFS=/; git status", "'IFS'"),
        ("BASH_ENV=/tmp/x bash -c ls", "'BASH_ENV="),
        ("for PATH in /tmp; do ls; done", "'PATH'"),
        ("http_proxy=x; curl y", "'http_proxy'"),
        # run-time command names
        ("$cmd args", "command name"),
        ("${cmd} args", "command name"),
        ('"$(which rm)" x', "command name"),
        ("~/bin/tool", "command name"),
        ("g?t status", "command name"),
        ("[a\" \"b] x", "command name"),  # a bracket expression with a quoted blank
        ("[ab] x", "command name"),
        ("eval \"$x\"", "eval"),
        ("sh -c \"$x\"", "only known at run time"),
        ("ls | xargs -I{} {} x", "command name"),
        ("find . -exec {} \\;", "find -exec {}"),
        ("find . -exec sh -c 'echo {}' \\;", "replaced at run time"),
        ("find . -exec bash -c 'rm {}' \\;", "replaced at run time"),
        ("ls | xargs -I% sh -c 'echo %'", "replaced at run time"),
        # heredocs
        ('cat <<"E$"\nx\nE$', "delimiter"),
        ("cat <<E'F'\nx\nEF", "delimiter"),
        ("cat <<$X\nx\n$X", "delimiter"),
        ("cat <<EOF\n$(rm x)\nEOF", "here-document"),
        ("cat <<EOF\n`rm x`\nEOF", "here-document"),
        ("cat <<EOF\n${x:-$(rm x)}\nEOF", "here-document"),
        ("cat <<EOF\n$\\\n(rm x)\nEOF", "line continuation"),
        ("cat <<EOF $(echo\nEOF\n)", "here-document"),
        ("echo $(cat <<EOF)\nx\nEOF", "here-document"),
        ("cat <<EOF", "here-document"),
        # backslash-newline that joins tokens
        ("echo $\\\n(rm x)", "'$\\'"),
        ("ec\\\nho x", "line continuation"),
        ("a &\\\n& b", "line continuation"),
        ('echo "$HO\\\nME"', "line continuation"),
        # comments right after ')' and operators
        ("cat <(ls)#x", "'#'"),
        ("echo $(ls)#x", "'#'"),
        ("(ls)#x", "'#'"),
        ("ls;#x", "'#'"),
        # devices
        ("echo x > /dev/tcp/127.0.0.1/80", "device"),
        ("cat < /dev/udp/127.0.0.1/53", "device"),
        ("echo x > /dev/fd/../../etc/passwd", "device"),
        ("echo x > /dev/sda", "device"),
        ("exec 3<>/dev/tcp/127.0.0.1/80", "'<>'"),
        # redirect targets that are not literal paths
        ("echo x > $f", "literal path"),
        ("echo x > *.txt", "literal path"),
        ("echo x > ~/f", "literal path"),
        ("echo x >& $fd", ""),
        ("echo x {fd}> f", "'{name}'"),
        # expansions
        ("{rm,-rf,x}", "brace expansion"),  # in the command name
        ("echo {1..3}", "brace expansion"),  # sequences
        ("echo {a,{b,c}}", "brace expansion"),  # nesting
        ("echo a{b,c}d{e,f}", "brace expansion"),  # more than one list
        ("echo {a,,b}", "brace expansion"),  # empty words vanish
        ("echo $x{a,b}", "brace expansion"),
        ("echo {a,b}[0-9]", "brace expansion"),
        ("{a,b}* x", "brace expansion"),
        ("echo > {a,b}", "brace expansion"),  # redirection target
        ("x={a,b} ls", "brace expansion"),
        ("echo a<(ls)", ""),
        ("echo $\"x\"", "locale"),
        ("echo `a \\`b\\``", "backslash inside backticks"),
        # syntax bash rejects or reads differently
        ("echo 'x", "single quote"),
        ('echo "x', "double quote"),
        ("a &&", ""),
        ("| a", ""),
        ("a ;; b", ""),
        ("if a; then b", "missing"),
        ("ls\r", "control character"),
        ("echo x\x00", "control character"),
        ("zsh -c 'ls'", "zsh"),
        ("sudo ls", "'sudo'"),
        ("chroot /x ls", "'chroot'"),
        ("parallel rm ::: a", "'parallel'"),
    ],
)
def test_unprovable_constructs_ask_and_are_named(command: str, reason: str) -> None:
    assert reason in problem(command)


def test_deny_rules_still_see_commands_of_an_unproven_command() -> None:
    found = analyse("[[ $(rm -rf /) -eq 1 ]] && ls")
    assert found.problems
    assert ("rm", "-rf", "/") in [c.words for c in found.commands]


def test_dynamic_text_is_a_placeholder_not_text() -> None:
    found = analyse('echo "$X" a$(b)c')
    assert found.commands[-1].words == ("echo", DYNAMIC, f"a{DYNAMIC}c")


def test_cd_makes_relative_targets_and_programs_unknown() -> None:
    assert analyse("cd sub && make").changes_dir
    assert "after a cd" in problem("cd sub && ./run.sh")
    assert commands("cd sub && /usr/bin/make") == ["cd sub", "/usr/bin/make"]


@pytest.mark.parametrize(
    ("command", "reason"),
    [
        ("sh -c \"echo \\$'a'\"", "ANSI-C"),
        ("sh -c 'cat <(ls)'", "process substitution"),
        ("sh -c 'ls &> f'", "'&>'"),
        ("sh -c '[[ -f x ]]'", "[["),
        ("sh -c 'echo {a,b}'", "brace expansion"),
        ("sh -c 'function f { ls; }'", "function"),
        ("dash -c 'ls |& cat'", "'|&'"),
        ("/bin/sh -c 'cat <<< x'", "'<<<'"),
        ("sh -c 'time ls'", "'time'"),
        ("sh -c 'case x in a) ls;& esac'", "';&'"),
    ],
)
def test_sh_c_bodies_are_read_with_posix_rules(command: str, reason: str) -> None:
    assert reason in problem(command)


def test_bash_c_and_sh_c_bodies_are_analysed() -> None:
    assert commands("sh -c 'git status; ls -l'") == ["git status", "ls -l"]
    assert commands("bash -c 'diff <(ls a) <(ls b)'") == ["ls a", "ls b", "diff $… $…"]
    assert commands("bash -ec 'a && b' name arg") == ["a", "b"]
    assert commands("sh -e -u -c 'a'") == ["a"]
    assert commands("bash -o pipefail -c 'a | b'") == ["a", "b"]
    assert commands("bash script.sh") == ["bash script.sh"]  # runs a file: needs its own rule
    assert "not analysed" in problem("bash -i -c 'ls'")  # interactive shells read rc files
    assert "not analysed" in problem("bash --rcfile x -c 'ls'")
    assert "not analysed" in problem("bash -O extglob -c 'ls'")
    assert "not analysed" in problem("bash -a -c 'x=1; ls'")  # exports every assignment
    assert "not analysed" in problem("bash +B -c 'echo {a,b}'")  # no brace expansion
    assert "not analysed" in problem("bash -o allexport -c 'ls'")
    assert commands("eval 'a; b'") == ["a", "b"]


def test_policy_explain_names_the_construct_it_could_not_prove(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    env = warden_env(WARDEN_CONFIG_DIR=str(tmp_path / "cfg"), WARDEN_STATE_DIR=str(tmp_path / "st"))
    out = subprocess.run(
        warden_argv(
            "policy", "explain", "Bash", "echo ${x:-$(rm -rf /)}", "--allow", "Bash(echo:*)",
            "--workspace", str(ws),
        ),
        capture_output=True, text=True, env=env, check=True,
    ).stdout
    assert "decision: ASK" in out
    assert "not proven: parameter expansion '${x:-$(rm -rf /)}'" in out
    dont = subprocess.run(
        warden_argv(
            "policy", "explain", "Bash", "env PATH=/tmp echo x", "--allow", "Bash(echo:*)",
            "--mode", "dontAsk", "--workspace", str(ws),
        ),
        capture_output=True, text=True, env=env, check=True,
    ).stdout
    assert "decision: DENY" in dont and "not proven: environment prefix 'PATH='" in dont


def test_long_lists_are_decided_without_recursion_limits() -> None:
    # tree-sitter nests `a && b && …` one level per operator
    assert len(analyse("a && " * 255 + "a").commands) == 256
    assert "arithmetic" in problem("a && " * 200 + "$((1))")
    assert "longer than" in problem("a;" * 40000)


def test_padded_command_lines_ask_cheaply_and_keep_deny_rules_where_they_can() -> None:
    """A hostile subagent cannot make the host spend seconds of CPU per call: past
    256 commands the analyser stops proving; up to 16 KiB tree-sitter still lists the
    commands (so a deny rule matches the `rm` hidden in the padding); past that the
    problem says rules were not checked, so nobody approves it believing they were."""
    padded = "rm -rf / ; " + " | ".join(["grep -v x"] * 1300)
    found = analyse(padded)
    assert found.problems == ["more than 256 commands in one command line"]
    assert ("rm", "-rf", "/") in [c.words for c in found.commands]
    huge = analyse("rm -rf / ; " + " | ".join(["grep -v x"] * 5000))
    assert "not checked against deny rules" in huge.problems[-1]
