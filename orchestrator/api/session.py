"""One run for a program that embeds warden: `RunConfig` (what `warden run`'s flags
say), `open_session` (the run, started; its result document written when it ends)
and `WardenRun` (the Task tool's three calls, events and the agent types)."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrator.backend.contract import DiskLimits
from orchestrator.config import Settings
from orchestrator.egress.limits import EgressLimits
from orchestrator.errors import ConfigError, TaskRefusedError, WardenError
from orchestrator.exit_codes import ExitCode, Outcome
from orchestrator.jsontypes import JSONObject, to_json_object
from orchestrator.permissions.approval_hub import ApproverHub
from orchestrator.permissions.approvers import (
    ApprovalAnswer,
    ApprovalQuestion,
    Approver,
    CallbackApprover,
)
from orchestrator.permissions.models import Mode
from orchestrator.results.models import Event
from orchestrator.results.output_files import at_start
from orchestrator.results.report import RunOutputs, RunState, one_line, write_outcome
from orchestrator.runtime.tasks import TaskInput, TaskResult, TaskStatus
from orchestrator.schema_docs import documented

if TYPE_CHECKING:
    from orchestrator.runtime.parent import ParentOptions
    from orchestrator.runtime.session import Run

log = logging.getLogger(__name__)

Question = Callable[[ApprovalQuestion], ApprovalAnswer | Awaitable[ApprovalAnswer]]
"""A callback that answers an "ask" (sync callbacks run in a worker thread)."""


class RunConfig(BaseModel):
    """What a run is allowed to do: `warden run`'s flags as one closed model. Every
    field left out takes the value `warden run` would (settings files, environment)."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=documented)

    workspace: Path
    """Directory shared with every subagent at /workspace."""
    label: str = "library run"
    """What `warden ps` shows as the run's prompt (`warden run`: the prompt)."""
    model: str | None = None
    """Model of the subagents (default: claude-sonnet-5 or WARDEN's alias)."""
    policy: str | None = None
    """Policy file, or a shipped one by name: default, ci, strict."""
    allow: tuple[str, ...] = ()
    """Extra allow rules (Claude Code syntax), as --allow."""
    deny: tuple[str, ...] = ()
    """Extra deny rules, as --deny."""
    mode: Mode | None = None
    """Permission mode (None: from the settings files, else 'default')."""
    trusted: bool | None = None
    """Whether the workspace's own allow rules, mode, hooks and agent files apply
    (None: as recorded by `--trust-workspace`/WARDEN_TRUST_WORKSPACE)."""
    max_depth: int | None = Field(default=None, ge=1)
    """How deep subagents may nest (None: the settings')."""
    max_concurrent: int | None = Field(default=None, ge=1)
    """Subagents running at once; more wait in a queue."""
    max_children: int | None = Field(default=None, ge=1)
    """Subagents one subagent may start."""
    queue_limit: int | None = Field(default=None, ge=0)
    """Tasks that may wait for a slot before more are refused."""
    token_budget: int | None = Field(default=None, ge=1)
    """Tokens each subagent may spend."""
    protect: tuple[str, ...] = ()
    """Workspace paths mounted read-only in every sandbox."""
    user: str | None = None
    """uid:gid every sandbox runs as (None: the workspace owner; never root)."""
    image: str | None = None
    """Image of the subagents, as --image."""
    bash_image: str | None = None
    """Image of the built-in bash type, as --bash-image."""
    devcontainer: bool | None = None
    """Use the workspace's dev container (None: the setting)."""
    allow_domains: tuple[str, ...] = ()
    """Egress: domains subagents may reach through the host's proxy."""
    deny_domains: tuple[str, ...] = ()
    """Egress: domains refused even when another rule allows them."""
    egress: bool = False
    """Give subagents the egress proxy even when no rule allows a domain."""
    egress_limits: EgressLimits | None = None
    """Byte and connection caps of each task's egress (None: the defaults)."""
    disk: DiskLimits | None = None
    """Each sandbox's disk limits (None: the settings')."""
    approval_timeout_s: float | None = Field(default=None, ge=1)
    """Deny a question nobody answers within this time."""
    fail_on: tuple[Outcome, ...] = ()
    """Outcomes that make the result's exit code 3, as --fail-on."""
    junit: Path | None = None
    """Write a JUnit report here when the run ends."""
    result_file: Path | None = None
    """Write the result document (as `warden run --output-format json`) here."""
    audit_out: Path | None = None
    """Write the run's permission decisions here as JSON."""


@dataclass(frozen=True)
class AgentType:
    """A subagent type a Task call may name."""

    name: str
    description: str
    source: str
    """Where it is defined: built-in, or the agent file's path."""


def open_run_from(
    config: RunConfig,
    settings: Settings,
    approver: Approver,
    *,
    parent_options: ParentOptions | None = None,
) -> AbstractAsyncContextManager[Run]:
    """The run `config` describes (`runtime.session.open_run`): the one mapping from
    a run's options to a run, used by the library, `warden run` and `warden mcp`.
    `parent_options`: how `warden run`'s parent loop runs (the others have none)."""
    from orchestrator.egress.setup import EgressRequest
    from orchestrator.runtime.caps import TaskManagerConfig
    from orchestrator.runtime.session import open_run

    return open_run(
        settings,
        workspace=config.workspace,
        prompt=config.label,
        model=config.model,
        approver=approver,
        policy=config.policy,
        allow=config.allow,
        deny=config.deny,
        mode=config.mode,
        config=TaskManagerConfig.from_settings(
            settings,
            max_total_tokens=config.token_budget,
            fallback_uid=settings.fallback_uid,
            disk=config.disk or DiskLimits.from_settings(settings),
            user=config.user,
            max_depth=config.max_depth,
            max_concurrent_total=config.max_concurrent,
            max_children_per_task=config.max_children,
            queue_limit=config.queue_limit,
        ),
        protect=config.protect,
        egress=EgressRequest(
            allow_domains=config.allow_domains,
            deny_domains=config.deny_domains,
            enabled=config.egress,
            limits=config.egress_limits or EgressLimits(),
        ),
        image=config.image,
        bash_image=config.bash_image,
        devcontainer=config.devcontainer,
        trusted=config.trusted,
        parent_options=parent_options,
    )


def question_hub(
    config: RunConfig, on_question: Question | None, approver: Approver | None
) -> ApproverHub:
    """Who answers the run's questions: `approver` and/or the `on_question` callback
    as channels of one hub (the first answer wins; `WardenRun.add_approver` adds
    more), bounded in time by `config.approval_timeout_s`; with no channel every
    question gets the mode's answer (deny), as in CI."""
    channels: list[Approver] = []
    if approver is not None:
        channels.append(approver)
    if on_question is not None:
        channels.append(CallbackApprover(on_question))
    return ApproverHub(channels, timeout_s=config.approval_timeout_s)


@asynccontextmanager
async def open_session(
    config: RunConfig,
    *,
    settings: Settings | None = None,
    on_question: Question | None = None,
    approver: Approver | None = None,
) -> AsyncIterator[WardenRun]:
    """A run, started: every subagent it starts runs in its own sandbox under the
    policy `config` and the settings files give. On exit every task still running is
    stopped and every container of the run is gone; the run is recorded as completed
    (stopped when cancelled, failed on an error) and `config`'s result files are written.

    `settings`: None reads the environment (`Settings.from_env`), which also names the
    model endpoint (ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY). Questions go to `approver`
    or the `on_question` callback (both, or more with `WardenRun.add_approver`: the
    first answer wins); with none, every question gets the mode's answer, deny.
    Raises ConfigError, PolicyError, ImageNotFoundError… before anything starts."""
    if settings is None:
        settings = Settings.from_env()
    if settings.anthropic_api_key is None:
        raise ConfigError(
            "ANTHROPIC_API_KEY is not set: set it (and ANTHROPIC_BASE_URL for another "
            "Anthropic-compatible endpoint), or pass Settings with anthropic_api_key"
        )
    hub = question_hub(config, on_question, approver)
    # The result files' directories, as they are before any sandbox runs.
    junit, audit, result_file = map(at_start, (config.junit, config.audit_out, config.result_file))
    state = RunState()
    code = ExitCode.OK
    try:
        async with open_run_from(config, settings, hub) as run:
            state.run_id, state.events_path = run.run_id, run.events_path
            try:
                yield WardenRun(run, hub)
                state.status = "completed"
            except asyncio.CancelledError:
                state.status, code = "stopped", ExitCode.INTERRUPTED
                await asyncio.shield(run.manager.close())
                raise
            except BaseException as exc:
                state.status, code = "failed", ExitCode.RUN_ERROR
                state.error = one_line(exc)
                raise
            finally:
                await asyncio.shield(_record_end(run, state))
                await asyncio.shield(hub.aclose())
    finally:
        if state.run_id is not None and (config.junit or config.result_file or config.audit_out):
            outputs = RunOutputs(fail_on=config.fail_on, junit=junit, audit=audit)
            await asyncio.shield(
                asyncio.to_thread(write_outcome, settings, state, code, outputs, result_file)
            )


async def _record_end(run: Run, state: RunState) -> None:
    from orchestrator.workspace.report import end_of_run_report

    if run.tracer is not None:
        run.tracer.set_outcome(state.status)
    await asyncio.to_thread(run.store.finish_run, run.run_id, state.status, state.error)
    sensitive = await end_of_run_report(run.watch, run.store, run.run_id)
    if sensitive is not None:
        state.sensitive = sensitive.model_dump(mode="json")


TaskCall = TaskInput | Mapping[str, Any]
"""A Task call's input: a `TaskInput`, or the same fields as a mapping (as a model
or an MCP client sends them; validated here)."""


class WardenRun:
    """An open run: the Task tool's calls (`task`, `start`, `output`, `stop`), the
    run's events and its agent types. Made by `open_session`."""

    def __init__(self, run: Run, hub: ApproverHub) -> None:
        self._run = run
        self._hub = hub

    def add_approver(self, approver: Approver) -> Callable[[], None]:
        """Offer every question from now on (and those waiting) to `approver` too; the
        first answer on any channel wins. Returns the function that removes it."""
        return self._hub.add_channel(approver)

    @property
    def run_id(self) -> str:
        return self._run.run_id

    @property
    def workspace(self) -> Path:
        return self._run.workspace

    @property
    def events_path(self) -> Path:
        """The run's events, one JSON object a line (as `warden logs` reads them)."""
        return self._run.events_path

    @property
    def session(self) -> str:
        """The `warden.session` label on every container of this run."""
        return self._run.session

    def agent_types(self) -> list[AgentType]:
        """The types a Task call may name: the built-in ones first, then by name (the
        order the parent's Task tool lists them in)."""
        return [
            AgentType(agent.name, agent.description, agent.source)
            for agent in self._run.manager.registry.listed()
        ]

    async def task(
        self,
        call: TaskCall,
        *,
        call_id: str | None = None,
        on_start: Callable[[str], None] | None = None,
    ) -> TaskResult:
        """Run one subagent to its end and return its result (whatever the subagent
        does, it is a result: failed, timed_out, stopped… never an exception).
        `call_id` names the call in the audit (default: a fresh `api_…` id);
        `on_start` is called with the task id as soon as the task exists. Cancelling
        the await stops the task (and every subagent it started).

        Raises TaskRefusedError when warden refuses the call before a task exists
        (invalid input, a `Task(type)` deny rule, an unknown subagent_type, a cap, an
        unknown session_id); the refusal is recorded as the parent's are."""
        task_input = await self._accepted(call, call_id, background=False)
        manager = self._run.manager
        try:
            ctx = await manager.start_background(task_input)
        except WardenError as exc:
            raise await self._refuse(call, call_id, f"Task failed. Error: {exc}") from exc
        if on_start is not None:
            on_start(ctx.task_id)
        try:
            result = await manager.wait_for(ctx.task_id, None)
        except asyncio.CancelledError:
            await asyncio.shield(manager.stop(ctx.task_id))
            raise
        assert result is not None  # waited without a timeout
        manager.background.reported(None, result)
        return result

    async def start(self, call: TaskCall, *, call_id: str | None = None) -> str:
        """Start a subagent in the background and return its task id at once (collect
        it with `output`, end it with `stop`). Raises TaskRefusedError as `task` does."""
        task_input = await self._accepted(call, call_id, background=True)
        try:
            ctx = await self._run.manager.start_background(task_input)
        except WardenError as exc:
            raise await self._refuse(call, call_id, f"Task failed. Error: {exc}") from exc
        return ctx.task_id

    async def output(self, task_id: str, *, timeout_s: float | None = None) -> TaskResult | None:
        """The task's result, waiting up to `timeout_s` (None: until it ends, 0: not
        at all); None when it is still running. Raises TaskNotFoundError for an id no
        call of this run returned."""
        self.status(task_id)  # raises for an unknown id
        result = await self._run.manager.wait_for(task_id, timeout_s)
        if result is not None:
            self._run.manager.background.reported(None, result)
        return result

    def status(self, task_id: str) -> TaskStatus:
        """Where the task is now. Raises TaskNotFoundError for an unknown id."""
        from orchestrator.errors import TaskNotFoundError

        ctx = self._run.manager.tasks.get(task_id)
        if ctx is None:
            raise TaskNotFoundError(
                f"no task {task_id!r} in this run; a task id is valid only if a Task call "
                "of this run returned it"
            )
        return ctx.status

    async def stop(self, task_id: str) -> list[str]:
        """Kill the task's container and those of every subagent it started; return
        the ids that were still running (empty: it had already ended)."""
        return await self._run.manager.stop(task_id)

    def prewarm(self, *agent_types: str) -> None:
        """Start warm sandboxes for these types now, so their first Task starts sooner
        (as `warden run` does for the built-in ones). Raises UnknownAgentError; their
        images are resolved in the background (a missing one is logged, and its tasks
        raise the error when they start)."""
        self._run.manager.prewarm(*agent_types)

    async def stop_all(self) -> list[str]:
        """Stop every task of the run still running (as Ctrl-C does)."""
        return await self._run.manager.stop_all()

    def subscribe(self, listener: Callable[[Event], None]) -> Callable[[], None]:
        """Call `listener` with every event of the run from now on (on the event loop:
        it must not block); returns the function that unsubscribes it. Event fields
        may hold text a container wrote: treat it as data."""
        return self._run.events.subscribe(listener)

    async def _accepted(self, call: TaskCall, call_id: str | None, background: bool) -> TaskInput:
        if isinstance(call, TaskInput):
            task_input = call
        else:
            try:
                task_input = TaskInput.model_validate(dict(call))
            except ValidationError as exc:
                fields = "; ".join(
                    f"{'.'.join(map(str, e['loc'])) or 'input'}: {e['msg']}"
                    for e in exc.errors()[:5]
                )
                raise await self._refuse(call, call_id, f"Invalid Task input: {fields}") from None
        if task_input.fork:
            raise await self._refuse(
                call,
                call_id,
                "Task failed. Error: fork mode needs warden's own parent conversation; "
                "start a fresh subagent (leave out fork).",
            )
        denial = self._run.manager.gate.task_denial(task_input.subagent_type)
        if denial is not None:
            raise await self._refuse(call, call_id, denial)
        if task_input.run_in_background != background:
            task_input = task_input.model_copy(update={"run_in_background": background})
        return task_input

    async def _refuse(self, call: TaskCall, call_id: str | None, reason: str) -> TaskRefusedError:
        raw: JSONObject = (
            call.model_dump(mode="json", exclude_none=True)
            if isinstance(call, TaskInput)
            else to_json_object(dict(call))
        )
        tool_use_id = call_id or "api_" + secrets.token_hex(8)
        await self._run.manager.recorder.task_refused(tool_use_id, raw, reason)
        return TaskRefusedError(reason)
