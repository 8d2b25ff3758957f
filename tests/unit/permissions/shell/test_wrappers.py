"""Locks in the wrapper option grammars (from the coreutils/findutils/util-linux/procps
manuals) and the environment-prefix allowlist: every option form finds the command a
wrapper really runs, an option outside the manual asks, and only harmless variables
may prefix an allowed command."""

from __future__ import annotations

import pytest

from orchestrator.permissions.shell import analyse


def runs(command: str) -> list[str]:
    found = analyse(command)
    assert found.problems == [], found.problems
    return [c.display() for c in found.commands]


def asks(command: str) -> str:
    found = analyse(command)
    assert found.problems, f"{command!r} was proven: {[c.display() for c in found.commands]}"
    return found.problems[0]


@pytest.mark.parametrize(
    ("command", "inner"),
    [
        # env: -i, -0, -v flags; -u NAME (separate, attached, clustered, long with =)
        ("env rm x", "rm x"),
        ("env -i rm x", "rm x"),
        ("env - rm x", "rm x"),
        ("env -u HOME rm x", "rm x"),
        ("env -uHOME rm x", "rm x"),
        ("env -iu HOME rm x", "rm x"),
        ("env --unset=HOME rm x", "rm x"),
        ("env --unset HOME rm x", "rm x"),
        ("env --uns=HOME rm x", "rm x"),  # unambiguous long prefix
        ("env -- rm x", "rm x"),
        ("env LANG=C rm x", "rm x"),
        ("/usr/bin/env rm x", "rm x"),
        # timeout: -k/-s values, -f/-p/-v flags, DURATION operand
        ("timeout 5 rm x", "rm x"),
        ("timeout -s KILL 5 rm x", "rm x"),
        ("timeout -sKILL 5 rm x", "rm x"),
        ("timeout --signal=KILL 5 rm x", "rm x"),
        ("timeout --signal KILL 5 rm x", "rm x"),
        ("timeout -k 1 -s 9 5 rm x", "rm x"),
        ("timeout -fpk1 5 rm x", "rm x"),
        ("timeout --kill-after=1 --foreground 5 rm x", "rm x"),
        ("timeout -- 5 rm x", "rm x"),
        # nice: -n N / -nN / --adjustment=N / legacy -N
        ("nice rm x", "rm x"),
        ("nice -n 5 rm x", "rm x"),
        ("nice -n5 rm x", "rm x"),
        ("nice --adjustment=5 rm x", "rm x"),
        ("nice -5 rm x", "rm x"),
        # ionice: -c/-n values, -t flag
        ("ionice -c 2 -n 7 rm x", "rm x"),
        ("ionice -c2 -n7 rm x", "rm x"),
        ("ionice -tc3 rm x", "rm x"),
        ("ionice --class=idle rm x", "rm x"),
        # stdbuf: -i/-o/-e values
        ("stdbuf -oL rm x", "rm x"),
        ("stdbuf -o L -e 0 rm x", "rm x"),
        ("stdbuf --output=L rm x", "rm x"),
        # setsid, nohup
        ("setsid rm x", "rm x"),
        ("setsid -fw rm x", "rm x"),
        ("setsid --wait rm x", "rm x"),
        ("nohup rm x", "rm x"),
        # xargs: values (-n, -I, -d, -P, -L, -s, -E, -a), optional (-e, -i, -l), flags
        ("xargs rm", "rm …"),
        ("xargs -0 rm", "rm …"),
        ("xargs -n 1 rm", "rm …"),
        ("xargs -n1 rm", "rm …"),
        ("xargs -0n1 rm", "rm …"),
        ("xargs -r0 -P4 rm", "rm …"),
        ("xargs --max-args=1 rm", "rm …"),
        ("xargs --max-args 1 rm", "rm …"),
        ("xargs -I {} rm {}", "rm {} …"),
        ("xargs -I{} rm {}", "rm {} …"),
        ("xargs -i rm {}", "rm {} …"),
        ("xargs -e rm", "rm …"),  # -e takes an optional attached value only
        ("xargs -eEND rm", "rm …"),
        ("xargs -l rm", "rm …"),
        ("xargs -d '\\n' rm", "rm …"),
        ("xargs --null --no-run-if-empty rm", "rm …"),
        ("xargs", "echo …"),
        # command, builtin, exec
        ("command rm x", "rm x"),
        ("command -p rm x", "rm x"),
        ("builtin echo x", "echo x"),
        ("exec rm x", "rm x"),
        ("exec -a name rm x", "rm x"),
        ("exec -cl rm x", "rm x"),
        # flock: FILE then command, or -c script
        ("flock /tmp/lock rm x", "rm x"),
        ("flock -w 5 /tmp/lock rm x", "rm x"),
        ("flock -xn /tmp/lock rm x", "rm x"),
        ("flock -c 'rm x' /tmp/lock", "rm x"),
        # watch: argv joined and run by sh -c, or -x exec
        ("watch rm x", "rm x"),
        ("watch -n 1 rm x", "rm x"),
        ("watch -n1 -d rm x", "rm x"),
        ("watch -x rm x", "rm x"),
        ("unbuffer -p rm x", "rm x"),
        ("time rm x", "rm x"),
    ],
)
def test_wrappers_are_looked_through_in_every_option_form(command: str, inner: str) -> None:
    assert runs(command)[-1] == inner


@pytest.mark.parametrize(
    ("command", "reason"),
    [
        ("env -S 'rm x'", "split-string"),
        ("env --split-string='rm x'", "split-string"),
        ("env -C /tmp rm x", "chdir"),
        ("env -z rm x", "not an option"),
        ("env --frobnicate rm x", "not an option"),
        ("env PATH=/tmp rm x", "'PATH='"),
        ("env -i GIT_DIR=x git status", "'GIT_DIR='"),
        ("timeout rm", "duration"),
        ("timeout -x 5 rm", "not an option"),
        ("timeout --signal", "missing its value"),
        ("nice -x rm", "not an option"),
        ("ionice -x rm", "not an option"),
        ("stdbuf -x rm", "not an option"),
        ("stdbuf", "without a command"),
        ("setsid -x rm", "not an option"),
        ("xargs -Q rm", "not an option"),
        ("xargs --process-slot-var=PATH rm", "process-slot-var"),
        ("xargs -I{} {} x", "command name"),
        ("xargs -I X sh -c 'X'", "replaced at run time"),
        ("xargs -I{} flock {} ls", "replaced at run time"),  # the lock file is written
        ("find . -exec flock {} ls \\;", "replaced at run time"),
        ("xargs -I@ xargs -a @ ls", "replaced at run time"),
        ("xargs $opt rm", "only known at run time"),
        ("timeout $t rm", "only known at run time"),  # $t could be options
        ("command -x rm", "not an option"),
        ("exec", "file descriptors"),
        ("exec -z rm", "not an option"),
        ("flock -c 'rm x' /tmp/l extra", "extra"),
        ("watch -Z rm", "not an option"),
        ("watch \"$x\"", "run time"),
        ("unbuffer -x rm", "not an option"),
        ("sudo rm", "'sudo'"),
        ("doas rm", "'doas'"),
        ("su -c 'rm x'", "'su'"),
        ("chroot / rm", "'chroot'"),
        ("find . -exec", "without a command"),
        ("find . -exec rm {}", "without a command"),
    ],
)
def test_wrapper_options_outside_the_manual_ask(command: str, reason: str) -> None:
    assert reason in asks(command)


def test_wrapper_side_effects_are_writes_and_reads() -> None:
    assert analyse("flock /tmp/lock ls").writes == ["/tmp/lock"]
    assert analyse("nohup ls").writes == ["nohup.out"]
    assert analyse("find . -fprint out.txt").writes == ["out.txt"]
    assert analyse("find . -fprintf out.txt %p").writes == ["out.txt"]
    assert analyse("xargs -a list.txt rm").reads == ["list.txt"]


def test_unmodelled_wrappers_are_the_command() -> None:
    # their own name needs a rule; their arguments are never looked through
    assert runs("strace -f rm x") == ["strace -f rm x"]
    assert runs("taskset 1 rm x") == ["taskset 1 rm x"]
    assert runs("./env rm x") == ["./env rm x"]  # a local file called env is not env


@pytest.mark.parametrize(
    "command",
    [
        "LANG=C sort x",
        "LC_ALL=C.UTF-8 sort x",
        "TZ=UTC date",
        "TZ=Europe/Berlin date",
        "NO_COLOR=1 pytest",
        "FORCE_COLOR=0 npm test",
        "TERM=dumb git log",
        "COLUMNS=200 pytest",
        "CI=true npm test",
        "PYTHONDONTWRITEBYTECODE=1 pytest",
        "PYTHONUNBUFFERED=1 python x.py",
        "PYTHONHASHSEED=0 pytest",
        "RUST_BACKTRACE=1 cargo test",
        "LANG=C LC_ALL=C sort x",
        "env LANG=C sort x",
    ],
)
def test_harmless_environment_prefixes_pass(command: str) -> None:
    assert runs(command)


@pytest.mark.parametrize(
    "command",
    [
        "PATH=/tmp:$PATH ls",
        "LD_PRELOAD=/tmp/x.so ls",
        "LD_LIBRARY_PATH=/tmp ls",
        "BASH_ENV=/tmp/x bash -c ls",
        "ENV=/tmp/x sh -c ls",
        "GIT_CONFIG_GLOBAL=/tmp/x git status",
        "GIT_EXTERNAL_DIFF=/tmp/x git diff",
        "XDG_CONFIG_HOME=/tmp git status",
        "HOME=/tmp git status",
        "PYTHONPATH=/tmp pytest",
        "PYTHONSTARTUP=/tmp/x python",
        "PYTHONWARNINGS=ignore::x.Y python -c 1",
        "NODE_OPTIONS=--require=/tmp/x node",
        "PERL5OPT=-Mx perl -e 1",
        "RUBYOPT=-rx ruby -e 1",
        "GIT_PAGER=sh git log",
        "PAGER=/tmp/x man ls",
        "EDITOR=/tmp/x git commit",
        "PYTEST_ADDOPTS=-pevil pytest",
        "IFS=x ls",
        "FOO=1 ls",
        "LANG=/tmp/locale sort x",  # a locale path loads locale data from a file
        "LANG=$X sort x",
        "TERM=../../tmp/x git log",
        "COLUMNS=$(rm x) pytest",
    ],
)
def test_other_environment_prefixes_ask(command: str) -> None:
    asks(command)


@pytest.mark.parametrize(
    "command",
    [
        "xargs xargs",  # the inner xargs runs a command named by its input (fuzz finding)
        "xargs --a=x.txt xargs",
        "xargs env",
        "xargs nice",
        "xargs find .",  # input could add '-exec rm {} ;'
        "xargs watch ls",  # watch joins its arguments into a script
        "xargs sh",
        "find . -exec xargs \\;",
        "find . -exec env \\;",
    ],
)
def test_a_wrapper_given_arguments_at_run_time_needs_a_literal_command(command: str) -> None:
    assert "at run time" in asks(command)


def test_a_literal_command_inside_an_open_wrapper_is_still_proven() -> None:
    assert runs("xargs timeout 5 grep x") == ["grep x …"]
    assert runs("xargs xargs echo") == ["echo …"]
    assert runs("xargs sh -c 'grep x \"$@\"' _") == ["grep x $…"]


@pytest.mark.parametrize(
    ("command", "recorded"),
    [
        # a wrapper that execs its command looks the name up in PATH: a shell builtin
        # name there is a program of that name (none exists), never the builtin
        ("echo x | xargs -s100 command wc", "command wc …"),  # fuzz finding
        ("xargs eval rm", "eval rm …"),
        ("env command rm x", "command rm x"),
        ("timeout 5 builtin rm", "builtin rm"),
        ("exec command rm", "command rm"),
        ("find . -exec command rm {} +", "command rm {} …"),
        ("nice export X=1", "export X=1"),
    ],
)
def test_builtin_names_after_an_exec_wrapper_are_programs(command: str, recorded: str) -> None:
    assert runs(command)[-1] == recorded


def test_builtin_wrappers_in_the_shell_still_unwrap() -> None:
    assert runs("command exec rm x") == ["rm x"]
    assert runs("builtin command rm x") == ["rm x"]
