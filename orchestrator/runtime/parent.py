"""The parent agent loop, on the host. Its only tools delegate to subagents:
nothing it can call executes on the host."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pydantic import ValidationError

from orchestrator.agents.registry import BUILTIN_AGENTS
from orchestrator.errors import WardenError
from orchestrator.jsontypes import JSONObject, JSONValue
from orchestrator.runtime.manager import TaskManager
from orchestrator.runtime.model_errors import from_sdk_error
from orchestrator.runtime.parent_tools import (
    MAX_OUTPUT_TIMEOUT_MS,
    TASK_ID_WARNING,
    TaskOutputInput,
    TaskStopInput,
    agent_listing,
    tool_schemas,
)
from orchestrator.runtime.tasks import ForkPrefix, TaskInput, TaskResult, unknown_fields
from sandbox_tools import wire
from sandbox_tools.caching import cached_messages, cached_tools, system_blocks
from sandbox_tools.context import ContextWindow, estimate_tokens
from sandbox_tools.tools.inputs import tool_params

if TYPE_CHECKING:
    from anthropic.types import Message

    from orchestrator.results.parent_transcript import ModelClient

log = logging.getLogger(__name__)

DEFAULT_PARENT_MAX_TURNS = 50
PARENT_MAX_TOKENS = 8192

PARENT_SYSTEM_PROMPT = """\
You are the lead agent of warden. You cannot run commands or touch files yourself: \
you delegate work to subagents with the Task tool. Each subagent runs in its own \
sandboxed container that shares the workspace with the others, starts with a fresh \
conversation that holds only the prompt you give it, and returns only its final \
answer. So write each prompt as a complete, self-contained brief: what to do, where, \
and what to report back. Independent tasks may be delegated in parallel by calling \
Task several times in one turn. When the work is done, answer the user concisely."""


@dataclass(frozen=True)
class ParentOptions:
    """How the parent loop runs (`warden run`'s --max-turns, --background, --fork)."""

    max_turns: int = DEFAULT_PARENT_MAX_TURNS
    background_default: bool = False
    """Task calls run in the background unless the model asks otherwise."""
    fork: bool = False
    """Fork mode is on (see `ParentAgent`)."""


@dataclass
class ParentResult:
    """The outcome of one parent run."""

    text: str
    turns: int
    stop_reason: str | None
    tasks: list[TaskResult] = field(default_factory=list)


class ParentAgent:
    """Runs the parent's tool-use loop against any Anthropic-compatible endpoint."""

    def __init__(
        self,
        *,
        client: ModelClient,
        model: str,
        manager: TaskManager,
        max_turns: int = DEFAULT_PARENT_MAX_TURNS,
        system_prompt: str = PARENT_SYSTEM_PROMPT,
        background_default: bool = False,
        fork: bool = False,
    ) -> None:
        """`fork` turns fork mode on for this run: the parent's tool list also holds the
        subagents' tools (which only a fork can run), so a fork's requests begin with
        exactly the parent's prefix and read it from the prompt cache."""
        self.client = client
        self.model = model
        self.manager = manager
        self.max_turns = max_turns
        self.system_prompt = system_prompt
        self.background_default = background_default
        self.fork = fork
        self.messages: list[JSONObject] = []
        self._tools: list[JSONObject] = []
        self.context = ContextWindow(manager.config.context_window(model), PARENT_MAX_TOKENS)
        """What of `messages` is sent (`sandbox_tools.context`); they stay whole."""
        self.results: list[TaskResult] = []

    def tools(self) -> list[JSONObject]:
        registry = self.manager.registry
        # Built-in types first, then the rest by name: a stable order (the prompt cache
        # needs the same bytes every turn) that a budget cut never takes the built-ins out of.
        builtin = {agent.name for agent in BUILTIN_AGENTS}
        names = sorted(registry.names(), key=lambda n: (n not in builtin, n))
        lines = agent_listing([(n, registry.get(n).description) for n in names])
        if not self.fork:
            return tool_schemas(lines)
        own = tool_schemas(lines, fork=True)
        # TaskOutput and TaskStop are the parent's own (its background tasks); a forked
        # subagent given these definitions reads and stops its background shells with them.
        taken = {t.get("name") for t in own}
        return [*own, *tool_params([n for n in wire.TOOL_NAMES if n not in taken])]

    async def run(self, prompt: str) -> ParentResult:
        self.messages.append({"role": "user", "content": prompt})
        tools = self._tools = self.tools()
        turns = 0
        stop_reason: str | None = None
        while turns < self.max_turns:
            response = await self._model_call(tools)
            turns += 1
            stop_reason = response.stop_reason
            # warnings=False: a malformed tool_use (input not an object) is dumped as it
            # came, then answered by `_call` and echoed by `_echoable`.
            content: list[JSONObject] = [
                block.model_dump(mode="json", exclude_none=True, warnings=False)
                for block in response.content
            ]
            self.messages.append({"role": "assistant", "content": _echoable(content)})
            calls = [b for b in content if b.get("type") == "tool_use"]
            if response.stop_reason == "tool_use" and calls:
                outcomes = await asyncio.gather(*(self._call(block) for block in calls))
                reply: list[JSONValue] = [*outcomes, *self._notifications()]
                self.messages.append({"role": "user", "content": reply})
                continue
            # The model is done for now; background subagents it started are not.
            # Their results come back as the next user turn, so it never has to poll.
            background = self.manager.background
            if not background.has_running(None) and not background.unreported(None):
                return ParentResult(_text(content), turns, stop_reason, self.results)
            await self.manager.background.next_finished(None)
            self.messages.append(
                {"role": "user", "content": list[JSONValue](self._notifications())}
            )
        return ParentResult(
            f"(the parent stopped after its limit of {self.max_turns} turns)",
            turns,
            stop_reason,
            self.results,
        )

    async def _model_call(
        self, tools: list[JSONObject], messages: list[JSONObject] | None = None
    ) -> Message:
        """One model turn (of the context window's view of the conversation, or of
        `messages`); an API error (after the SDK's retries) is a ModelError."""
        if messages is None:
            messages = await self._view(tools)
        try:
            # Prompt-caching breakpoints (tools, system, the conversation rolling), on
            # copies: each turn reads everything the previous turn sent from the cache.
            return await self.client.messages.create(
                model=self.model,
                max_tokens=PARENT_MAX_TOKENS,
                system=system_blocks(self.system_prompt),
                messages=cached_messages(messages),
                tools=cached_tools(tools),
            )
        except Exception as exc:
            # The SDK raised it, so it is imported; importing it before the call would
            # block the loop while its import still runs in the background.
            import anthropic

            if isinstance(exc, anthropic.APIError):
                raise from_sdk_error(exc, max_retries=self.client.max_retries) from exc
            raise

    async def _view(self, tools: list[JSONObject]) -> list[JSONObject]:
        """The conversation as sent: inside the model's window (old tool results
        cleared, then the oldest turns summarised by the model itself)."""

        def size(view: list[JSONObject]) -> int:
            request: JSONValue = {
                "system": self.system_prompt,
                "tools": list[JSONValue](tools),
                "messages": list[JSONValue](view),
            }
            return estimate_tokens(request)

        if not self.context.clear(self.messages, size):
            wanted = self.context.summary_request(self.messages, size)
            if wanted is not None:
                head, upto = wanted
                reply = await self._model_call(tools, head)
                text = _text([b.model_dump(mode="json") for b in reply.content])
                self.context.set_summary(text or "(The summary came back empty.)", upto)
        return self.context.view(self.messages)

    def _notifications(self) -> list[JSONObject]:
        blocks: list[JSONObject] = []
        for result in self.manager.background.take(None):
            self.results.append(result)
            blocks.append(
                {
                    "type": "text",
                    "text": (
                        f"<task-notification>Background task {result.task_id} "
                        f"({result.agent_type}) finished with status {result.status.value}. "
                        f"{result.render()}</task-notification>"
                    ),
                }
            )
        return blocks

    async def _call(self, block: JSONObject) -> JSONObject:
        tool_use_id = str(block["id"])
        name = block.get("name")
        raw = block.get("input")
        if not isinstance(raw, dict):
            return _tool_result(tool_use_id, _malformed(name, raw), True)
        try:
            if name == "Task":
                return await self._task(tool_use_id, raw)
            if name == "TaskOutput":
                return await self._task_output(tool_use_id, raw)
            if name == "TaskStop":
                stop = TaskStopInput.model_validate(raw)
                stopped = await self.manager.stop(stop.task_id)
                text = (
                    f"Stopped {', '.join(stopped)}." if stopped else "That task had already ended."
                )
                return _tool_result(tool_use_id, text, False)
        except ValidationError as exc:
            text = f"Invalid {name} input: {_brief(exc)}"
            if name == "Task":
                await self.manager.recorder.task_refused(tool_use_id, raw, text)
            return _tool_result(tool_use_id, text, True)
        except WardenError as exc:
            text = f"{name} failed. Error: {exc}"
            if name == "Task":
                await self.manager.recorder.task_refused(tool_use_id, raw, text)
            return _tool_result(tool_use_id, text, True)
        if self.fork and name in wire.TOOL_NAMES:
            return _tool_result(
                tool_use_id,
                f"You cannot run {name} yourself: delegate it with Task (fork: true gives "
                "the subagent this conversation and these tools).",
                True,
            )
        return _tool_result(
            tool_use_id, f"Unknown tool {name!r}; the tools are Task, TaskOutput, TaskStop.", True
        )

    async def _task(self, tool_use_id: str, raw: JSONObject) -> JSONObject:
        if "run_in_background" not in raw and self.background_default:
            raw = {**raw, "run_in_background": True}
        task_input = TaskInput.model_validate(raw)
        ignored = unknown_fields(raw)
        if ignored:  # as Claude Code does: the call goes on without them
            await self.manager.recorder.events.emit(
                "task_warning",
                tool_use_id=tool_use_id,
                warning=f"Task input fields ignored (not part of the Task tool): {', '.join(ignored)}",
            )
        if task_input.run_in_background is None:
            agent_type = task_input.subagent_type
            background = agent_type in self.manager.registry and (
                self.manager.registry.get(agent_type).background
            )
            task_input = task_input.model_copy(update={"run_in_background": background})
        denial = self.manager.gate.task_denial(task_input.subagent_type)
        if denial is not None:
            await self.manager.recorder.task_refused(tool_use_id, raw, denial)
            return _tool_result(tool_use_id, denial, True)
        fork = self._fork_prefix(task_input)
        if isinstance(fork, str):
            await self.manager.recorder.task_refused(tool_use_id, raw, fork)
            return _tool_result(tool_use_id, fork, True)
        if task_input.run_in_background:
            ctx = await self.manager.start_background(task_input, fork=fork, call_id=tool_use_id)
            queued = ""
            if ctx.ticket is not None and ctx.ticket.queued:
                queued = (
                    f" It is queued ({ctx.ticket.position} ahead of it): the "
                    "max_concurrent_total cap of subagents running at once is reached, so it "
                    "starts when one finishes."
                )
            return _tool_result(
                tool_use_id,
                f"Task started in the background with id {ctx.task_id} ({ctx.agent_type})."
                f"{queued} You will be notified when it finishes; TaskOutput and TaskStop take "
                "this id.",
                False,
            )
        result = await self.manager.run_task(task_input, fork=fork, call_id=tool_use_id)
        self.results.append(result)
        return _tool_result(tool_use_id, result.render(), result.is_error)

    def _fork_prefix(self, task_input: TaskInput) -> ForkPrefix | str | None:
        """The prefix a fork-mode call starts from; None for a fresh subagent; a
        string says why the call is refused."""
        wanted = task_input.fork
        if wanted is None:
            wanted = self.manager.registry.get(task_input.subagent_type).fork and self.fork
        if not wanted:
            return None
        if not self.fork:
            return (
                "Task failed. Error: fork mode is off for this run; start a fresh subagent "
                "(leave out fork), or run warden with --fork."
            )
        if task_input.session_id is not None:
            return "Task failed. Error: fork and session_id exclude each other; pass one."
        return ForkPrefix(
            model=self.model,
            system_prompt=self.system_prompt,
            tool_definitions=list(self._tools),
            messages=list(self.messages),
        )

    async def _task_output(self, tool_use_id: str, raw: JSONObject) -> JSONObject:
        request = TaskOutputInput.model_validate(raw)
        task_id = request.task_id
        if task_id not in self.manager.tasks:
            return _tool_result(
                tool_use_id, f"No task {task_id!r} in this run. {TASK_ID_WARNING}", True
            )
        timeout_s = min(request.timeout, MAX_OUTPUT_TIMEOUT_MS) / 1000
        result = await self.manager.wait_for(task_id, timeout_s if request.block else 0)
        if result is None:
            ctx = self.manager.tasks[task_id]
            return _tool_result(
                tool_use_id, f"Task {task_id} is {ctx.status.value}; no result yet.", False
            )
        # Reported here, so it is not reported again as a notification.
        self.manager.background.reported(None, result)
        self.results.append(result)
        return _tool_result(
            tool_use_id, f"Task {task_id} status: {result.status.value}. {result.render()}", False
        )


def _echoable(content: list[JSONObject]) -> list[JSONValue]:
    """The assistant's blocks as they go back to the API next turn: a tool_use whose
    input is not an object (the model's JSON did not parse) is echoed with `{}`, since
    the API refuses the request (HTTP 400) otherwise; its call is answered with an
    error (`_malformed`)."""
    return [
        {**b, "input": {}}
        if b.get("type") == "tool_use" and not isinstance(b.get("input"), dict)
        else b
        for b in content
    ]


MALFORMED_PREVIEW_CHARS = 200
"""How much of a malformed tool input is quoted back to the model."""


def _malformed(name: JSONValue | None, raw: JSONValue | None) -> str:
    shown = json.dumps(raw)
    if len(shown) > MALFORMED_PREVIEW_CHARS:
        shown = shown[:MALFORMED_PREVIEW_CHARS] + "… [truncated]"
    kind = type(raw).__name__ if raw is not None else "missing"
    return (
        f"Invalid {name} call: its input must be a JSON object of named fields, but it was "
        f"a {kind} ({shown}); it was not run. Call {name} again with an object input, "
        'e.g. {"description": ..., "prompt": ..., "subagent_type": ...} for Task.'
    )


def _tool_result(tool_use_id: str, text: str, is_error: bool) -> JSONObject:
    out: JSONObject = {"type": "tool_result", "tool_use_id": tool_use_id, "content": text}
    if is_error:
        out["is_error"] = True
    return out


def _text(content: list[JSONObject]) -> str:
    return "".join(
        text for b in content if b.get("type") == "text" and isinstance(text := b.get("text"), str)
    ).strip()


def _brief(exc: ValidationError) -> str:
    return json.dumps(
        [{"field": ".".join(map(str, e["loc"])), "error": e["msg"]} for e in exc.errors()[:5]]
    )
