"""The Task tool's host side: spawn a subagent in its own container, enforce its
deadline by killing the container, and turn what happened into a `TaskResult`.

A subagent's life: resolve its agent definition → new task id and socket
directory → broker on that socket → hardened container running
`python3 -m sandbox_tools` with the socket mounted → wait until it exits or
its deadline passes (then kill) → result from the broker (or from how the
container ended) → container and socket removed, always.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import secrets
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from orchestrator import labels
from orchestrator.backend.base import (
    ContainerBackend,
    DiskLimits,
    Mount,
    ResourceLimits,
    SandboxResult,
    SandboxSpec,
    SandboxStatus,
)
from orchestrator.backend.disk import DiskGuardedBackend
from orchestrator.broker import Broker, Budget, SandboxIdentity, Upstream, make_socket_dir
from orchestrator.broker.limits import raise_open_file_limit
from orchestrator.errors import StoreError, WardenError
from orchestrator.results.task_setup import task_setup
from orchestrator.runtime.admission import AdmissionQueue, Ticket
from orchestrator.runtime.events import EventLog
from orchestrator.runtime.host import TaskHost
from orchestrator.runtime.model_errors import from_upstream
from orchestrator.runtime.pool import WARM_WAIT_S, PoolKey, WarmPool
from orchestrator.workspace import WorkspaceGuard
from sandbox_tools import conversation, wire

log = logging.getLogger(__name__)

RUNNER_COMMAND = ("python3", "-m", "sandbox_tools")
TASK_ID_PREFIX = "sa_"
TASK_ID_BYTES = 12
"""Random bytes in a task id: unguessable, so an old or invented id finds nothing."""
STDERR_TAIL_CHARS = 2_000
"""How much of a failed runner's stderr goes into the error message."""
RESULT_PREVIEW_CHARS = 200
REMOVED_ERROR = (
    "the subagent's container was removed from outside warden (e.g. `docker rm -f`) "
    "while it ran; its transcript so far is kept: resume the session to continue"
)


def new_task_id() -> str:
    return TASK_ID_PREFIX + secrets.token_hex(TASK_ID_BYTES)


class TaskStatus(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    STOPPED = "stopped"
    INTERRUPTED = "interrupted"
    NO_OUTPUT = "no_output"
    DISK_LIMIT = "disk_limit"
    """Killed for crossing a disk limit (bytes written, or the free-space floor)."""


class TaskInput(BaseModel):
    """The `Task` tool's input, as the model sends it (Claude Code's schema). The
    field docstrings are the descriptions the model sees (`parent_tools`)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    description: str = Field(min_length=1, max_length=200)
    """A short (3-5 word) description of the task."""
    prompt: str = Field(min_length=1, max_length=100_000)
    """The task for the subagent: all it will know."""
    subagent_type: str = Field(min_length=1, max_length=100)
    """The type of agent to use."""
    max_turns: int | None = Field(default=None, ge=1, le=1000)
    """Lower the agent's turn cap for this task (never raise it)."""
    run_in_background: bool = False
    """Return at once with a task id; the result arrives later."""
    session_id: str | None = Field(default=None, max_length=100)
    """Resume that subagent session (its task id) instead of starting a new one."""


class TaskResult(BaseModel):
    """What a finished task gives its parent (the Python API's typed result)."""

    model_config = ConfigDict(extra="forbid")

    task_id: str
    session_id: str
    agent_type: str
    status: TaskStatus
    text: str = ""
    """The subagent's final answer (empty unless completed)."""
    error: str | None = None
    duration_s: float = 0.0
    timeout_s: float | None = None
    turns: int = 0
    tokens: int = 0
    queued_s: float | None = None
    """How long it waited for a slot behind max_concurrent_total; None: not queued."""

    def render(self) -> str:
        """The tool-result text the parent's model receives. Stable wording."""
        if self.queued_s is None:
            return self._outcome()
        return (
            f"{self._outcome()}\n(It was queued for {self.queued_s:.1f} s: the "
            "max_concurrent_total cap of subagents running at once was reached.)"
        )

    def _outcome(self) -> str:
        match self.status:
            case TaskStatus.COMPLETED:
                return f"Task Succeeded. Result: {self.text}"
            case TaskStatus.NO_OUTPUT:
                return "Task completed but returned no output."
            case TaskStatus.TIMED_OUT:
                return f"Task timed out after {self.timeout_s or self.duration_s:g} s."
            case TaskStatus.STOPPED:
                return "Task was stopped before it finished."
            case TaskStatus.INTERRUPTED:
                return "Task was interrupted (the orchestrator stopped); it can be resumed."
            case _:
                return f"Task failed. Error: {self.error or 'unknown error'}"

    @property
    def is_error(self) -> bool:
        return self.status not in (TaskStatus.COMPLETED, TaskStatus.NO_OUTPUT)


class PermissionGate(Protocol):
    """Decides the tool calls of one task (the permissions layer implements it)."""

    async def decide(
        self, task: TaskContext, request: wire.PermissionRequest
    ) -> wire.PermissionResponse: ...


class AllowAgentTools:
    """The minimal gate: a tool in the agent's definition is allowed.

    (The broker already refuses tools outside the definition.)
    """

    async def decide(
        self, task: TaskContext, request: wire.PermissionRequest
    ) -> wire.PermissionResponse:
        return wire.PermissionResponse(behavior="allow", reason="tool is in the agent definition")


@dataclass
class TaskContext:
    """Live state of one task, shared by its broker, the manager and the display."""

    task_id: str
    session_id: str
    run_id: str
    trace_id: str
    parent_id: str | None
    depth: int
    agent: Any  # orchestrator.agents.registry.AgentDefinition
    description: str
    timeout_s: float
    started: float = field(default_factory=time.monotonic)
    status: TaskStatus = TaskStatus.PENDING
    container_id: str | None = None
    current_tool: str | None = None
    result: wire.ResultRequest | None = None
    broker: Broker | None = None
    stop_requested: bool = False
    tokens: int = 0
    """Tokens its model calls used so far (every usage field)."""
    ticket: Ticket | None = None
    """Its place in the admission queue (see `orchestrator.runtime.admission`)."""

    @property
    def agent_type(self) -> str:
        return str(self.agent.name)


@dataclass
class TaskManagerConfig:
    """Caps the host enforces, whatever a subagent asks."""

    max_total_tokens: int | None = None
    """Token budget of each subagent (every usage field over all its model calls,
    checked before each call); an agent's `tokenBudget` may lower it, never raise it."""
    fallback_uid: int = 1000
    """uid:gid sandboxes run as when the workspace is owned by root."""
    user: str | None = None
    """`uid:gid` every sandbox runs as (`warden run --user`; never root); default:
    the workspace owner."""
    max_depth: int = 1
    """How deep tasks may nest: 1 = subagents may not delegate; 2 = they may, once."""
    max_children_per_task: int = 10
    """Most subagents one subagent may start over its life."""
    max_concurrent_total: int = 32
    """Most subagents running at once in this run. More wait in a FIFO queue (their
    tool result says they were queued and for how long)."""
    queue_limit: int = 256
    """Most tasks waiting for a slot; past it a task is refused, saying so."""
    warm_pool_size: int = 1
    """Warm sandboxes kept ready per image and limits (0: every task starts cold)."""
    disk: DiskLimits = field(default_factory=DiskLimits)
    """Disk limits of every sandbox (an agent's `diskWriteLimit` may only lower the cap)."""
    model_max_retries: int = wire.DEFAULT_MODEL_MAX_RETRIES
    """Retries of one subagent model call on 429/5xx/529."""
    model_retry_total_s: float = wire.DEFAULT_MODEL_RETRY_TOTAL_S
    """Longest one subagent model call keeps retrying."""

    @classmethod
    def from_settings(cls, settings: Any, **overrides: Any) -> TaskManagerConfig:
        """The caps and retry budget of `Settings` (flags passed as overrides)."""
        values: dict[str, Any] = dict(
            max_depth=settings.max_depth,
            max_children_per_task=settings.max_children,
            max_concurrent_total=settings.max_concurrent,
            queue_limit=settings.queue_limit,
            model_max_retries=settings.model_max_retries,
            model_retry_total_s=settings.model_retry_total_s,
            disk=settings.disk_limits(),
        )
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


class CapError(WardenError):
    """A cap on tasks was hit; the message says which and what to do."""


class TaskManager:
    """Spawns and supervises the subagents of one run."""

    def __init__(
        self,
        *,
        backend: ContainerBackend,
        registry: Any,  # orchestrator.agents.registry.AgentRegistry
        upstream: Upstream,
        events: EventLog,
        store: Any,
        workspace: Path,
        session: str,
        run_id: str,
        trace_id: str,
        default_model: str,
        image_resolver: Any,  # Callable[[str], str]: agent image name -> image tag
        gate: PermissionGate | None = None,
        config: TaskManagerConfig | None = None,
        runner_command: tuple[str, ...] = RUNNER_COMMAND,
        guard: WorkspaceGuard | None = None,
    ) -> None:
        # Every sandbox of the run is watched for its disk limits (backend/disk.py).
        self.backend: ContainerBackend = DiskGuardedBackend(backend)
        self.guard = guard or WorkspaceGuard.prepare(workspace)
        """What sandboxes may not write (made before the first sandbox starts)."""
        self.registry = registry
        self.upstream = upstream
        self.upstream_for: Callable[[Upstream, str, str | None], Upstream] | None = None
        """Wraps the upstream a task's broker forwards model calls with (tracing)."""
        self.events = events
        self.store = store
        self.workspace = workspace
        self.session = session
        self.run_id = run_id
        self.trace_id = trace_id
        self.default_model = default_model
        self.image_resolver = image_resolver
        self.gate: PermissionGate = gate or AllowAgentTools()
        self.config = config or TaskManagerConfig()
        self.runner_command = runner_command
        raise_open_file_limit()
        self.identity = sandbox_identity(workspace, self.config.fallback_uid, self.config.user)
        """The uid:gid every sandbox of this run runs as; its broker admits only it."""
        self.tasks: dict[str, TaskContext] = {}
        self.results: dict[str, TaskResult] = {}
        self.children_started: dict[str | None, int] = {}
        self.notifications: dict[str | None, list[TaskResult]] = {}
        """Finished background tasks not yet reported, by parent id (None = root)."""
        self._running: dict[str, asyncio.Task[TaskResult]] = {}
        self._finished = asyncio.Condition()
        # Container waits block a thread each for as long as the subagent runs;
        # they get their own pool so they never starve other blocking calls.
        # A nested task runs on its waiting parent's slot: up to max_depth containers each.
        self.admission = AdmissionQueue(self.config.max_concurrent_total, self.config.queue_limit)
        self._waits = ThreadPoolExecutor(
            max_workers=self.config.max_concurrent_total * self.config.max_depth
            + self.config.warm_pool_size * 4
            + 4,
            thread_name_prefix="warden-wait",
        )
        # Warm starts only make sense for the real runner, which knows --wait.
        self.pool = WarmPool(
            backend=self.backend,
            size=self.config.warm_pool_size if runner_command == RUNNER_COMMAND else 0,
            blocking=self._blocking,
            new_socket_dir=lambda: make_socket_dir(self.identity),
        )

    async def close(self) -> None:
        """Stop every task still running, remove warm sandboxes, release the threads."""
        running = [t for t in self._running.values() if not t.done()]
        if running:
            await self.stop_all()
            await asyncio.gather(*running, return_exceptions=True)
        await self.pool.close()
        self._waits.shutdown(wait=False, cancel_futures=True)

    def prewarm(self, *agent_types: str) -> None:
        """Start warm sandboxes for these agent types now, ahead of their first task."""
        for name in agent_types:
            agent = self.registry.get(name)
            key = self._pool_key(agent)
            self.pool.refill(key, self._warm_factory(agent))

    def _warm_factory(self, agent: Any) -> Any:
        return lambda socket_dir: self._sandbox_spec(agent, socket_dir, task_id=None)

    async def _blocking(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._waits, fn, *args)

    # -- the Task tool ----------------------------------------------------

    async def run_task(
        self, task_input: TaskInput, *, parent: TaskContext | None = None
    ) -> TaskResult:
        """Run one subagent to the end and return its result.

        Raises UnknownAgentError, CapError, TaskNotFoundError (resume of an unknown
        session) before anything starts; what the subagent does never raises.
        """
        ctx, spec = await self._prepare(task_input, parent)
        return await self._supervise(ctx, spec)

    async def start_background(
        self, task_input: TaskInput, *, parent: TaskContext | None = None
    ) -> TaskContext:
        """Start a subagent and return at once; its result arrives as a notification."""
        ctx, spec = await self._prepare(task_input, parent)
        runner = asyncio.create_task(self._supervise(ctx, spec), name=ctx.task_id)
        self._running[ctx.task_id] = runner
        return ctx

    def running_count(self) -> int:
        return sum(1 for c in self.tasks.values() if c.status in _ACTIVE)

    def _check_caps(self, parent: TaskContext | None) -> None:
        depth = (parent.depth if parent else 0) + 1
        if depth > self.config.max_depth:
            raise CapError(
                f"max_depth cap ({self.config.max_depth}) reached: a subagent at depth "
                f"{depth - 1} may not delegate further. Do the work yourself, or report back "
                "to your parent what is left to do."
            )
        parent_id = parent.task_id if parent else None
        if (
            parent is not None
            and self.children_started.get(parent_id, 0) >= self.config.max_children_per_task
        ):
            raise CapError(
                f"max_children_per_task cap ({self.config.max_children_per_task}) reached for "
                f"{parent_id}: it may not start more subagents. Do the rest yourself or report "
                "back what is left."
            )

    async def _prepare(
        self, task_input: TaskInput, parent: TaskContext | None
    ) -> tuple[TaskContext, wire.TaskSpec]:
        agent = self.registry.get(task_input.subagent_type)
        self._check_caps(parent)
        history: list[dict[str, Any]] = []
        session_id: str | None = None
        if task_input.session_id is not None:
            session_id, history = await self._load_session(task_input.session_id, agent.name)
        # Past max_concurrent_total the task queues (QueueFullError when the queue is full).
        ticket = self.admission.take(parent.ticket if parent else None)
        max_turns = agent.max_turns
        if task_input.max_turns is not None:
            max_turns = min(max_turns, task_input.max_turns)
        task_id = new_task_id()
        depth = (parent.depth + 1) if parent else 1
        ctx = TaskContext(
            task_id=task_id,
            session_id=session_id or task_id,
            run_id=self.run_id,
            trace_id=self.trace_id,
            parent_id=parent.task_id if parent else None,
            depth=depth,
            agent=agent,
            description=task_input.description,
            timeout_s=float(agent.timeout_s),
            ticket=ticket,
        )
        self.tasks[task_id] = ctx
        self.children_started[ctx.parent_id] = self.children_started.get(ctx.parent_id, 0) + 1
        listed = wire.TOOL_NAMES if agent.tools is None else agent.tools
        tools = [t for t in listed if t != "Task"]
        if depth < self.config.max_depth and (agent.tools is None or "Task" in agent.tools):
            tools.append("Task")
        spec = wire.TaskSpec(
            task_id=task_id,
            parent_id=ctx.parent_id,
            trace_id=self.trace_id,
            agent_type=agent.name,
            description=task_input.description,
            model=agent.model or self.default_model,
            system_prompt=agent.system_prompt,
            prompt=task_input.prompt,
            history=history,
            tools=tools,
            max_turns=max_turns,
            model_max_retries=self.config.model_max_retries,
            model_retry_total_s=self.config.model_retry_total_s,
        )
        try:
            await self._record_created(ctx, task_input)
        except BaseException:
            self.admission.release(ticket)
            raise
        return ctx, spec

    async def _load_session(
        self, session_id: str, agent_type: str
    ) -> tuple[str, list[dict[str, Any]]]:
        from orchestrator.errors import TaskNotFoundError

        if self.store is None:
            raise TaskNotFoundError(f"cannot resume {session_id}: this run has no store")
        mine = await asyncio.to_thread(self.store.list_tasks, session_id=session_id)
        if not mine:
            raise TaskNotFoundError(
                f"no subagent session {session_id!r}; session ids are the task ids that Task "
                "calls returned (see `warden ps`)"
            )
        if any(t.agent_type != agent_type for t in mine):
            raise TaskNotFoundError(
                f"session {session_id} belongs to a {mine[0].agent_type!r} subagent, not "
                f"{agent_type!r}; resume it with subagent_type={mine[0].agent_type!r}"
            )
        if any(t.task_id in self._running and not self._running[t.task_id].done() for t in mine):
            raise CapError(f"session {session_id} is still running; wait for it or stop it first")
        history = await asyncio.to_thread(self.store.get_session_transcript, session_id)
        # A crash can leave unanswered tool calls or broken alternation behind.
        return session_id, conversation.repair(history)

    # -- background results, stop ------------------------------------------

    async def wait_for(self, task_id: str, timeout_s: float | None) -> TaskResult | None:
        """The result of a task, waiting up to timeout_s (None: forever)."""
        runner = self._running.get(task_id)
        if task_id in self.results or runner is None:
            return self.results.get(task_id)
        done, _ = await asyncio.wait({runner}, timeout=timeout_s)
        return self.results.get(task_id) if done else None

    async def next_notification(self, parent_id: str | None) -> None:
        """Block until a background task of this parent finishes (or none is left)."""
        async with self._finished:
            await self._finished.wait_for(
                lambda: (
                    bool(self.notifications.get(parent_id)) or not self.has_background(parent_id)
                )
            )

    def has_background(self, parent_id: str | None) -> bool:
        return any(
            not runner.done() and self.tasks[tid].parent_id == parent_id
            for tid, runner in self._running.items()
        )

    def take_notifications(self, parent_id: str | None) -> list[TaskResult]:
        return self.notifications.pop(parent_id, [])

    def descendants(self, task_id: str) -> list[TaskContext]:
        found: list[TaskContext] = []
        frontier = [task_id]
        while frontier:
            current = frontier.pop()
            for ctx in self.tasks.values():
                if ctx.parent_id == current:
                    found.append(ctx)
                    frontier.append(ctx.task_id)
        return found

    async def stop(self, task_id: str) -> list[str]:
        """Kill a task's container and those of all its descendants; return their ids."""
        ctx = self.tasks.get(task_id)
        if ctx is None:
            from orchestrator.errors import TaskNotFoundError

            raise TaskNotFoundError(
                f"no task {task_id!r} in this run; a task id is valid only if a Task call "
                "in this run returned it"
            )
        targets = [ctx, *self.descendants(task_id)]
        stopped = [c for c in targets if c.status in _ACTIVE]
        for c in stopped:
            c.stop_requested = True
        await asyncio.gather(*(self._kill(c) for c in stopped))
        return [c.task_id for c in stopped]

    async def stop_all(self) -> list[str]:
        active = [c for c in self.tasks.values() if c.status in _ACTIVE]
        for c in active:
            c.stop_requested = True
        await asyncio.gather(*(self._kill(c) for c in active))
        return [c.task_id for c in active]

    async def _kill(self, ctx: TaskContext) -> None:
        if ctx.ticket is not None:
            self.admission.withdraw(ctx.ticket)  # stopped while queued: never starts
        if ctx.container_id is not None:
            try:
                await asyncio.to_thread(self.backend.kill, ctx.container_id)
            except WardenError:
                log.exception("could not kill %s", ctx.task_id)

    # -- one subagent's life ------------------------------------------------

    async def _supervise(self, ctx: TaskContext, spec: wire.TaskSpec) -> TaskResult:
        """Wait for a slot, run the subagent, give the slot back."""
        assert ctx.ticket is not None
        try:
            try:
                admitted = await self.admission.wait(ctx.ticket)
            except asyncio.CancelledError:
                ctx.stop_requested = True
                await asyncio.shield(self._conclude(ctx, self._result(ctx, None, None, None)))
                raise
            if admitted and not ctx.stop_requested:
                return await self._run_sandbox(ctx, spec)
            await self._conclude(ctx, self._result(ctx, None, None, None))
            return self.results[ctx.task_id]
        finally:
            self.admission.release(ctx.ticket)

    async def _run_sandbox(self, ctx: TaskContext, spec: wire.TaskSpec) -> TaskResult:
        key = self._pool_key(ctx.agent)
        warm = self.pool.take(key)
        self.pool.refill(key, self._warm_factory(ctx.agent))
        socket_dir = warm.socket_dir if warm else make_socket_dir(self.identity)
        if warm:
            ctx.container_id = warm.container_id
        budget = Budget(max_turns=spec.max_turns, max_total_tokens=self._token_budget(ctx.agent))
        forwarding = getattr(self.gate, "forwarding_policy", None)
        broker = Broker(
            socket_dir=socket_dir,
            spec=spec,
            upstream=self.upstream
            if self.upstream_for is None
            else self.upstream_for(self.upstream, ctx.task_id, ctx.parent_id),
            host=TaskHost(self, ctx),
            budget=budget,
            identity=self.identity,
            **({"forwarding": forwarding(ctx)} if forwarding is not None else {}),
        )
        ctx.broker = broker
        sandbox: SandboxResult | None = None
        failure: str | None = None
        ctx.status = TaskStatus.RUNNING
        try:
            await broker.start()
            if warm:
                warm.release()  # its runner was waiting for this broker
            if ctx.container_id is None:
                sandbox_spec = self._sandbox_spec(ctx.agent, socket_dir, task_id=ctx.task_id)
                ctx.container_id = await self._blocking(self.backend.start, sandbox_spec)
            await self._update(
                ctx.task_id,
                status=ctx.status.value,
                container_id=ctx.container_id,
                started_at=time.time(),
            )
            await self._emit(
                "task_started",
                ctx,
                description=ctx.description,
                container_id=ctx.container_id[:12],
                background=ctx.task_id in self._running,
                setup=task_setup(
                    spec,
                    timeout_s=ctx.timeout_s,
                    limits=_limits(ctx.agent),
                    token_budget=budget.max_total_tokens,
                    image=getattr(ctx.agent, "image", None),
                    source=getattr(ctx.agent, "source", None),
                ),
            )
            if ctx.stop_requested:  # stopped while it was starting
                await self._kill(ctx)
            sandbox = await self._blocking(self.backend.wait, ctx.container_id, ctx.timeout_s)
        except asyncio.CancelledError:
            ctx.stop_requested = True
            raise
        except WardenError as exc:
            failure = str(exc)
        finally:
            # Shielded: a cancelled parent must still not leave a container behind,
            # and the task's end must still be recorded.
            await asyncio.shield(self._finish(ctx, broker, socket_dir, sandbox, budget, failure))
        return self.results[ctx.task_id]

    async def _finish(
        self,
        ctx: TaskContext,
        broker: Broker,
        socket_dir: Path,
        sandbox: SandboxResult | None,
        budget: Budget,
        failure: str | None,
    ) -> None:
        try:
            if ctx.container_id is not None:
                await self._blocking(self.backend.remove, ctx.container_id)
        except WardenError:
            log.exception("could not remove container %s of %s", ctx.container_id, ctx.task_id)
        finally:
            await broker.close()
            shutil.rmtree(socket_dir, ignore_errors=True)
        await self._conclude(ctx, self._result(ctx, sandbox, budget, failure))

    async def _conclude(self, ctx: TaskContext, result: TaskResult) -> None:
        self.results[ctx.task_id] = result
        try:
            await self._record_finished(ctx, result)
        except StoreError as exc:  # state disk full or unwritable: the run reports it
            if self.events.failure is None:
                log.warning("could not record the end of %s: %s", ctx.task_id, exc)
        if ctx.task_id in self._running:
            self.notifications.setdefault(ctx.parent_id, []).append(result)
        async with self._finished:
            self._finished.notify_all()

    def _token_budget(self, agent: Any) -> int | None:
        budgets = [
            b for b in (self.config.max_total_tokens, getattr(agent, "token_budget", None)) if b
        ]
        return min(budgets) if budgets else None

    def _sandbox_spec(self, agent: Any, socket_dir: Path, *, task_id: str | None) -> SandboxSpec:
        """The container for one agent; task_id None makes a warm sandbox, whose
        runner imports first and then waits for its broker socket."""
        limits = _limits(agent)
        limits = limits.model_copy(update={"disk": _disk_limits(self.config.disk, agent)})
        command = list(self.runner_command)
        extra = {"task": task_id} if task_id else {"warm": "1"}
        if task_id is None:
            command += ["--wait", f"{WARM_WAIT_S:g}"]
        return SandboxSpec(
            image=self.image_resolver(agent.image),
            command=command,
            workspace=self.workspace,
            mounts=[
                Mount(source=socket_dir, target=wire.BROKER_SOCKET_DIR, read_only=True),
                *self.guard.mounts(),
            ],
            env={"HOME": "/tmp", "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"},
            user=f"{self.identity.uid}:{self.identity.gid}",
            limits=limits,
            warden_labels=labels.warden_labels(self.session, run=self.run_id, **extra),
        )

    def _pool_key(self, agent: Any) -> PoolKey:
        """Warm sandboxes are interchangeable within (image, limits); mounts are not
        part of the key because each sandbox computes its own when it starts."""
        return (self.image_resolver(agent.image), _limits(agent).model_dump_json())

    def _result(
        self,
        ctx: TaskContext,
        sandbox: SandboxResult | None,
        budget: Budget | None,
        failure: str | None,
    ) -> TaskResult:
        duration = time.monotonic() - ctx.started
        common: dict[str, Any] = dict(
            task_id=ctx.task_id,
            session_id=ctx.session_id,
            agent_type=ctx.agent_type,
            duration_s=round(duration, 3),
            timeout_s=ctx.timeout_s,
            turns=budget.turns_used if budget else 0,
            tokens=budget.tokens_used if budget else 0,
            queued_s=round(ctx.ticket.waited_s, 3) if ctx.ticket and ctx.ticket.queued else None,
        )
        posted = ctx.result
        if sandbox is not None and sandbox.status is SandboxStatus.DISK_LIMIT:
            return TaskResult(status=TaskStatus.DISK_LIMIT, error=sandbox.reason, **common)
        # Killed by TaskStop, Ctrl-C, or `warden stop` from another process.
        if ctx.stop_requested or (sandbox is not None and sandbox.status is SandboxStatus.KILLED):
            return TaskResult(status=TaskStatus.STOPPED, **common)
        if failure is not None:
            return TaskResult(status=TaskStatus.FAILED, error=failure, **common)
        if sandbox is not None and sandbox.status is SandboxStatus.TIMED_OUT:
            return TaskResult(status=TaskStatus.TIMED_OUT, error="deadline passed", **common)
        if posted is not None and posted.status == "completed":
            if not posted.text.strip():
                return TaskResult(status=TaskStatus.NO_OUTPUT, **common)
            return TaskResult(status=TaskStatus.COMPLETED, text=posted.text, **common)
        if budget is not None and budget.exhausted is not None:  # the host's word
            return TaskResult(status=TaskStatus.FAILED, error=budget.exhausted, **common)
        if posted is not None:
            # A failed model call is told from what the host saw upstream.
            upstream = from_upstream(ctx.broker.model_failures if ctx.broker else None)
            error = upstream or posted.error or "subagent failed"
            return TaskResult(status=TaskStatus.FAILED, error=error, **common)
        return TaskResult(status=TaskStatus.FAILED, error=_exit_error(sandbox), **common)

    # -- records ----------------------------------------------------------

    async def _emit(self, kind: str, ctx: TaskContext, **data: Any) -> None:
        await self.events.emit_for(kind, ctx, **data)

    async def _update(self, task_id: str, **fields: Any) -> None:
        if self.store is not None:
            await asyncio.to_thread(self.store.update_task, task_id, **fields)

    async def _record_created(self, ctx: TaskContext, task_input: TaskInput) -> None:
        if self.store is None:
            return
        from orchestrator.store import TaskRecord

        record = TaskRecord(
            task_id=ctx.task_id,
            run_id=ctx.run_id,
            parent_id=ctx.parent_id,
            session_id=ctx.session_id,
            agent_type=ctx.agent_type,
            description=ctx.description,
            prompt=task_input.prompt,
            status=TaskStatus.PENDING.value,
            depth=ctx.depth,
            trace_id=ctx.trace_id,
            created_at=time.time(),
        )
        await asyncio.to_thread(self.store.create_task, record)

    async def _record_finished(self, ctx: TaskContext, result: TaskResult) -> None:
        ctx.status = result.status
        await self._update(
            ctx.task_id,
            status=result.status.value,
            ended_at=time.time(),
            result_text=result.text or None,
            error=result.error,
            tokens=result.tokens,
        )
        kind = {
            TaskStatus.COMPLETED: "task_completed",
            TaskStatus.NO_OUTPUT: "task_completed",
            TaskStatus.TIMED_OUT: "task_timed_out",
            TaskStatus.STOPPED: "task_stopped",
        }.get(result.status, "task_failed")
        await self._emit(
            kind,
            ctx,
            status=result.status.value,
            duration_s=result.duration_s,
            turns=result.turns,
            tokens=result.tokens,
            result_preview=result.text[:RESULT_PREVIEW_CHARS],
            error=result.error,
        )


_ACTIVE = (TaskStatus.PENDING, TaskStatus.RUNNING)


def _limits(agent: Any) -> ResourceLimits:
    limits = ResourceLimits()
    if getattr(agent, "memory", None):
        limits = limits.model_copy(update={"memory_bytes": int(agent.memory)})
    if getattr(agent, "cpus", None):
        limits = limits.model_copy(update={"cpus": float(agent.cpus)})
    if getattr(agent, "pids", None):
        limits = limits.model_copy(update={"pids": int(agent.pids)})
    return limits


def sandbox_identity(
    workspace: Path, fallback_uid: int, user: str | None = None
) -> SandboxIdentity:
    """`user` when given, else the workspace owner's uid:gid (so files it writes stay
    the user's), or the fallback when root owns the workspace: a sandbox never runs
    as root (`parse_user` refuses uid or gid 0)."""
    if user is not None:
        from orchestrator.backend.base import parse_user

        return SandboxIdentity(*parse_user(user))
    try:
        owner = workspace.stat()
    except OSError:
        return SandboxIdentity(fallback_uid, fallback_uid)
    if owner.st_uid == 0:
        return SandboxIdentity(fallback_uid, fallback_uid)
    return SandboxIdentity(owner.st_uid, owner.st_gid or fallback_uid)


def _disk_limits(run: DiskLimits, agent: Any) -> DiskLimits:
    """The run's limits; an agent file may lower the write cap, never raise it (agent
    files can come from the workspace, and the cap protects the host)."""
    own = getattr(agent, "disk_write_limit", None)
    if not own or (run.write_limit_bytes and own >= run.write_limit_bytes):
        return run
    return run.model_copy(update={"write_limit_bytes": int(own)})


def _exit_error(sandbox: SandboxResult | None) -> str:
    if sandbox is None:
        return "the subagent's container did not start"
    if sandbox.status is SandboxStatus.OOM_KILLED:
        return "the subagent's container ran out of memory and was killed"
    if sandbox.status is SandboxStatus.KILLED:
        return "the subagent's container was killed"
    if sandbox.status is SandboxStatus.REMOVED:
        return REMOVED_ERROR
    tail = sandbox.stderr[-STDERR_TAIL_CHARS:].strip()
    return f"the subagent exited with code {sandbox.exit_code} without a result" + (
        f"; its last output: {tail}" if tail else ""
    )
