"""Locks in that "prove or ask" stays usable: the benign corpus of realistic agent
commands (tests/corpus/bash_benign.yaml) gets the decision each entry names under a
typical allow list, and at least 95 % of it is decided without asking."""

from __future__ import annotations

import pytest

from tests.corpus.benign import Outcome, decide_all, load_cases, summary

MIN_SHARE = 0.95
"""The issue's target: share of the benign corpus decided without asking."""


@pytest.fixture(scope="module")
def outcomes() -> list[Outcome]:
    return decide_all()


def test_the_corpus_is_large_enough() -> None:
    cases = load_cases()
    assert len(cases) >= 300
    assert len({c.command for c in cases}) == len(cases), "a command is listed twice"


def test_each_command_gets_its_expected_decision(outcomes: list[Outcome]) -> None:
    wrong = [
        f"{o.case.command!r}: {o.behavior}, expected {o.case.expect} "
        f"({'; '.join(o.problems) or o.reason})"
        for o in outcomes
        if o.behavior != o.case.expect
    ]
    assert not wrong, "\n".join(wrong)


def test_most_of_the_corpus_is_decided_without_asking(outcomes: list[Outcome]) -> None:
    share, reasons = summary(outcomes)
    assert share >= MIN_SHARE, f"{share:.1%} decided without asking; asks: {reasons.most_common()}"
