"""`warden apply TASK` on a real pseudo-terminal: the person reads the rendered
review (the change set's sha256 and its diff, paged, every line inert: an ANSI
title sequence and a bidi override written by the subagent are shown escaped,
never sent to the terminal), and only their `y` applies it, bound to the hash
shown; `n` leaves the workspace as it was and the change set waiting. The review is
the run's own terminal review (`ui.review_prompt`): its pages, question and wrap."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrator.apply.changeset import ApplyDecision
from orchestrator.apply.compute import compute_change_set
from orchestrator.apply.pending import pending
from orchestrator.apply.review import record
from orchestrator.apply.workcopy import content_store, make_working_copy
from orchestrator.ui.review_prompt import REVIEW_CHOICES
from tests.conftest import warden_argv, warden_env
from tests.integration.terminal import PagingPerson, run_on_a_terminal

HOSTILE = "see \x1b]0;pwned\x07\u202egnp.exe\n"
SHOWN = "│+see \\x1b]0;pwned\\x07\\u202egnp.exe"
ROWS = 12


@pytest.mark.parametrize("choice", [b"y", b"n"])
def test_a_person_reviews_and_applies_at_the_terminal(tmp_path: Path, choice: bytes) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    body = "".join(f"line {i}\n" for i in range(30))
    (ws / "a.txt").write_text(body)
    state = tmp_path / "state"
    copy = make_working_copy(ws, state, run_id="r", task_id="sa_1", agent="coder", session="s")
    (copy.work / "a.txt").write_text(body.replace("line 3\n", "LINE 3\n").replace("line 25\n", ""))
    (copy.work / "note.txt").write_text(HOSTILE)
    change_set, _ = compute_change_set(copy, content_store(state))
    waiting = ApplyDecision(
        task_id="sa_1", change_set_sha256=change_set.sha256, outcome="pending", decided_by="never"
    )
    record(copy, change_set, waiting)
    person = PagingPerson([choice], prompts=(b"[v]iew",))
    env = warden_env(WARDEN_STATE_DIR=str(state), COLUMNS="100", LINES=str(ROWS), TERM="xterm")
    env.pop("CI", None)
    code, _ = run_on_a_terminal(warden_argv("apply", "sa_1"), env, tmp_path, person.feed, 120)
    shown = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", person.out).decode(errors="replace")
    assert change_set.sha256 in shown  # the whole hash the yes binds to
    assert SHOWN in shown and "│+LINE 3" in shown and "│-line 25" in shown
    assert b"\x1b]0;pwned" not in person.out and "\u202e".encode() not in person.out
    assert person.pages >= 1  # the review did not fit one page of 12 rows
    if choice == b"y":
        assert code == 0, shown[-2000:]
        assert (ws / "note.txt").read_text() == HOSTILE
        assert "LINE 3" in (ws / "a.txt").read_text()
        assert pending(state) == []
    else:
        assert code == 1, shown[-2000:]
        assert not (ws / "note.txt").exists() and (ws / "a.txt").read_text() == body
        (item,) = pending(state)
        assert item.change_set is not None and item.change_set.sha256 == change_set.sha256


NARROW_COLUMNS, NARROW_ROWS = 60, 20
LONG = "x = '" + "long " * 40 + "'\n"


@pytest.mark.parametrize("choice", [b"y", b"n"])
def test_warden_apply_pages_as_the_run_does(tmp_path: Path, choice: bytes) -> None:
    ws, state = tmp_path / "ws", tmp_path / "state"
    ws.mkdir()
    before = "".join(f"line {i}\n" for i in range(40))
    (ws / "app.py").write_text(before)
    copy = make_working_copy(ws, state, run_id="r", task_id="sa_1", agent="coder", session="s")
    after = LONG + "".join(f"LINE {i}\n" for i in range(40))
    (copy.work / "app.py").write_text(after)
    change_set, _ = compute_change_set(copy, content_store(state))
    decision = ApplyDecision(
        task_id="sa_1", change_set_sha256=change_set.sha256, outcome="pending", decided_by="never"
    )
    record(copy, change_set, decision)
    person = PagingPerson([choice], prompts=(b"[v]iew",))
    env = warden_env(
        WARDEN_STATE_DIR=str(state), WARDEN_CONFIG_DIR=str(tmp_path / "config"),
        COLUMNS=str(NARROW_COLUMNS), LINES=str(NARROW_ROWS), TERM="xterm-256color",
    )  # fmt: skip
    env.pop("CI", None)
    code, _ = run_on_a_terminal(warden_argv("apply", "sa_1"), env, ws, person.feed, 300)
    shown = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", person.out).decode(errors="replace")
    # The run's pager: its page prompt, its question (naming the workspace), its wrap.
    assert person.pages >= 3, shown
    assert "[Enter] next page, [q] stop and answer" in shown
    question = re.sub(r"\s+", "", shown)  # the terminal may wrap the question
    asked = f"Apply change set {change_set.sha256[:16]}… to {ws}? {REVIEW_CHOICES}"
    assert re.sub(r"\s+", "", asked) in question
    assert "┆+" in shown  # the long line's wrapped pieces keep their gutter
    assert "Reason (told to the agent)" not in shown
    if choice == b"y":
        assert code == 0, shown[-2000:]
        assert (ws / "app.py").read_text() == after
    else:
        assert code == 1, shown[-2000:]
        assert "keeps waiting" in shown
        assert (ws / "app.py").read_text() == before
