"""An apply review on a real pseudo-terminal: the diff is paged (Enter shows the next
page), every name and line a subagent wrote reaches the terminal inert (its ANSI
escapes, OSC hyperlinks and bidi overrides never arrive as such; a newline in a name
cannot start a line that looks like warden's), and the yes is bound to the change
set's hash; a no carries the reason typed. Without a terminal the whole diff is
printed at once, unpaged."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import sys
from pathlib import Path

import pytest

from orchestrator.apply.changeset import ContentStore
from orchestrator.apply.render import render_change_set
from orchestrator.ui.approval_prompt import TerminalApprover
from orchestrator.ui.review_prompt import screen_lines
from tests.integration.terminal import PagingPerson, run_on_a_terminal
from tests.review_fixtures import LONG_FILE_LINES, hostile_change_set, hostile_review

ROOT = Path(__file__).resolve().parents[3]
ROWS, COLUMNS = 30, 100
DEADLINE_S = 120
SGR = re.compile(rb"\x1b\[[0-9;]*m")
"""rich's own colour codes, the only escapes warden itself writes here."""


def _ask_on_a_terminal(
    tmp_path: Path, answers: list[bytes]
) -> tuple[dict[str, object], bytes, int]:
    out_file = tmp_path / "answer.json"
    person = PagingPerson(
        answers, prompts=(b"[v]iew the diff again > ", b"Reason (told to the agent): ")
    )
    env = {**os.environ, "COLUMNS": str(COLUMNS), "LINES": str(ROWS), "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    code, _ = run_on_a_terminal(
        [sys.executable, "-m", "tests.review_fixtures", str(tmp_path / "store"), str(out_file)],
        env, ROOT, person.feed, DEADLINE_S,
    )  # fmt: skip
    assert code == 0, person.out[-3000:]
    return json.loads(out_file.read_text()), person.out, person.pages


def test_a_yes_on_a_terminal_is_bound_to_the_hash_it_showed(tmp_path: Path) -> None:
    answer, out, pages = _ask_on_a_terminal(tmp_path, [b"y"])
    sha = hostile_change_set(ContentStore(tmp_path / "store")).sha256
    assert answer["behavior"] == "allow" and answer["bound_to"] == sha
    assert answer["decided_by"] == "terminal:tester"
    assert pages >= 2  # the long file made it page
    # Container text never reaches the terminal as escapes or bidi controls.
    for raw in (b"\x1b[2J", b"\x1b[H", b"\x1b]8", b"\x07", "\u202e".encode(), "\u200b".encode()):
        assert raw not in out, raw
    shown = SGR.sub(b"", out).decode()
    assert f"Change set {sha}" in shown
    assert (
        "clear \\x1b[2J\\x1b[H\\x1b]8;;http://evil\\x07link\\x1b]8;;\\x07 \\u202eexe.gnp" in shown
    )
    assert "invoice\\u202etxt.exe" in shown and "! name in ASCII: p\\u0430ypal.py" in shown
    assert "── notes\\n── fake.py" in shown
    lines = shown.replace("\r", "").split("\n")
    assert not any(line.startswith("── fake.py") for line in lines)
    assert "NEW EXECUTABLE BIT" in shown and "absolute path" in shown
    assert "edit the app \\x1b[31m<b>now</b>" in shown


def test_a_no_on_a_terminal_carries_its_reason_and_no_hash(tmp_path: Path) -> None:
    answer, _, _ = _ask_on_a_terminal(tmp_path, [b"n", b"the link is not ok"])
    assert answer["behavior"] == "deny" and answer["bound_to"] == ""
    assert answer["reason"] == "the link is not ok"


async def test_without_a_terminal_the_diff_is_printed_whole(tmp_path: Path) -> None:
    review = hostile_review(ContentStore(tmp_path / "store"))
    out = io.StringIO()
    approver = TerminalApprover(stdin=io.StringIO("v\ny\n"), stdout=out, user="ci")
    answer = await asyncio.wait_for(approver.approve(review), 30)
    assert answer.behavior == "allow" and answer.bound_to == review.change_set.sha256
    text = out.getvalue()
    assert "[Enter] next page" not in text
    assert text.count(f"long line {LONG_FILE_LINES - 1}") == 2  # shown, then shown again (v)
    assert "\x1b" not in text and "\u202e" not in text


@pytest.mark.parametrize("width", [20, 37, 80])
def test_wrapped_content_keeps_its_gutter(tmp_path: Path, width: int) -> None:
    store = ContentStore(tmp_path / "store")
    view = render_change_set(hostile_change_set(store), store)
    for line, kind in screen_lines(view, width):
        assert len(line) <= width or kind == "", line
        if kind in "+-" and kind:
            assert line.lstrip(" ")[:1] in ("│", "┆"), line
        assert not re.search(r"\\(u[0-9a-f]{0,3}|x[0-9a-f]?)$", line), line  # an escape split
