"""Claude Code's flag spellings on `warden run` read as Claude Code reads them: a rule
list in one `--allowedTools` value, and `--output-format` beside `--json`."""

from __future__ import annotations

import click
import pytest

from orchestrator.commands._frame import output_format
from orchestrator.permissions.rules import split_tool_rules


@pytest.mark.parametrize(
    ("value", "rules"),
    [
        ("Read", ["Read"]),
        ("Read,Edit", ["Read", "Edit"]),
        ("Bash(git log:*) Bash(git diff:*)", ["Bash(git log:*)", "Bash(git diff:*)"]),
        (
            "Bash(npm run test, lint:*),  Read(./src/**)",
            ["Bash(npm run test, lint:*)", "Read(./src/**)"],
        ),
        ("  ", []),
        ("Bash(unclosed x", ["Bash(unclosed x"]),
    ],
)
def test_tool_rule_lists_split_outside_parentheses(value: str, rules: list[str]) -> None:
    assert split_tool_rules(value) == rules


def test_output_format_and_json_agree_or_refuse() -> None:
    assert output_format(False, None) == "text"
    assert output_format(True, None) == "stream-json"
    assert output_format(False, "json") == "json"
    assert output_format(True, "stream-json") == "stream-json"
    with pytest.raises(click.UsageError, match="contradict"):
        output_format(True, "text")
