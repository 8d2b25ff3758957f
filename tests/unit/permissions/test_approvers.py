"""Locks in the approvers: the terminal prompt's three answers, untrusted text shown
as inert data (no ANSI, no carriage returns, no fake prompt lines), the
non-interactive deny that says how to allow by policy, sync and async callbacks,
deny on timeout, and session approvals bound to the exact input."""

from __future__ import annotations

import asyncio
import io
import threading

import pytest

from orchestrator.jsontypes import JSONObject, input_hash
from orchestrator.permissions.approvers import (
    ApprovalAnswer,
    ApprovalQuestion,
    CallbackApprover,
    NonInteractiveApprover,
    SessionApprovals,
    TimeoutApprover,
)
from orchestrator.ui.approval_prompt import TerminalApprover
from orchestrator.untrusted_text import as_data


def question(
    tool_input: JSONObject | None = None, description: str = "fix the tests"
) -> ApprovalQuestion:
    inp: JSONObject = tool_input if tool_input is not None else {"command": "make deploy"}
    return ApprovalQuestion(
        task_id="sa_child",
        agent_type="general-purpose",
        description=description,
        chain=("sa_root",),
        tool_name="Bash",
        tool_input=inp,
        input_hash=input_hash("Bash", inp),
        asked_by="Bash(make deploy:*) (project:.claude/settings.json)",
        reason="needs approval",
    )


def terminal(answers: str) -> tuple[TerminalApprover, io.StringIO]:
    out = io.StringIO()
    return TerminalApprover(stdin=io.StringIO(answers), stdout=out, user="alice"), out


@pytest.mark.parametrize(
    ("typed", "behavior", "scope", "reason"),
    [
        ("a\n", "allow", "once", ""),
        ("s\n", "allow", "session", ""),
        ("d\nnot in production\n", "deny", "once", "not in production"),
        ("what?\nd\n\n", "deny", "once", "denied by the user"),
        ("", "deny", "once", "no answer (end of input)"),
    ],
)
async def test_terminal_answers(typed: str, behavior: str, scope: str, reason: str) -> None:
    approver, out = terminal(typed)
    answer = await approver.approve(question())
    assert (answer.behavior, answer.scope, answer.reason, answer.decided_by) == (
        behavior,
        scope,
        reason,
        "terminal:alice",
    )
    shown = out.getvalue()
    for detail in (
        "sa_child",
        "general-purpose",
        "sa_root",
        "fix the tests",
        "make deploy",
        "Bash(make deploy:*)",
    ):
        assert detail in shown


PAYLOAD = (
    "ls\x1b[2J\x1b[H\rAllowed.\n\x1b[32m✔ Allowed by warden\x1b[0m\r\n"
    "[a]llow once > a\x07\x9b31m\u202eevil"
)


async def test_container_text_is_rendered_as_data() -> None:
    approver, out = terminal("d\nno\n")
    await approver.approve(question({"command": PAYLOAD}, description=PAYLOAD))
    shown = out.getvalue()
    for raw in ("\x1b", "\r", "\x07", "\x9b", "\u202e"):
        assert raw not in shown
    assert "\\x1b[2J" in shown or "\\u001b[2J" in shown
    # Every line that carries the payload is inside the quoted box, so a fake
    # "Allowed" or a fake prompt never starts a line of its own.
    for line in shown.splitlines():
        if "Allowed" in line or "allow once >" in line.replace("[a]llow", "allow"):
            assert "│" in line or "allow for this session" in line


def test_as_data_escapes_controls_keeps_text() -> None:
    assert as_data("a\x1b[31mb\rc\x00\x7f\x85") == "a\\x1b[31mb\\x0dc\\x00\\x7f\\x85"
    assert as_data("naïve ✓\nnext\tcol") == "naïve ✓\nnext\\tcol"


async def test_non_interactive_denies_and_explains() -> None:
    answer = await NonInteractiveApprover().approve(question())
    assert answer.behavior == "deny" and answer.decided_by == "non-interactive"
    assert "no human is available" in answer.reason
    assert "--allow 'Bash(make deploy)'" in answer.reason  # exactly this call, no prefix


async def test_callbacks_sync_and_async() -> None:
    seen: list[str] = []

    def sync_fn(q: ApprovalQuestion) -> ApprovalAnswer:
        seen.append(threading.current_thread().name)
        return ApprovalAnswer(behavior="allow", decided_by="callback")

    async def async_fn(q: ApprovalQuestion) -> ApprovalAnswer:
        await asyncio.sleep(0)
        return ApprovalAnswer(behavior="deny", reason=f"no {q.tool_name}", decided_by="callback")

    assert (await CallbackApprover(sync_fn).approve(question())).behavior == "allow"
    assert seen and seen[0] != threading.main_thread().name  # a sync callback stays off the loop
    assert (await CallbackApprover(async_fn).approve(question())).reason == "no Bash"
    with pytest.raises(TypeError, match="not ApprovalAnswer"):
        await CallbackApprover(lambda q: "yes").approve(question())


async def test_timeout_denies_and_others_keep_running() -> None:
    gate = asyncio.Event()

    async def slow(q: ApprovalQuestion) -> ApprovalAnswer:
        await gate.wait()
        return ApprovalAnswer(behavior="allow", decided_by="callback")

    approver = TimeoutApprover(CallbackApprover(slow), 0.2)
    other = asyncio.create_task(asyncio.sleep(0.05, result="still running"))
    answer = await approver.approve(question())
    assert answer.behavior == "deny" and answer.decided_by == "timeout" and "0.2s" in answer.reason
    assert other.done() and other.result() == "still running"
    fast = TimeoutApprover(
        CallbackApprover(lambda q: ApprovalAnswer(behavior="allow", decided_by="cb")), 5
    )
    assert (await fast.approve(question())).behavior == "allow"


def test_input_hash_is_canonical_and_session_approval_is_bound_to_it() -> None:
    assert input_hash("Bash", {"a": 1, "b": [1, 2]}) == input_hash("Bash", {"b": [1, 2], "a": 1})
    assert input_hash("Bash", {"command": "ls"}) != input_hash("Read", {"command": "ls"})
    assert input_hash("Bash", {"command": "ls"}) != input_hash("Bash", {"command": "ls "})
    cache = SessionApprovals()
    q = question({"command": "make deploy"})
    cache.remember(q, ApprovalAnswer(behavior="allow", scope="once", decided_by="t"))
    assert not cache.allows("Bash", {"command": "make deploy"})
    cache.remember(q, ApprovalAnswer(behavior="allow", scope="session", decided_by="t"))
    assert cache.allows("Bash", {"command": "make deploy"})
    assert not cache.allows("Bash", {"command": "make deploy --force"})
    assert not cache.allows("Read", {"command": "make deploy"})
