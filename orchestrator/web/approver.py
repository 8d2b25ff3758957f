"""The page as an approver: questions wait here until someone answers on the page.

`WebApprover.approve` puts a question up and waits; `answer` (a POST from the
page, or from `warden ui` through the run's own socket) settles it. The first
answer wins: a second one for the same question is refused, naming who answered
(`AlreadyAnsweredError`). The answers are the terminal's: allow once, allow this
exact input for the rest of the run, always allow (writing exactly the rule the
page showed), or deny with a reason the subagent's model is told. The audit
records `web:NAME`, the name the person gave on the page.

What the page shows of a question is the terminal's text (`ui.question_text`):
the same lines, the same escaping, the whole input a click away.

An apply review (`apply.changeset.ApplyReview`) is rendered once when it arrives
(`apply.render`, off the event loop) and its diff is fetched by the page on its own
(`review_view`), not pushed with every live update. It is answered yes or no, and
the answer must name the change set's hash the page showed (`change_set`): a stale
or missing hash is refused, and a yes is bound to that hash (`bound_to`).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from orchestrator.apply.changeset import ApplyReview
from orchestrator.apply.render import ChangeSetView, render_change_set
from orchestrator.jsontypes import JSONObject, JSONValue
from orchestrator.permissions.approvers import AnswerScope, ApprovalAnswer, ApprovalQuestion
from orchestrator.ui.question_text import MAX_ASKED_BY_CHARS, render_full_input, render_question
from orchestrator.untrusted_text import as_data
from orchestrator.web.live import Changes

PAGE_WIDTH = 110
PAGE_MORE = "the whole input is under “view the whole input”"
"""Where the page says the rest of a cut field is (it has no `v` key: a details box)."""
"""Columns the question's text is wrapped to on the page (its `<pre>` scrolls beyond)."""

MAX_USER_CHARS = 64
"""Longest name a person may answer under."""

MAX_REASON_CHARS = 2000
"""Longest deny reason the page sends (the model is told it)."""

ANSWERED_KEPT = 256
"""Answered questions remembered, so a late second answer is told who answered."""

CHANNEL = "web"
"""How the audit names this channel: `web:NAME`."""

Choice = Literal[AnswerScope, "deny"]
"""What the page's buttons say: an allow's scope (`AnswerScope`), or deny."""


class AlreadyAnsweredError(LookupError):
    """The question was answered already (by `decided_by`), or withdrawn."""

    def __init__(self, decided_by: str) -> None:
        super().__init__(f"already answered by {decided_by}")
        self.decided_by = decided_by


class UnknownQuestionError(LookupError):
    """No such question was ever asked here."""


class AnswerRequest(BaseModel):
    """What the page posts to answer one question."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    choice: Choice
    """once, session (this exact input, for the rest of the run), always, deny."""
    user: str = Field(min_length=1, max_length=MAX_USER_CHARS)
    """Who answers (the audit says `web:USER`)."""
    reason: str = Field(default="", max_length=MAX_REASON_CHARS)
    """For deny: what the subagent's model is told."""
    rule: str = ""
    """For always: the rule the page showed; it must be the question's rule."""
    change_set: str = Field(default="", max_length=64)
    """For an apply review: the change set's sha256 the page showed; it must be the
    question's (a stale page's answer is refused)."""

    @field_validator("user")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        value = value.strip()
        if not value or as_data(value) != value or "\n" in value:
            raise ValueError("the name must be plain visible text on one line")
        return value


@dataclass
class Pending:
    """One question waiting for an answer."""

    qid: str
    question: ApprovalQuestion
    future: asyncio.Future[ApprovalAnswer]
    asked_at: float = field(default_factory=time.time)
    review: ChangeSetView | None = None
    """An apply review's rendering (None: a tool call's question)."""


class WebApprover:
    """Holds the run's open questions for the page: an `Approver`, and a channel of
    the run's `ApproverHub` (`withdraw` takes a question answered elsewhere away)."""

    name = CHANNEL

    def __init__(self, changes: Changes | None = None) -> None:
        self.changes = changes or Changes()
        self._pending: dict[str, Pending] = {}
        self._answered: OrderedDict[str, tuple[str, str]] = OrderedDict()
        """Question id -> (its run, who answered), the most recent last."""

    async def approve(self, q: ApprovalQuestion) -> ApprovalAnswer:
        loop = asyncio.get_running_loop()
        review = None
        if isinstance(q, ApplyReview):  # RenderError: this channel cannot offer it
            review = await asyncio.to_thread(render_change_set, q.change_set, q.content)
        pending = Pending(q.question_id, q, loop.create_future(), review=review)
        self._pending[pending.qid] = pending
        self.changes.bump()
        try:
            answer = await pending.future
        except asyncio.CancelledError:
            self._settled(pending.qid, "withdrawn (the task ended or another channel answered)")
            raise
        self._settled(pending.qid, answer.decided_by)
        return answer

    def withdraw(self, qid: str, answer: ApprovalAnswer) -> None:
        """Another channel answered `qid` (the hub says so): take it off the page,
        saying who did."""
        pending = self._pending.get(qid)
        self._settled(qid, answer.decided_by)  # first: the cancellation below then says nothing
        if pending is not None and not pending.future.done():
            pending.future.cancel()

    def pending(self) -> list[Pending]:
        """Open questions, oldest first."""
        return sorted(self._pending.values(), key=lambda p: p.asked_at)

    def run_of(self, qid: str) -> str | None:
        """The run an open or recently answered question belongs to."""
        pending = self._pending.get(qid)
        if pending is not None:
            return pending.question.run_id
        settled = self._answered.get(qid)
        return settled[0] if settled else None

    def answer(self, qid: str, request: AnswerRequest) -> ApprovalAnswer:
        """Settle question `qid`. Raises AlreadyAnsweredError, UnknownQuestionError, or
        ValueError (always without the rule shown, or with another rule)."""
        pending = self._pending.get(qid)
        if pending is None or pending.future.done():
            settled = self._answered.get(qid)
            if settled is None and pending is None:
                raise UnknownQuestionError(f"no question {qid!r} here")
            raise AlreadyAnsweredError(settled[1] if settled else "someone else")
        answer = to_answer(pending.question, request)
        pending.future.set_result(answer)
        self._settled(qid, answer.decided_by)
        return answer

    def review_view(self, qid: str) -> JSONObject:
        """An open apply review's diff as the page shows it. Raises
        UnknownQuestionError (no such open review) or AlreadyAnsweredError."""
        pending = self._pending.get(qid)
        if pending is None or pending.review is None:
            settled = self._answered.get(qid)
            if settled is not None:
                raise AlreadyAnsweredError(settled[1])
            raise UnknownQuestionError(f"no apply review {qid!r} here")
        return review_json(pending.review)

    def state(self, run_id: str) -> JSONObject:
        """The run's open questions as the page shows them, and who answered the
        recent ones (so a page that showed one can say who took it)."""
        return {
            "open": [question_view(p) for p in self.pending() if p.question.run_id == run_id],
            "answered": [
                {"id": qid, "decided_by": as_data(who)}
                for qid, (run, who) in self._answered.items()
                if run == run_id
            ],
        }

    def _settled(self, qid: str, decided_by: str) -> None:
        pending = self._pending.pop(qid, None)
        if pending is None:
            return
        self._answered[qid] = (pending.question.run_id, decided_by)
        while len(self._answered) > ANSWERED_KEPT:
            self._answered.popitem(last=False)
        self.changes.bump()


class StaleChangeSetError(ValueError):
    """An answer to an apply review named another change set than the one on offer."""


def to_answer(q: ApprovalQuestion, request: AnswerRequest) -> ApprovalAnswer:
    """The approver's answer for what the page sent; raises ValueError when "always"
    names no rule or another rule than the one the question offers, and
    StaleChangeSetError when an apply review's answer names another hash."""
    if isinstance(q, ApplyReview):
        return _review_answer(q, request)
    if request.choice == "deny":
        reason = request.reason.strip() or "denied by the user"
        return ApprovalAnswer(behavior="deny", reason=reason, channel=CHANNEL, person=request.user)
    if request.choice == "always":
        if not q.always_rule:
            raise ValueError("no rule can allow exactly this call, so 'always' is not offered")
        if request.rule != q.always_rule:
            raise ValueError("'always' must name the rule the page showed for this question")
    return ApprovalAnswer(
        behavior="allow", scope=request.choice, channel=CHANNEL, person=request.user
    )


def _review_answer(q: ApplyReview, request: AnswerRequest) -> ApprovalAnswer:
    if request.change_set != q.change_set.sha256:
        raise StaleChangeSetError(
            "the answer names another change set than the one on offer (a stale page?): "
            "reload the page and answer the change set it shows"
        )
    if request.choice == "deny":
        reason = request.reason.strip() or "the reviewer said no"
        return ApprovalAnswer(behavior="deny", reason=reason, channel=CHANNEL, person=request.user)
    if request.choice != "once":
        raise ValueError("an apply review is answered yes (choice `once`) or no (`deny`)")
    return ApprovalAnswer(
        behavior="allow", channel=CHANNEL, person=request.user, bound_to=q.change_set.sha256
    )


def review_json(view: ChangeSetView) -> JSONObject:
    """A rendered change set for the page (every string already made inert)."""
    files: list[JSONValue] = [
        {
            "path": f.path,
            "path_ascii": f.path_ascii,
            "kind": f.change.kind,
            "summary": f.summary,
            "notes": list[JSONValue](f.notes),
            "lines": [[line.tag, line.text] for line in f.lines],
            "cut": f.cut,
        }
        for f in view.files
    ]
    return {"sha256": view.sha256, "header": list[JSONValue](view.header()), "files": files}


def question_view(p: Pending) -> JSONObject:
    """What the page shows of a question: the terminal's text, the whole input, the
    answers offered (always only with its exact rule and file). An apply review
    shows its summary here; its diff is fetched on its own (`review_json`)."""
    q = p.question
    if p.review is not None:
        return {
            "id": p.qid,
            "kind": "apply_review",
            "run_id": as_data(q.run_id),
            "task_id": as_data(q.task_id),
            "agent_type": as_data(q.agent_type),
            "tool_name": as_data(q.tool_name),
            "asked_at": p.asked_at,
            "sha256": p.review.sha256,
            "text": p.review.summary_text(),
        }
    return {
        "id": p.qid,
        "kind": "question",
        "run_id": as_data(q.run_id),
        "task_id": as_data(q.task_id),
        "agent_type": as_data(q.agent_type),
        "tool_name": as_data(q.tool_name),
        "asked_at": p.asked_at,
        "text": render_question(q, PAGE_WIDTH, more=PAGE_MORE),
        "full_input": render_full_input(q, PAGE_WIDTH),
        "asked_by": as_data(q.asked_by)[:MAX_ASKED_BY_CHARS],
        "always_rule": q.always_rule,
        "always_rule_shown": as_data(q.always_rule),
        "always_file": as_data(q.always_file),
    }


class LocalQuestions:
    """A run's own questions for its page server (`server.Questions`)."""

    def __init__(self, approver: WebApprover) -> None:
        self.approver = approver
        self.changes = approver.changes

    async def state(self, run_id: str) -> JSONObject:
        return self.approver.state(run_id)

    async def review(self, run_id: str, qid: str) -> JSONObject:
        if self.approver.run_of(qid) != run_id:
            raise UnknownQuestionError(f"no question {qid!r} in run {run_id!r}")
        return self.approver.review_view(qid)

    async def answer(self, run_id: str, qid: str, request: AnswerRequest) -> str:
        if self.approver.run_of(qid) != run_id:  # another run's question is unknown here
            raise UnknownQuestionError(f"no question {qid!r} in run {run_id!r}")
        return self.approver.answer(qid, request).decided_by
