"""The benign Bash corpus: realistic agent commands and how the analyser decides them
under a typical allow list (`bash_benign_policy.yaml`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from orchestrator.permissions import EffectivePolicy, ToolCall, evaluate
from orchestrator.permissions.rules import parse_rule
from orchestrator.permissions.sources import PolicySource, merge

HERE = Path(__file__).parent
CORPUS = HERE / "bash_benign.yaml"
POLICY = HERE / "bash_benign_policy.yaml"


@dataclass(frozen=True)
class Case:
    command: str
    expect: str
    why: str


@dataclass(frozen=True)
class Outcome:
    case: Case
    behavior: str
    problems: tuple[str, ...]
    reason: str


def load_cases() -> list[Case]:
    data: dict[str, Any] = yaml.safe_load(CORPUS.read_text())
    cases = []
    for item in data["commands"]:
        if isinstance(item, str):
            cases.append(Case(item, "allow", ""))
        else:
            cases.append(Case(item["cmd"], item["expect"], item.get("why", "")))
    return cases


def load_policy() -> EffectivePolicy:
    data: dict[str, Any] = yaml.safe_load(POLICY.read_text())
    rules = [parse_rule(r, "allow", "corpus", "bash_benign_policy.yaml") for r in data["allow"]]
    return merge([PolicySource("corpus", rules, data["defaultMode"])])


def decide_all() -> list[Outcome]:
    policy = load_policy()
    out = []
    for case in load_cases():
        exp = evaluate(policy, ToolCall(tool_name="Bash", tool_input={"command": case.command}))
        out.append(Outcome(case, exp.decision.behavior, exp.problems, exp.decision.reason))
    return out


def summary(outcomes: list[Outcome]) -> tuple[float, Counter[str]]:
    """Share decided without asking, and the most common reasons for the asks."""
    asked = [o for o in outcomes if o.behavior == "ask"]
    reasons: Counter[str] = Counter(_reason_class(o) for o in asked)
    return 1 - len(asked) / len(outcomes), reasons


def _reason_class(outcome: Outcome) -> str:
    if outcome.problems:
        text = outcome.problems[0]
        return text.split(" (")[0].split(":")[0][:70]
    return outcome.reason.split(":")[0][:70]
