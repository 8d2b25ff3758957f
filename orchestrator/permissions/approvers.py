"""Approvers: who answers an `ask`. The engine never asks; the broker routes the
question up the task tree to the root's approver, which is one of these (or the
person at a terminal, `ui.approval_prompt.TerminalApprover`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import secrets
import shlex
from collections.abc import Callable
from typing import Any, Literal, Protocol, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from orchestrator.behavior import FinalBehavior
from orchestrator.event_sink import TaskIdentity
from orchestrator.jsontypes import JSONObject, input_hash

log = logging.getLogger(__name__)


class ApprovalQuestion(BaseModel):
    """What the approver is asked."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    question_id: str = Field(default_factory=lambda: new_question_id())
    """Names this question on every channel it is offered to (terminal, page, webhook);
    an answer is bound to it, so a repeated or late answer changes nothing."""
    task_id: str
    """The asking subagent's task id."""
    agent_type: str
    """Its agent type."""
    description: str = ""
    """The task's description (written by its parent's model: untrusted)."""
    chain: tuple[str, ...] = ()
    """The asking task's ancestors' ids, root first, ending with the task itself."""
    chain_agents: tuple[str, ...] = ()
    """The agent type of each task in `chain` (may be shorter when not known)."""
    chain_descriptions: tuple[str, ...] = ()
    """The description of each task in `chain` (untrusted; may be shorter when not known)."""
    run_id: str = ""
    """The run the task belongs to."""
    always_rule: str = ""
    """The exact allow rule "always allow" would write (empty: not offered)."""
    always_file: str = ""
    """Where it would be written (the workspace's .claude/settings.local.json)."""
    tool_name: str
    """The tool."""
    tool_input: JSONObject
    """The exact input (untrusted)."""
    input_hash: str
    """`input_hash(tool_name, tool_input)`; an approval is bound to it."""
    asked_by: str
    """The rule or hook that asked."""
    reason: str = ""
    """Why it asked."""


AnswerScope = Literal["once", "session", "always"]
"""How far an allow reaches: this call, this exact input for the rest of the run, or
also the question's `always_rule` written to the workspace settings."""


class ApprovalAnswer(BaseModel):
    """The approver's answer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    behavior: FinalBehavior
    """allow or deny."""
    scope: AnswerScope = "once"
    """`session`: allow this exact input again without asking, for the rest of the run;
    `always`: also write the question's `always_rule` to the workspace settings."""
    reason: str = ""
    """For a deny, what the subagent's model is told."""
    channel: str = ""
    """Where the answer came from: `terminal`, `web`, `webhook`, `mcp`, `callback`, or
    warden itself (`non-interactive`, `timeout`, `approver error`)."""
    person: str = ""
    """Who answered on that channel: the OS user at the terminal, the name a page or a
    webhook receiver gave (untrusted for `web`/`webhook`: shown as data)."""
    bound_to: str = ""
    """The hash of what the person saw, when the channel showed content that a hash
    names (an apply review: the change set's sha256); a consumer refuses an answer
    bound to anything else. Empty: bound by `question_id` alone, which is not enough
    for an apply review: an allow without the change set's sha256 is a no there."""
    decided_by: str = ""
    """Who answered, as the audit records it: `CHANNEL:PERSON` (`terminal:alice`,
    `web:bob`, `webhook:ci-bot`) or warden's own `non-interactive`, `timeout`; built
    from `channel` and `person` when not given."""

    @model_validator(mode="after")
    def _named(self) -> Self:
        if not self.decided_by:
            if not self.channel:
                raise ValueError("an ApprovalAnswer needs a channel (or decided_by)")
            who = f"{self.channel}:{self.person}" if self.person else self.channel
            object.__setattr__(self, "decided_by", who)
        return self


QUESTION_ID_BYTES = 8
"""Random bytes in a question id (`q_` and 16 hex digits)."""


def new_question_id() -> str:
    return f"q_{secrets.token_hex(QUESTION_ID_BYTES)}"


class Approver(Protocol):
    async def approve(self, q: ApprovalQuestion) -> ApprovalAnswer:
        """Answer one question; may take as long as a human does."""
        ...


class AskingTask(TaskIdentity, Protocol):
    """The task a question is asked for (`runtime.tasks.TaskContext` is one)."""

    @property
    def run_id(self) -> str: ...
    @property
    def description(self) -> str: ...


class Asker(Protocol):
    """Asks the run's approvers about something a task does that is not one of its
    tool calls (egress: a connection, tool `Network`), the way a tool call's question
    is asked: naming the task's ancestors, with events before and after, an "allow for
    this run" remembered (`runtime.gate.PolicyGate` implements it)."""

    async def ask_about(
        self,
        task: AskingTask,
        *,
        tool_name: str,
        tool_input: JSONObject,
        asked_by: str,
        reason: str,
        always_rule: str = "",
        always_file: str = "",
    ) -> ApprovalAnswer:
        """The answer: at once when this exact input was allowed for the run before,
        else the approver's (a failing approver denies). Writing an "always" rule
        (`always_rule`, into `always_file`) is the caller's part."""
        ...


class SessionApprovals:
    """ "Allow for the rest of this session", bound to the tool and the exact input."""

    def __init__(self) -> None:
        self._allowed: set[tuple[str, str]] = set()

    def remember(self, q: ApprovalQuestion, answer: ApprovalAnswer) -> None:
        if answer.behavior == "allow" and answer.scope in ("session", "always"):
            self._allowed.add((q.tool_name, q.input_hash))

    def allows(self, tool_name: str, tool_input: JSONObject) -> bool:
        return (tool_name, input_hash(tool_name, tool_input)) in self._allowed


class NonInteractiveApprover:
    """No human is available (no TTY, CI=true): every question is answered deny."""

    async def approve(self, q: ApprovalQuestion) -> ApprovalAnswer:
        return ApprovalAnswer(
            behavior="deny",
            reason=_advice(q),
            channel="non-interactive",
        )


MAX_SUGGESTED_CHARS = 200
"""Longest command or path a suggested rule spells out."""
GLOB_CHARS = frozenset("*?[")


def _advice(q: ApprovalQuestion) -> str:
    lead = (
        f"{q.tool_name} needs approval ({q.asked_by}) but no human is available to "
        "approve it (non-interactive run)."
    )
    rule = _suggest_rule(q)
    if rule is None:
        return (
            f"{lead} No rule can allow just this call; `warden policy explain` shows what "
            "decides it."
        )
    return (
        f"{lead} To allow exactly this call, add --allow {rule} (or the same rule to the "
        "`allow` list of .claude/settings.json)."
    )


def _suggest_rule(q: ApprovalQuestion) -> str | None:
    """Rules that allow exactly this one call and nothing more, or None when no rule
    can say that (never a prefix like `Bash(python3 -c:*)`, which allows any code)."""
    from orchestrator.permissions.paths import normalise
    from orchestrator.permissions.shell import DYNAMIC, analyse

    command = q.tool_input.get("command")
    if q.tool_name == "Bash" and isinstance(command, str) and len(command) <= MAX_SUGGESTED_CHARS:
        found = analyse(command)
        parts = [*found.commands, *found.wrappers]
        if found.problems or found.writes or found.reads or not parts:
            return None
        if any(
            c.open_ended or any(DYNAMIC in w or "*" in w or "(" in w or ")" in w for w in c.words)
            for c in parts
        ):
            return None
        rules = dict.fromkeys(f"Bash({shlex.join(c.words)})" for c in parts)
        return " --allow ".join(shlex.quote(r) for r in rules)
    path = q.tool_input.get("file_path")
    if q.tool_name in ("Read", "Edit", "Write") and isinstance(path, str):
        if len(path) > MAX_SUGGESTED_CHARS or GLOB_CHARS & set(path) or path.startswith("~"):
            return None
        return shlex.quote(f"{q.tool_name}(/{normalise(path)[0]})")
    return None


class CallbackApprover:
    """Embedding: a sync or async callable answers. A sync one runs in a worker thread.
    An answer that names no channel is recorded as channel `callback`."""

    name = "callback"

    def __init__(self, fn: Callable[[ApprovalQuestion], Any]) -> None:
        self._fn = fn

    async def approve(self, q: ApprovalQuestion) -> ApprovalAnswer:
        if inspect.iscoroutinefunction(self._fn):
            result = await self._fn(q)
        else:
            result = await asyncio.to_thread(self._fn, q)
            if inspect.isawaitable(result):
                result = await result
        if not isinstance(result, ApprovalAnswer):
            raise TypeError(
                f"approval callback returned {type(result).__name__}, not ApprovalAnswer"
            )
        if not result.channel:
            result = result.model_copy(update={"channel": "callback"})
        return result


class TimeoutApprover:
    """Wraps an approver; no answer within `seconds` is a deny."""

    def __init__(self, inner: Approver, seconds: float) -> None:
        self._inner = inner
        self._seconds = seconds

    async def approve(self, q: ApprovalQuestion) -> ApprovalAnswer:
        try:
            return await asyncio.wait_for(self._inner.approve(q), self._seconds)
        except TimeoutError:
            return ApprovalAnswer(
                behavior="deny",
                reason=f"no approval within {self._seconds:g}s, so it is denied",
                channel="timeout",
            )
