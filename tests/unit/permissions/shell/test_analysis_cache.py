"""Locks in the analyser's cache: a repeated command is parsed once, every caller gets
its own copy, a result an unexpected failure shaped is never kept, the cache stays
bounded, and what a path resolves to on the host is checked on every call (a link
planted after the first decision is seen by the second)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.permissions import ToolCall, evaluate
from orchestrator.permissions.rules import parse_rule
from orchestrator.permissions.shell import analysis, parser
from orchestrator.permissions.shell.analysis import (
    ANALYSIS_CACHE_MAX_CHARS,
    ANALYSIS_CACHE_SIZE,
    analyse,
)
from orchestrator.permissions.sources import PolicySource, merge


@pytest.fixture(autouse=True)
def empty_cache() -> None:
    analysis._cached_analysis.cache_clear()


def _count_parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    parsed: list[str] = []
    real = parser.parse

    def counting(src: str, dialect: str, depth: int) -> parser.Unit:
        parsed.append(src)
        return real(src, dialect, depth)

    monkeypatch.setattr(analysis, "parse", counting)
    return parsed


def test_a_repeated_command_is_parsed_once_and_each_caller_gets_its_own_copy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parsed = _count_parses(monkeypatch)
    first = analyse("git status > out.txt")
    first.commands.clear()
    first.writes.append("/etc/passwd")
    first.problems.append("changed by a caller")
    second = analyse("git status > out.txt")
    assert parsed == ["git status > out.txt"]
    assert [c.words for c in second.commands] == [("git", "status")]
    assert second.writes == ["out.txt"] and second.understood
    assert analyse("git status > out.txt ") is not second  # another string, parsed anew
    assert len(parsed) == 2


def test_a_result_shaped_by_an_unexpected_failure_is_not_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = analysis._Analyser.unit

    def too_deep(self: object, *args: object) -> None:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(analysis._Analyser, "unit", too_deep)
    failed = analyse("echo hi")
    assert not failed.understood and "RecursionError" in failed.problems[0]
    monkeypatch.setattr(analysis._Analyser, "unit", real)
    assert analyse("echo hi").understood  # analysed again, not the failure replayed


def test_the_cache_is_bounded_and_long_commands_are_not_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for i in range(ANALYSIS_CACHE_SIZE + 20):
        analyse(f"echo {i}")
    assert analysis._cached_analysis.cache_info().currsize == ANALYSIS_CACHE_SIZE
    parsed = _count_parses(monkeypatch)
    long = "echo " + "a" * ANALYSIS_CACHE_MAX_CHARS
    analyse(long)
    analyse(long)
    assert parsed == [long, long]


def test_a_link_planted_after_the_first_decision_is_seen_by_the_next(tmp_path: Path) -> None:
    rules = [
        parse_rule("Bash(cat:*)", "allow", "test", "t"),
        parse_rule("Read(/.env)", "deny", "test", "t"),
    ]
    policy = merge([PolicySource("test", rules, "default")])
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / ".env").write_text("SECRET=1\n")
    (ws / "src" / "a.txt").write_text("notes\n")

    def decide(command: str) -> str:
        call = ToolCall(tool_name="Bash", tool_input={"command": command})
        return evaluate(policy, call, workspace_host=ws).decision.behavior

    assert decide("cat src/a.txt") == "allow"
    assert decide("cat < src/a.txt") == "allow"
    (ws / "src" / "a.txt").unlink()
    os.symlink("../.env", ws / "src" / "a.txt")  # the same command now reads the secret
    assert decide("cat src/a.txt") == "deny"
    assert decide("cat < src/a.txt") == "deny"
