"""Questions ("ask") as MCP elicitation, one channel of the run's approver hub
(`permissions.approval_hub`): the client shows the question (the same text the
terminal prompt shows) and its person answers allow, allow for this session, or deny;
the first answer on any channel wins. The channel is added only for a client that
declared elicitation; one that cannot take a request when asked (no stream open, an
error reply) drops out of that question, which the run's other channels answer (with
none left it is denied, as in CI).

An apply review (`apply.changeset.ApplyReview`) is asked as its own form: the change
set's rendering (`apply.render`: its hash, each file's summary and callouts, and the
diff when it fits), and a decision whose "apply" value names the change set's hash,
so the yes a client sends back is bound to the change set it was shown."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import mcp.types as types

from orchestrator.apply.changeset import ApplyReview
from orchestrator.apply.render import ChangeSetView, render_change_set
from orchestrator.errors import WardenError
from orchestrator.permissions.approvers import ApprovalAnswer, ApprovalQuestion
from orchestrator.ui.question_text import render_question
from orchestrator.untrusted_text import printable

if TYPE_CHECKING:
    from mcp.server.session import ServerSession

log = logging.getLogger(__name__)

ALLOW, ALLOW_SESSION, DENY = "allow", "allow for this session", "deny"
MAX_REASON_CHARS = 1_000
"""Of a deny reason the client sends, what the subagent's model is told."""

ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {
            "type": "string",
            "title": "Decision",
            "description": "allow once, allow this exact call for the rest of the session, or deny",
            "enum": [ALLOW, ALLOW_SESSION, DENY],
        },
        "reason": {
            "type": "string",
            "title": "Reason (for a deny: the subagent is told)",
        },
    },
    "required": ["decision"],
}
"""What the client's form asks for (flat primitives, as elicitation allows)."""

DO_NOT_APPLY = "do not apply"
MAX_REVIEW_CHARS = 20_000
"""Longest review text an elicitation carries; a longer one shows the summary only."""
REVIEW_LEAD = (
    "warden: a sandboxed subagent's changes wait for review before they reach the "
    "workspace. Names and lines are the subagent's, shown as data.\n\n"
)


def apply_choice(sha256: str) -> str:
    """The form's "apply" value: it names the change set, so a yes is bound to it."""
    return f"apply change set {sha256}"


def review_schema(sha256: str) -> dict[str, Any]:
    """The form of one review: apply exactly this change set, or not (with a reason)."""
    return {
        "type": "object",
        "properties": {
            "decision": {
                "type": "string",
                "title": "Decision",
                "description": "apply this change set to the workspace, or keep it aside",
                "enum": [apply_choice(sha256), DO_NOT_APPLY],
            },
            "reason": {"type": "string", "title": "Reason (for a no: the subagent is told)"},
        },
        "required": ["decision"],
    }


def review_message(view: ChangeSetView) -> str:
    """The review's text: the whole diff when it fits, else the summary, saying so."""
    text = view.text()
    if len(text) > MAX_REVIEW_CHARS:
        text = view.summary_text() + (
            f"\n[the diff ({len(text)} characters) is longer than this form shows; "
            "the run's terminal or web page shows it whole]\n"
        )
    return REVIEW_LEAD + text


class ElicitChannel:
    """Where one MCP connection's questions can go: the stream of a tool call still in
    flight (so an HTTP client gets it on the response it is reading), else the
    connection's own channel (stdio; HTTP with its GET stream open)."""

    def __init__(self) -> None:
        self._calls: dict[types.RequestId, ServerSession] = {}
        self._last: ServerSession | None = None

    def call_started(self, request_id: types.RequestId, session: ServerSession) -> None:
        self._calls[request_id] = session
        self._last = session

    def call_ended(self, request_id: types.RequestId) -> None:
        self._calls.pop(request_id, None)

    def target(self) -> tuple[ServerSession, types.RequestId | None] | None:
        for request_id, session in reversed(self._calls.items()):
            return session, request_id
        return (self._last, None) if self._last is not None else None


def client_elicits(session: ServerSession) -> bool:
    capabilities = session.client_capabilities
    return capabilities is not None and capabilities.elicitation is not None


class ElicitationUnavailableError(WardenError, ConnectionError):
    """The MCP client cannot take this question (no open stream, an error reply)."""


class ElicitationApprover:
    """An approval channel that asks the MCP client's person."""

    name = "mcp"

    def __init__(self, channel: ElicitChannel) -> None:
        self.channel = channel

    async def approve(self, q: ApprovalQuestion) -> ApprovalAnswer:
        target = self.channel.target()
        if target is None:
            raise ElicitationUnavailableError("the MCP client has no request open to ask on")
        session, request_id = target
        client = _client_name(session)
        if isinstance(q, ApplyReview):
            return await self._review(q, session, request_id, client)
        try:
            reply = await session.elicit_form(
                "warden: a sandboxed subagent asks to run this.\n\n" + render_question(q),
                ANSWER_SCHEMA,
                related_request_id=request_id,
            )
        except Exception as exc:  # no channel, an error reply, a malformed one
            raise ElicitationUnavailableError(f"{client} could not be asked: {exc}") from exc
        return answer_from(reply, client)

    async def _review(
        self,
        q: ApplyReview,
        session: ServerSession,
        request_id: types.RequestId | None,
        client: str,
    ) -> ApprovalAnswer:
        view = await asyncio.to_thread(render_change_set, q.change_set, q.content)
        try:
            reply = await session.elicit_form(
                review_message(view), review_schema(view.sha256), related_request_id=request_id
            )
        except Exception as exc:
            raise ElicitationUnavailableError(f"{client} could not be asked: {exc}") from exc
        return review_answer_from(reply, client, view.sha256)


def review_answer_from(reply: types.ElicitResult, client: str, sha256: str) -> ApprovalAnswer:
    """A review's reply as an answer: only an accepted "apply" naming this change set's
    hash applies it (bound to that hash); anything else keeps it aside."""
    content = reply.content or {}
    if reply.action == "accept" and content.get("decision") == apply_choice(sha256):
        return ApprovalAnswer(behavior="allow", channel="mcp", person=client, bound_to=sha256)
    reason = content.get("reason")
    told = (
        printable(reason, MAX_REASON_CHARS)
        if isinstance(reason, str) and reason.strip()
        else f"the person using {client} did not apply it ({reply.action})"
    )
    return ApprovalAnswer(behavior="deny", reason=told, channel="mcp", person=client)


def answer_from(reply: types.ElicitResult, client: str) -> ApprovalAnswer:
    """The client's reply as an answer: anything but an accepted allow is a deny."""
    content = reply.content or {}
    decision = content.get("decision")
    if reply.action == "accept" and decision == ALLOW:
        return ApprovalAnswer(behavior="allow", channel="mcp", person=client)
    if reply.action == "accept" and decision == ALLOW_SESSION:
        return ApprovalAnswer(behavior="allow", scope="session", channel="mcp", person=client)
    reason = content.get("reason")
    told = (
        printable(reason, MAX_REASON_CHARS)
        if isinstance(reason, str) and reason.strip()
        else f"the person using {client} did not approve it ({reply.action})"
    )
    return ApprovalAnswer(behavior="deny", reason=told, channel="mcp", person=client)


def _client_name(session: ServerSession) -> str:
    params = session.client_params
    name = params.client_info.name if params is not None else "the MCP client"
    return printable(name, 80)
