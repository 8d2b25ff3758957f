"""Locks in that what an allowed program reads, writes or runs through an option or
a script is decided like its operands (issue 32): `sort -o`, `sed w/r`, `tar -f`,
`--files0-from` and git's path operands meet the Read and Edit rules; options that
run commands, move the program elsewhere or reach a file through a process's
directory ask; and the everyday forms of the same programs stay allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config import Settings
from orchestrator.permissions import ToolCall, evaluate, load_policy
from orchestrator.permissions.policy import EffectivePolicy
from orchestrator.permissions.program_options import effects
from orchestrator.permissions.shell import analyse

PROGRAMS = ("ls", "cat", "sed", "awk", "tar", "sort", "find", "wc", "du", "ln", "git", "head")
DENY = ("Read(./.env)", "Read(./secrets/**)", "Edit(./protected/**)")


@pytest.fixture
def policy(settings: Settings, workspace: Path) -> EffectivePolicy:
    return load_policy(
        settings, workspace, allow=tuple(f"Bash({p}:*)" for p in PROGRAMS), deny=DENY
    )


def decide(policy: EffectivePolicy, workspace: Path, command: str) -> str:
    call = ToolCall(tool_name="Bash", tool_input={"command": command})
    return evaluate(policy, call, workspace_host=workspace).decision.behavior


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        # files written or read by an option or a script command meet the rules
        ("sort -o protected/p x", "deny"),
        ("sort --output=protected/p x", "deny"),
        ("sed -n 'w protected/p' x", "deny"),
        ("sed 's/a/b/w protected/p' x", "deny"),
        ("sed '1r .env' x", "deny"),
        ("sed -e '/x/R secrets/k' x", "deny"),
        ("tar -cf - .env", "deny"),
        ("tar cf protected/p x", "deny"),
        ("wc --files0-from=.env", "deny"),
        ("du --files0-from .env", "deny"),
        ("git diff --no-index /dev/null .env", "deny"),
        ("git show HEAD:.env", "deny"),
        ("git log -p -- secrets/k", "deny"),
        # options that run commands, move the program, or read lists ask
        ("sed '1e rm f' x", "ask"),
        ("sed 's/x/id/e' x", "ask"),
        ("sed -f script.sed x", "ask"),
        ("awk 'BEGIN{system(\"rm f\")}'", "ask"),
        ("awk '{print > \"protected/p\"}' x", "ask"),
        ("awk '{\"cat .env\" | getline v}'", "ask"),
        ("awk 'BEGIN{while ((getline l < \".env\") > 0) print l}'", "ask"),
        ("awk -f prog.awk x", "ask"),
        ("tar -I rm -xf t.tar", "ask"),
        ("tar --to-command=sh -xf t.tar", "ask"),
        ("tar --checkpoint=1 --checkpoint-action=exec=sh -cf /tmp/t x", "ask"),
        ("tar -C protected -xf t.tar", "ask"),
        ("tar -xf t.tar", "ask"),  # unpacks names known only at run time
        ("sort --compress-program=sh x", "ask"),
        ("find protected -delete", "ask"),
        ("git log -1 --output=.git/config", "ask"),
        ("git diff --output=x", "ask"),
        ("git -c core.pager=sh log", "ask"),
        ("git --exec-path=/tmp log", "ask"),
        ("git --git-dir=/tmp/x log", "ask"),
        ("git --work-tree=/ diff", "ask"),
        ("git -C /tmp diff", "ask"),
        ("git --config-env=core.pager=X diff", "ask"),
        ("git log --upload-pack=x", "ask"),
        ("git grep -O foo", "ask"),
        ("git diff --no-index a b", "ask"),
        ("git diff /etc/passwd x", "ask"),
        # paths through a process's directory or a run-time tilde ask
        ("cat /proc/self/cwd/notes", "ask"),
        ("cat /proc/self/root/workspace/notes", "ask"),
        ("cat /proc/1/cwd/notes", "ask"),
        ("cat /dev/fd/3/notes 3<.", "ask"),
        ("cat ~+/notes", "ask"),
        ("cat ~-/notes", "ask"),
        ("cat ~0/notes", "ask"),
        ("head < /proc/self/cwd/notes", "ask"),
        # a link made earlier in the same line
        ("ln -s secret l && cat l", "ask"),
        ("ln secret h; cat h", "ask"),
        # everyday forms stay allowed
        ("ls -la", "allow"),
        ("cat notes.txt", "allow"),
        ("sed 's/error/warning/g' x", "allow"),
        ("sed -n '1,20p;/^#/d' x", "allow"),
        ("sed -i.bak -e 's|a|b|' -e '/x/{s/y/z/;p}' x", "allow"),
        ("awk '{print $1}' x", "allow"),
        ("awk -F: '$3 > 100 {n++} END {print n}' x", "allow"),
        ("tar -tzf t.tgz", "allow"),
        ("tar -czf out.tgz src", "allow"),
        ("sort -u -k2,2 -t, x", "allow"),
        ("find . -name '*.py' -newer x", "allow"),
        ("wc -l x y", "allow"),
        ("git status", "allow"),
        ("git diff --stat HEAD~1", "allow"),
        ("git log --oneline -20 -- src", "allow"),
        ("git show HEAD:src/a.py", "allow"),
        ("ls; ln -s a b", "allow"),
        ("cat ~/notes", "allow"),
    ],
)
def test_options_and_scripts_are_decided_like_operands(
    policy: EffectivePolicy, workspace: Path, command: str, expected: str
) -> None:
    assert decide(policy, workspace, command) == expected


def test_a_sed_script_it_cannot_read_asks() -> None:
    found = effects(analyse("sed 'K' x").commands[0])
    assert found.problems and "not understood" in found.problems[0]
