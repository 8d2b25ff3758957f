"""The published list of event kinds is the one source of truth: every kind warden
emits is in `EVENT_KINDS` (readers and the docs rely on it), and the task kinds the
event log, the display, the result and the traces use are that same list."""

from __future__ import annotations

import re
from pathlib import Path

from orchestrator.results import models
from orchestrator.runtime import events
from tests.conftest import REPO_ROOT

EMITTED = re.compile(r"\b_?emit(?:_for)?\(\s*\"([a-z_]+)\"")


def _emitted_kinds() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted((REPO_ROOT / "orchestrator").rglob("*.py")):
        for match in EMITTED.finditer(path.read_text(encoding="utf-8")):
            found.setdefault(match.group(1), []).append(str(path.relative_to(REPO_ROOT)))
    return found


def test_every_emitted_kind_is_published() -> None:
    emitted = _emitted_kinds()
    assert len(emitted) >= 8, emitted  # the scan sees the emitters (gate, task host, ...)
    unpublished = {k: v for k, v in emitted.items() if k not in models.EVENT_KINDS}
    assert unpublished == {}


def test_task_kinds_have_one_definition() -> None:
    assert events.TASK_EVENT_KINDS is models.TASK_EVENT_KINDS
    assert set(models.TASK_END_KINDS) < set(models.TASK_EVENT_KINDS) < set(models.EVENT_KINDS)
    copies = [
        str(path.relative_to(REPO_ROOT))
        for path in (REPO_ROOT / "orchestrator").rglob("*.py")
        if path != Path(models.__file__)
        and re.search(r'= \(\s*"task_completed"', path.read_text(encoding="utf-8"))
    ]
    assert copies == []
