"""warden decides as Claude Code itself does: a fixed slice of the differential set
(`python -m tests.differential` runs all of it) against the pinned Claude Code CLI,
run offline in a network namespace with only `lo` and pointed at warden's scripted
model. Claude Code's outcomes are measured afresh (no cache)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.differential import compare as differential
from tests.differential.cases import SLICE, all_groups

pytestmark = pytest.mark.integration


def test_the_ci_slice_agrees_with_claude_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert os.geteuid() == 0, "the differential test needs root for unshare -n -m"
    claude = differential.claude_binary()  # installed by .ci/setup (npm, pinned)
    monkeypatch.setattr(differential, "CACHE", tmp_path)
    groups = [g for g in all_groups() if g["id"] in SLICE]
    summary = differential.compare(groups, claude, use_cache=False)
    report = "\n".join(summary.lines())
    assert summary.compared >= 60, report
    assert not summary.fail_open, report
    assert summary.agreement >= 0.97, report
