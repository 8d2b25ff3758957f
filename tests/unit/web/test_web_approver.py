"""The page as an approver: it shows a question as the terminal does, the first
answer wins and a second is told who answered, "always" writes only the rule the
page showed, a deny carries the person's reason, and the audit names `web:NAME`.
The page's script puts data on the page as text only."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from orchestrator.jsontypes import JSONObject, input_hash
from orchestrator.permissions.approvers import ApprovalAnswer, ApprovalQuestion
from orchestrator.ui.question_text import render_question
from orchestrator.web.approver import (
    PAGE_MORE,
    PAGE_WIDTH,
    AlreadyAnsweredError,
    AnswerRequest,
    UnknownQuestionError,
    WebApprover,
    question_view,
)
from tests.json_shapes import arr, obj

STATIC = Path(__file__).resolve().parents[3] / "orchestrator" / "web" / "static"


def _question(command: str = "touch x", rule: str = "Bash(touch x)") -> ApprovalQuestion:
    tool_input: JSONObject = {"command": command}
    return ApprovalQuestion(
        task_id="sa_child", agent_type="bash", description="child \u202etxt.exe",
        chain=("sa_lead", "sa_child"), chain_agents=("general-purpose", "bash"),
        chain_descriptions=("lead", "child \u202etxt.exe"), run_id="run_1",
        always_rule=rule, always_file="/w/.claude/settings.local.json", tool_name="Bash",
        tool_input=tool_input, input_hash=input_hash("Bash", tool_input),
        asked_by="mode: default", reason="Bash needs approval",
    )  # fmt: skip


async def _asked(
    approver: WebApprover, q: ApprovalQuestion
) -> tuple[asyncio.Task[ApprovalAnswer], str]:
    task = asyncio.create_task(approver.approve(q))
    await asyncio.sleep(0)
    return task, approver.pending()[-1].qid


async def test_the_first_answer_wins_and_a_second_learns_who() -> None:
    approver = WebApprover()
    task, qid = await _asked(approver, _question())
    view = approver.state("run_1")
    assert [obj(q)["id"] for q in arr(view["open"])] == [qid]
    assert approver.state("run_2")["open"] == []
    answer = approver.answer(qid, AnswerRequest(choice="session", user="alice"))
    assert (await task) == answer
    assert (answer.behavior, answer.scope, answer.decided_by) == ("allow", "session", "web:alice")
    with pytest.raises(AlreadyAnsweredError, match="web:alice"):
        approver.answer(qid, AnswerRequest(choice="deny", user="bob"))
    assert approver.state("run_1") == {
        "open": [],
        "answered": [{"id": qid, "decided_by": "web:alice"}],
    }
    with pytest.raises(UnknownQuestionError):
        approver.answer("nope", AnswerRequest(choice="once", user="bob"))


async def test_deny_carries_the_reason_and_always_only_the_shown_rule() -> None:
    approver = WebApprover()
    task, qid = await _asked(approver, _question())
    denied = approver.answer(qid, AnswerRequest(choice="deny", user="bob", reason="not today"))
    assert (await task).reason == "not today" and denied.decided_by == "web:bob"

    task, qid = await _asked(approver, _question())
    with pytest.raises(ValueError, match="rule the page showed"):
        approver.answer(qid, AnswerRequest(choice="always", user="bob", rule="Bash(*)"))
    answer = approver.answer(qid, AnswerRequest(choice="always", user="bob", rule="Bash(touch x)"))
    assert (await task).scope == "always" and answer.behavior == "allow"

    task, qid = await _asked(approver, _question(rule=""))
    with pytest.raises(ValueError, match="not offered"):
        approver.answer(qid, AnswerRequest(choice="always", user="bob", rule=""))
    task.cancel()


async def test_an_answer_elsewhere_takes_the_question_off_the_page() -> None:
    approver = WebApprover()
    task, qid = await _asked(approver, _question())
    approver.withdraw(qid, ApprovalAnswer(behavior="allow", channel="terminal", person="carol"))
    with pytest.raises(asyncio.CancelledError):
        await task
    with pytest.raises(AlreadyAnsweredError, match="terminal:carol"):
        approver.answer(qid, AnswerRequest(choice="once", user="bob"))


async def test_as_a_hub_channel_the_page_learns_who_answered_first() -> None:
    from orchestrator.permissions.approval_hub import ApproverHub

    web, gate = WebApprover(), asyncio.Event()

    class Terminal:
        async def approve(self, q: ApprovalQuestion) -> ApprovalAnswer:
            await gate.wait()
            return ApprovalAnswer(behavior="deny", reason="no", channel="terminal", person="carol")

    hub = ApproverHub([web, Terminal()])
    asking = asyncio.create_task(hub.approve(_question()))
    await asyncio.sleep(0.01)
    (qid,) = [p.qid for p in web.pending()]
    gate.set()
    assert (await asking).decided_by == "terminal:carol"
    await asyncio.sleep(0)
    assert web.state("run_1") == {
        "open": [],
        "answered": [{"id": qid, "decided_by": "terminal:carol"}],
    }
    with pytest.raises(AlreadyAnsweredError, match="terminal:carol"):
        web.answer(qid, AnswerRequest(choice="once", user="bob"))

    # ... and when the page answers first, the hub's answer is the page's.
    asking = asyncio.create_task(hub.approve(_question()))
    gate.clear()
    await asyncio.sleep(0.01)
    (qid,) = [p.qid for p in web.pending()]
    web.answer(qid, AnswerRequest(choice="once", user="dave"))
    assert (await asking).decided_by == "web:dave"


def test_a_name_is_plain_text_on_one_line() -> None:
    for bad in ("", "  ", "a\nb", "eve\u202e", "x" * 65, "a\x1b[2J"):
        with pytest.raises(ValidationError):
            AnswerRequest(choice="once", user=bad)


async def test_the_page_shows_the_terminals_text() -> None:
    approver = WebApprover()
    q = _question("rm -rf / \u200b" + "y" * 5000)
    task, _ = await _asked(approver, q)
    view = question_view(approver.pending()[0])
    assert view["text"] == render_question(q, PAGE_WIDTH, more=PAGE_MORE)
    assert "\\u202e" in view["text"] and "\u202e" not in view["text"]
    # The page says where the rest is in its own words: it has no `v` key.
    assert "more characters, the whole input is under" in view["text"]
    assert "shown with v" not in view["text"]
    assert "y" * 5000 in str(view["full_input"]).replace("\n  │ ", "")
    task.cancel()


async def test_a_long_reason_is_cut_on_the_asked_by_line_too() -> None:
    """The analyser's reason can quote the whole command: shown once in the input
    (cut there), it is cut on the "asked by" line as well, never quoted whole."""
    approver = WebApprover()
    long_command = "echo " + "z" * 6000
    q = _question(long_command).model_copy(update={"reason": f"command {long_command!r} is unproven"})
    task, _ = await _asked(approver, q)
    view = question_view(approver.pending()[0])
    assert "z" * 4000 not in str(view["text"]).split("asked by:", 1)[1].replace("\n  │ ", "")
    assert str(view["text"]).count("more characters, the whole input is under") >= 2
    assert len(str(view["asked_by"])) <= 1000
    task.cancel()


def test_the_script_writes_data_as_text_only() -> None:
    script = (STATIC / "app.js").read_text()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(",
                 "new Function", "setAttribute(\"on", ".href", "srcdoc"):  # fmt: skip
        assert sink not in script, sink
    page = (STATIC / "index.html").read_text()
    assert not re.search(r"<script(?![^>]*\bsrc=)", page), "no inline script"
    assert not re.search(r"\son[a-z]+=", page) and "style=" not in page
