"""Several approvers at once: every live channel is asked, the first answer wins, the
others are told who answered and stop asking; failures and silence deny."""

from __future__ import annotations

import asyncio
import io
import os

import pytest

from orchestrator.jsontypes import JSONObject, input_hash
from orchestrator.permissions.approval_hub import ApproverHub
from orchestrator.permissions.approvers import ApprovalAnswer, ApprovalQuestion
from orchestrator.ui.approval_prompt import TerminalApprover


def question(command: str = "make deploy") -> ApprovalQuestion:
    tool_input: JSONObject = {"command": command}
    return ApprovalQuestion(
        task_id="sa_child",
        agent_type="general-purpose",
        tool_name="Bash",
        tool_input=tool_input,
        input_hash=input_hash("Bash", tool_input),
        asked_by="mode: default",
    )


class Person:
    """A channel where someone answers when told to (`answer`), and hears withdrawals."""

    def __init__(self, name: str, channel: str = "web") -> None:
        self.name = name
        self.channel = channel
        self.asked: dict[str, asyncio.Future[ApprovalAnswer]] = {}
        self.withdrawn: list[tuple[str, ApprovalAnswer]] = []
        self.cancelled: list[str] = []
        self.offered = asyncio.Event()

    async def approve(self, q: ApprovalQuestion) -> ApprovalAnswer:
        future: asyncio.Future[ApprovalAnswer] = asyncio.get_running_loop().create_future()
        self.asked[q.question_id] = future
        self.offered.set()
        try:
            return await future
        except asyncio.CancelledError:
            self.cancelled.append(q.question_id)
            raise

    def answer(self, question_id: str, behavior: str = "allow", reason: str = "") -> None:
        self.asked[question_id].set_result(
            ApprovalAnswer(
                behavior=behavior,  # type: ignore[arg-type]
                reason=reason,
                channel=self.channel,
                person=self.name,
            )
        )

    def withdraw(self, question_id: str, answer: ApprovalAnswer) -> None:
        self.withdrawn.append((question_id, answer))


class Broken:
    name = "webhook"

    async def approve(self, q: ApprovalQuestion) -> ApprovalAnswer:
        raise ConnectionError("receiver at http://127.0.0.1:9 refused the connection")


async def test_first_answer_wins_and_the_other_channel_hears_who_answered() -> None:
    web, hook = Person("bob"), Person("ci-bot", channel="webhook")
    hub = ApproverHub([web, hook])
    q = question()
    asking = asyncio.create_task(hub.approve(q))
    await asyncio.wait_for(hook.offered.wait(), 5)
    assert q.question_id in web.asked and q.question_id in hook.asked
    web.answer(q.question_id, "deny", reason="not on Fridays")
    answer = await asking
    assert (answer.behavior, answer.decided_by, answer.reason) == (
        "deny",
        "web:bob",
        "not on Fridays",
    )
    await asyncio.sleep(0)
    assert hook.withdrawn == [(q.question_id, answer)] and hook.cancelled == [q.question_id]
    assert web.withdrawn == [] and web.cancelled == []
    assert hub.pending == ()


async def test_a_channel_added_while_a_question_waits_is_offered_it() -> None:
    first, late = Person("alice", channel="terminal"), Person("bob")
    hub = ApproverHub([first])
    q = question()
    asking = asyncio.create_task(hub.approve(q))
    await asyncio.wait_for(first.offered.wait(), 5)
    assert hub.pending == (q,)
    remove = hub.add_channel(late)
    await asyncio.wait_for(late.offered.wait(), 5)
    late.answer(q.question_id)
    assert (await asking).decided_by == "web:bob"
    await asyncio.sleep(0)
    assert first.withdrawn[0][1].person == "bob"
    remove()
    assert hub.channels == (first,)


async def test_a_failing_channel_drops_out_and_another_still_answers() -> None:
    web = Person("bob")
    hub = ApproverHub([Broken(), web])
    q = question()
    asking = asyncio.create_task(hub.approve(q))
    await asyncio.wait_for(web.offered.wait(), 5)
    await asyncio.sleep(0.01)  # the broken channel has failed by now
    assert not asking.done()
    web.answer(q.question_id)
    assert (await asking).behavior == "allow"


async def test_every_channel_failing_denies_with_their_reasons() -> None:
    answer = await ApproverHub([Broken()]).approve(question())
    assert (answer.behavior, answer.decided_by) == ("deny", "no approver")
    assert "webhook: receiver at http://127.0.0.1:9 refused the connection" in answer.reason


async def test_removing_the_last_channel_denies_its_waiting_question() -> None:
    web = Person("bob")
    hub = ApproverHub()
    remove = hub.add_channel(web)
    asking = asyncio.create_task(hub.approve(question()))
    await asyncio.wait_for(web.offered.wait(), 5)
    remove()
    answer = await asking
    assert answer.behavior == "deny" and "bob: the channel closed" in answer.reason


async def test_no_channel_denies_with_advice() -> None:
    answer = await ApproverHub().approve(question("make test"))
    assert answer.decided_by == "non-interactive" and "--allow 'Bash(make test)'" in answer.reason


async def test_silence_on_every_channel_is_a_deny_every_channel_hears() -> None:
    web, hook = Person("bob"), Person("ci-bot", channel="webhook")
    answer = await ApproverHub([web, hook], timeout_s=0.05).approve(question())
    assert (answer.behavior, answer.decided_by) == ("deny", "timeout")
    assert "no approval within 0.05s" in answer.reason
    await asyncio.sleep(0)
    assert [a for _, a in web.withdrawn] == [answer] == [a for _, a in hook.withdrawn]


async def test_cancelling_the_question_cancels_every_offer_without_an_answer() -> None:
    web = Person("bob")
    hub = ApproverHub([web])
    asking = asyncio.create_task(hub.approve(question()))
    await asyncio.wait_for(web.offered.wait(), 5)
    asking.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asking
    await asyncio.sleep(0)
    assert len(web.cancelled) == 1 and web.withdrawn == [] and hub.pending == ()


async def test_a_withdrawn_terminal_prompt_says_who_answered_and_its_typing_answers_nothing() -> (
    None
):
    """The prompt reads a real pipe (as a terminal): a line typed for the withdrawn
    question does not answer the next one; the next line typed does."""
    read_fd, write_fd = os.pipe()
    out = io.StringIO()
    with os.fdopen(read_fd, "r") as typed:
        terminal = TerminalApprover(stdin=typed, stdout=out, user="alice")
        web = Person("bob")
        hub = ApproverHub([terminal, web])
        first = question("make deploy")
        asking = asyncio.create_task(hub.approve(first))
        await asyncio.wait_for(web.offered.wait(), 5)
        while "[a]llow once" not in out.getvalue():
            await asyncio.sleep(0.01)
        web.answer(first.question_id, "deny", reason="use staging")
        assert (await asking).decided_by == "web:bob"
        assert "warden: answered on web by bob: denied: use staging" in out.getvalue()
        os.write(write_fd, b"a\n")  # typed for the first question, after it was answered
        await asyncio.sleep(0.05)
        second = question("make test")
        asking = asyncio.create_task(hub.approve(second))
        while out.getvalue().count("[a]llow once") < 2:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        assert not asking.done()
        os.write(write_fd, b"d\nnot now\n")
        answer = await asyncio.wait_for(asking, 5)
        os.close(write_fd)
    assert (answer.behavior, answer.reason, answer.decided_by) == (
        "deny",
        "not now",
        "terminal:alice",
    )
    assert web.withdrawn[-1] == (second.question_id, answer)


async def test_closing_the_hub_denies_what_waits_and_what_comes_after() -> None:
    web = Person("bob")
    hub = ApproverHub([web])
    q = question()
    asking = asyncio.create_task(hub.approve(q))
    await asyncio.wait_for(web.offered.wait(), 5)
    hub.close()
    answer = await asking
    assert (answer.behavior, answer.decided_by) == ("deny", "stopped")
    assert answer.reason == "the run is stopping, so it is denied"
    await asyncio.sleep(0)
    assert web.withdrawn == [(q.question_id, answer)] and web.cancelled == [q.question_id]
    later = await hub.approve(question("make test"))
    assert later.decided_by == "stopped" and len(web.asked) == 1
