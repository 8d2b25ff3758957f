"""Locks in path rules: Claude Code's specifier forms, gitignore globbing, `..`
normalisation, absolute vs relative spellings, and symlinks inside the workspace
(real links in a tmp dir) that must not dodge a deny rule or widen an allow rule."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from orchestrator.behavior import Behavior
from orchestrator.permissions import EffectivePolicy, ToolCall, evaluate
from orchestrator.permissions.rules import parse_rule
from orchestrator.permissions.sources import PolicySource, merge


def policy(
    allow: Sequence[str] = (),
    deny: Sequence[str] = (),
    ask: Sequence[str] = (),
    mode: str = "default",
) -> EffectivePolicy:
    rules = [parse_rule(r, "allow", "test", "t") for r in allow]
    rules += [parse_rule(r, "deny", "test", "t") for r in deny]
    rules += [parse_rule(r, "ask", "test", "t") for r in ask]
    return merge([PolicySource("test", rules, mode)])  # type: ignore[arg-type]


def decide(
    pol: EffectivePolicy, tool: str, path: str, host: Path | None = None, **extra: str
) -> Behavior:
    key = "file_path" if tool in ("Read", "Write", "Edit") else "path"
    inp: dict[str, str] = {key: path, **extra}
    if tool == "Write":
        inp.setdefault("content", "x")
    if tool in ("Glob", "Grep"):
        inp.setdefault("pattern", "*")
    return evaluate(
        pol, ToolCall(tool_name=tool, tool_input=dict(inp)), workspace_host=host
    ).decision.behavior


ENV = policy(deny=["Read(./.env)"])
ROOT_ENV = policy(deny=["Read(/.env)"])
"""Anchored at the workspace root: `sub/.env` is not this file."""


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (".env", "deny"),
        ("./.env", "deny"),
        ("/workspace/.env", "deny"),
        ("//workspace/.env", "deny"),
        ("src/../.env", "deny"),
        ("/workspace/src/../.env", "deny"),
        ("/workspace/./.env", "deny"),
        ("/tmp/../workspace/.env", "deny"),
        ("src/.env", "deny"),  # gitignore, as Claude Code: no inner slash, so any depth
        (".env.example", "allow"),
        ("README.md", "allow"),
    ],
)
def test_dot_env_spellings(path: str, expected: Behavior) -> None:
    assert decide(ENV, "Read", path) == expected


@pytest.mark.parametrize(
    ("rule", "path", "matched"),
    [
        ("Read(.env)", "/workspace/a/b/.env", True),  # no slash: anywhere
        ("Read(*.pem)", "keys/server.pem", True),
        ("Read(~/.ssh/**)", "/root/.ssh/id_rsa", True),
        ("Read(~/.ssh/**)", "/home/agent/.ssh/id_ed25519", True),
        ("Read(~/.ssh/**)", "~/.ssh/config", True),
        ("Read(//etc/shadow)", "/etc/shadow", True),
        ("Read(//etc/shadow)", "/workspace/etc/shadow", False),
        ("Read(/etc/shadow)", "/workspace/etc/shadow", True),  # Claude Code: project-relative
        ("Read(/etc/shadow)", "/etc/shadow", True),  # ...and, for a deny, also absolute
        ("Read(secrets)", "secrets/db/password", True),  # a directory covers its contents
        ("Read(/workspace/secrets/*)", "/workspace/secrets/a", True),
        ("Read(src/*.py)", "src/pkg/a.py", False),  # `*` stays within one component
        ("Read(src/**/*.py)", "src/pkg/a.py", True),
    ],
)
def test_deny_specifier_forms(rule: str, path: str, matched: bool) -> None:
    assert (decide(policy(deny=[rule]), "Read", path) == "deny") is matched


def test_allow_slash_path_is_project_relative_only() -> None:
    pol = policy(allow=["Edit(/src/**)"])
    assert decide(pol, "Edit", "/workspace/src/a.py", old_string="a", new_string="b") == "allow"
    assert decide(pol, "Edit", "/src/a.py", old_string="a", new_string="b") == "ask"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("out/a.txt", "allow"),
        ("/workspace/out/a.txt", "allow"),
        ("out/../src/a.txt", "ask"),
        ("/workspace/out/../../etc/x", "ask"),
        ("/workspace/outside.txt", "ask"),
    ],
)
def test_write_allow_cannot_be_escaped_with_dotdot(path: str, expected: Behavior) -> None:
    assert decide(policy(allow=["Write(/workspace/out/*)"]), "Write", path) == expected


def test_edit_and_write_rules_cover_each_other() -> None:
    assert decide(policy(deny=["Edit(src/**)"]), "Write", "src/a.py") == "deny"
    assert (
        decide(policy(allow=["Write(src/**)"]), "Edit", "src/a.py", old_string="a", new_string="b")
        == "allow"
    )


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / ".env").write_text("SECRET=1\n")
    (root / "src" / "ok.py").write_text("")
    os.symlink("../.env", root / "src" / "link")  # relative link to the secret
    os.symlink("/workspace/.env", root / "src" / "abslink")  # absolute, a container path
    os.symlink("..", root / "src" / "up")  # a directory link
    os.symlink("loop2", root / "src" / "loop1")
    os.symlink("loop1", root / "src" / "loop2")
    os.symlink("/etc", root / "etc")  # points outside the workspace
    return root


@pytest.mark.parametrize(
    "path", ["src/link", "/workspace/src/abslink", "src/up/.env", "src/up/src/link"]
)
def test_symlinks_cannot_dodge_a_deny(ws: Path, path: str) -> None:
    assert decide(ROOT_ENV, "Read", path, ws) == "deny"
    assert (
        decide(ROOT_ENV, "Read", path, None) == "allow"
    )  # lexically it is not .env: the host view matters


def test_symlink_cannot_widen_an_allow(ws: Path) -> None:
    pol = policy(allow=["Edit(src/**)"])
    assert decide(pol, "Write", "src/ok.py", ws) == "allow"
    assert decide(pol, "Write", "src/link", ws) == "ask"  # really writes /workspace/.env
    assert decide(pol, "Write", "src/loop1", ws) == "ask"  # a loop is never allowed
    assert decide(policy(deny=["Read(//etc/**)"]), "Read", "etc/passwd", ws) == "deny"


def test_accept_edits_allows_edits_inside_the_workspace_only(ws: Path) -> None:
    pol = policy(mode="acceptEdits")
    assert decide(pol, "Write", "src/new.py", ws) == "allow"
    assert decide(pol, "Write", "/tmp/x", ws) == "ask"
    assert decide(pol, "Write", "etc/x", ws) == "ask"  # through a link to /etc
    extra = merge([PolicySource("t", [], "acceptEdits", ["/data"])])
    assert decide(extra, "Write", "/data/x", ws) == "allow"


def test_grep_over_a_tree_holding_a_denied_file_asks(ws: Path) -> None:
    assert decide(ENV, "Grep", "/workspace", ws) == "ask"
    assert decide(ENV, "Grep", "/workspace/src", ws) == "ask"  # src/.env would be denied
    assert decide(ROOT_ENV, "Grep", "/workspace/src", ws) == "allow"
    assert decide(policy(deny=["Read(.env)"]), "Grep", "src/ok.py", ws) == "allow"  # one file
    assert decide(policy(deny=["Read(.env)"]), "Grep", "src/ok.py", None) == "ask"  # unknown
    assert decide(policy(deny=["Read(.env)"]), "Grep", "src/link", ws) == "deny"
    assert decide(ENV, "Glob", "/workspace", ws) == "allow"  # lists names, reads nothing
    assert (
        decide(policy(deny=["Read(src/**)"]), "Glob", "/workspace", ws, pattern="src/**") == "deny"
    )
    etc = policy(deny=["Read(//etc/**)"])
    assert decide(etc, "Glob", "/workspace/src", ws, pattern="../../etc/*") == "deny"
    assert decide(etc, "Glob", "/workspace", ws, pattern="/etc/pass*") == "deny"
