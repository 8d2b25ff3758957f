"""Locks in that a command line whose parse would be superlinear (thousands of
here-documents pending on one line: 7 s of tree-sitter holding the interpreter)
is asked about without being parsed at all, and that the everyday here-document
still is parsed and proven. The time itself is measured by
bench/bench_decision_cost.py, not here."""

from __future__ import annotations

import pytest

from orchestrator.permissions import EffectivePolicy, ToolCall, evaluate, parse_rule
from orchestrator.permissions.shell import MAX_HEREDOCS, analyse
from orchestrator.permissions.shell import analysis as analysis_module

WORST = (
    "cat "
    + "".join(f"<<E{i} " for i in range(4700))
    + "\n"
    + "".join(f"E{i}\n" for i in range(4700))
)


def _no_parse(*args: object, **kwargs: object) -> None:
    raise AssertionError("the command was parsed")


def test_thousands_of_here_documents_ask_without_being_parsed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert 60_000 < len(WORST) < 65_536  # the shape reported in issue 32
    monkeypatch.setattr(analysis_module, "parse", _no_parse)
    monkeypatch.setattr(analysis_module, "disagreement", _no_parse)
    monkeypatch.setattr(analysis_module, "loose_commands", _no_parse)
    policy = EffectivePolicy(rules=(parse_rule("Bash(cat:*)", "allow", "test", "test"),))
    call = ToolCall(tool_name="Bash", tool_input={"command": WORST})
    decision = evaluate(policy, call).decision
    assert decision.behavior == "ask"
    assert f"more than {MAX_HEREDOCS} here-document operators" in decision.reason


def test_here_documents_up_to_the_cap_are_parsed_and_proven() -> None:
    command = "".join(f"cat > f{i}.txt <<'EOF'\nline {i}\nEOF\n" for i in range(MAX_HEREDOCS))
    result = analyse(command)
    assert result.problems == []
    assert len(result.commands) == MAX_HEREDOCS
    assert analyse(command + "cat <<E\nx\nE\n").problems[0].startswith("more than")
