"""The Task tool's host side: spawn a subagent in its own container, enforce its
deadline by killing the container, and turn what happened into a `TaskResult`.

A subagent's life: resolve its agent definition → caps (`caps`) → a ticket in
the admission queue (`admission`) → new task id and socket directory → broker
on that socket, answered by a `TaskHost` (`host`) → hardened container
(`sandbox`) running `python3 -m sandbox_tools` with the socket mounted, warm
from the pool (`pool`) when one is ready → wait until it exits or its deadline
passes (then kill) → result from the broker or from how the container ended
(`outcome`) → recorded (`records`) → container and socket removed, always.

One idea a little over 400 lines: the supervision of a task's life, in the order
it happens; each step's own logic lives in the modules named above.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from orchestrator.agents.mcp import ProjectMcp, servers_for
from orchestrator.backend.contract import (
    ContainerBackend,
    SandboxResult,
    SandboxSpec,
    SandboxStatus,
)
from orchestrator.backend.weakened import weakened_guards
from orchestrator.broker import (
    Broker,
    Budget,
    SandboxIdentity,
    Upstream,
    make_socket_dir,
    wire_models,
)
from orchestrator.broker.forwarding_policy import ForwardingPolicy
from orchestrator.broker.limits import open_descriptors, raise_open_file_limit
from orchestrator.broker.listener import ConnectionBudget
from orchestrator.broker.provider_egress import NO_EGRESS
from orchestrator.config import PoolConfig
from orchestrator.errors import StoreError, TaskNotFoundError, WardenError
from orchestrator.jsontypes import JSONObject
from orchestrator.lifecycle import socket_dirs
from orchestrator.owner import run_owner_dead
from orchestrator.permissions.rules import mcp_offer_patterns
from orchestrator.results.task_setup import task_setup
from orchestrator.runtime.admission import AdmissionQueue
from orchestrator.runtime.background import BackgroundTasks
from orchestrator.runtime.briefing import runner_spec, session_history
from orchestrator.runtime.caps import TaskManagerConfig, check_caps
from orchestrator.runtime.endings import TaskEndings
from orchestrator.runtime.host import TaskHost
from orchestrator.runtime.outcome import task_result
from orchestrator.runtime.pool import WarmPool
from orchestrator.runtime.protocols import AllowAgentTools, EventSink, ImageResolver, PermissionGate
from orchestrator.runtime.records import TaskRecorder
from orchestrator.runtime.sandbox import (
    RUNNER_COMMAND,
    SandboxPlan,
    agent_disk_limits,
    agent_limits,
    sandbox_identity,
)
from orchestrator.runtime.subagent_context import ContextSources
from orchestrator.runtime.tasks import (
    ACTIVE_STATUSES,
    ForkPrefix,
    TaskContext,
    TaskInput,
    TaskResult,
    TaskStatus,
    call_overrides,
    new_task_id,
)
from orchestrator.runtime.worktrees import Worktrees
from orchestrator.workspace import WorkspaceGuard
from orchestrator.workspace.changes import TaskChanges

if TYPE_CHECKING:
    from orchestrator.agents.definition import AgentDefinition
    from orchestrator.agents.registry import AgentRegistry
    from orchestrator.apply.review import ReviewedApply
    from orchestrator.egress.service import EgressService, TaskEgress
    from orchestrator.store import Store

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")


class TaskManager:
    """Spawns and supervises the subagents of one run."""

    def __init__(
        self,
        *,
        backend: ContainerBackend,
        registry: AgentRegistry,
        upstream: Upstream,
        events: EventSink,
        store: Store | None,
        workspace: Path,
        session: str,
        run_id: str,
        trace_id: str,
        default_model: str,
        image_resolver: ImageResolver,
        gate: PermissionGate | None = None,
        config: TaskManagerConfig | None = None,
        runner_command: tuple[str, ...] = RUNNER_COMMAND,
        guard: WorkspaceGuard | None = None,
        tasks: dict[str, TaskContext] | None = None,
        egress: EgressService | None = None,
        upstream_for: Callable[[Upstream, str, str | None], Upstream] | None = None,
        identity: SandboxIdentity | None = None,
        mcp: ProjectMcp | None = None,
        apply: ReviewedApply | None = None,
    ) -> None:
        self.backend = backend
        """Where the run's sandboxes start: the run's one backend, already guarded
        (`backend.factory`), so every sandbox is watched for its disk limits."""
        self.guard = guard or WorkspaceGuard.prepare(workspace)
        """What sandboxes may not write (made before the first sandbox starts)."""
        self.registry = registry
        self.mcp = mcp or ProjectMcp()
        """The workspace's MCP servers this run may start (`agents.mcp`)."""
        self.upstream = upstream
        self.upstream_for = upstream_for
        """Wraps the upstream a task's broker forwards model calls with (tracing)."""
        self.egress = egress
        """The run's egress proxy service; None: sandboxes have no network at all."""
        self._egress_of: dict[str, TaskEgress] = {}
        self._guards_said = False
        self.events = events
        self.store = store
        self.recorder = TaskRecorder(events, store, TaskChanges(workspace))
        self.workspace = workspace
        self.run_id = run_id
        self.trace_id = trace_id
        self.default_model = default_model
        self.gate: PermissionGate = gate or AllowAgentTools()
        self.config = config or TaskManagerConfig()
        self.connections = ConnectionBudget.for_limit(raise_open_file_limit(), open_descriptors())
        """Broker connections open at once over every socket of the run."""
        self.identity = identity or sandbox_identity(
            workspace, self.config.fallback_uid, self.config.user
        )
        """The uid:gid every sandbox of this run runs as; its broker admits only it (the
        run's egress proxy too, so the run computes it once and passes it to both)."""
        self.worktrees = Worktrees(apply, session, self.identity)
        """Tasks with `isolation: worktree`: their working copies and reviewed apply."""
        self.plan = SandboxPlan(
            workspace=workspace,
            guard=self.guard,
            identity=self.identity,
            image_resolver=image_resolver,
            session=session,
            run_id=run_id,
            disk=self.config.disk,
            runner_command=runner_command,
        )
        self.tasks: dict[str, TaskContext] = {} if tasks is None else tasks
        """Every task of the run by id; shared with the gate when the run gives both one."""
        self.results: dict[str, TaskResult] = {}
        self._endings = TaskEndings()
        """Whose end is recorded: the run closes only once every task's is."""
        self.children_started: dict[str | None, int] = {}
        self.background = BackgroundTasks()
        """Tasks started with run_in_background, and their results not yet reported."""
        # Container waits block a thread each for as long as the subagent runs;
        # they get their own pool so they never starve other blocking calls.
        # A nested task runs on its waiting parent's slot: up to max_depth containers each.
        self.admission = AdmissionQueue(self.config.max_concurrent_total, self.config.queue_limit)
        self._waits = ThreadPoolExecutor(
            max_workers=self.config.max_concurrent_total * self.config.max_depth
            + self.config.pool_config().max_ready * 4
            + 4,
            thread_name_prefix="warden-wait",
        )
        # Warm starts only make sense for the real runner, which knows --wait.
        self.pool = WarmPool(
            backend=self.backend,
            config=self.config.pool_config()
            if runner_command == RUNNER_COMMAND
            else PoolConfig(min_ready=0, max_ready=0),
            blocking=self._blocking,
            new_socket_dir=self._new_socket_dir,
        )

    async def close(self) -> None:
        """Stop every task still running (foreground and background), wait until each
        has recorded its end (a stopped task's end is recorded by a shielded step that
        outlives the call it cancelled), remove warm sandboxes, release the threads."""
        running = self.background.running()
        if running or self.running_count():
            await self.stop_all()
        await asyncio.gather(*running, return_exceptions=True)
        for task_id in await self._endings.settle(list(self.tasks)):
            ctx = self.tasks[task_id]  # its end never began: say so, and record it
            log.warning("%s did not end after the stop; recording it stopped", task_id)
            if self._endings.begin(task_id):
                ctx.stop_requested = True
                await self._conclude(ctx, task_result(ctx, None, None, None))
        await self.pool.close()
        self._waits.shutdown(wait=False, cancel_futures=True)

    def prewarm(self, *agent_types: str) -> None:
        """Start warm sandboxes for these agent types now, ahead of their first task.
        Raises UnknownAgentError; their images are resolved on a worker thread (an
        image that cannot be is logged, and its tasks start cold)."""
        for name in agent_types:
            agent = self.registry.get(name)
            self.pool.refill_when_resolved(
                functools.partial(self.plan.pool_key, agent), self._warm_factory(agent)
            )

    def _warm_factory(self, agent: AgentDefinition) -> Callable[[Path], SandboxSpec]:
        return lambda socket_dir: self.plan.spec(agent, socket_dir, task_id=None)

    async def _blocking(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """Run a blocking (docker) call on the manager's own wait threads."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._waits, lambda: fn(*args, **kwargs))

    # -- the Task tool ----------------------------------------------------

    async def run_child(self, task_input: TaskInput, parent: TaskContext) -> TaskResult:
        """A nested Task call of `parent`'s (its broker's `/v1/task`), run to the end."""
        return await self.run_task(task_input, parent=parent)

    async def run_task(
        self,
        task_input: TaskInput,
        *,
        parent: TaskContext | None = None,
        fork: ForkPrefix | None = None,
        call_id: str | None = None,
    ) -> TaskResult:
        """Run one subagent to the end and return its result. `call_id`: the parent
        agent's Task tool call that asked for it.

        Raises UnknownAgentError, CapError, QueueFullError, TaskNotFoundError (resume
        of an unknown session) before anything starts; what the subagent does never
        raises.
        """
        ctx, spec = await self._prepare(task_input, parent, fork)
        ctx.call_id = call_id
        return await self._supervise(ctx, spec)

    async def start_background(
        self,
        task_input: TaskInput,
        *,
        parent: TaskContext | None = None,
        fork: ForkPrefix | None = None,
        call_id: str | None = None,
    ) -> TaskContext:
        """Start a subagent and return at once; its result arrives as a notification.
        `fork`: start it in fork mode from that prefix (see `briefing.fork_history`);
        `call_id`: the parent agent's Task tool call that asked for it."""
        ctx, spec = await self._prepare(task_input, parent, fork)
        ctx.call_id = call_id
        runner = asyncio.create_task(self._supervise(ctx, spec), name=ctx.task_id)
        self.background.add(ctx, runner)
        return ctx

    def running_count(self) -> int:
        return sum(1 for c in self.tasks.values() if c.status in ACTIVE_STATUSES)

    async def _prepare(
        self, task_input: TaskInput, parent: TaskContext | None, fork: ForkPrefix | None = None
    ) -> tuple[TaskContext, wire_models.TaskSpec]:
        agent = self.registry.get(task_input.subagent_type)
        check_caps(self.config, parent, self.children_started)
        task_id = new_task_id()
        session_id = task_input.session_id or task_id
        # The one live continuation of the session, across processes: taken before its
        # transcript is read, so a second resume cannot continue the same history.
        await self._claim(session_id, task_id)
        try:
            return await self._prepare_claimed(task_input, parent, agent, task_id, session_id, fork)
        except BaseException:
            await self._release(session_id, task_id)
            raise

    async def _prepare_claimed(
        self,
        task_input: TaskInput,
        parent: TaskContext | None,
        agent: AgentDefinition,
        task_id: str,
        session_id: str,
        fork: ForkPrefix | None,
    ) -> tuple[TaskContext, wire_models.TaskSpec]:
        agent, warnings = call_overrides(agent, task_input)
        self.worktrees.choose(
            task_id,
            task_input.isolation,
            agent.isolation,
            parent_id=parent.task_id if parent else None,
        )
        history: list[JSONObject] = []
        if task_input.session_id is not None:
            history = await self._load_session(task_input.session_id, agent.name)
        # Past max_concurrent_total the task queues (QueueFullError when the queue is full).
        ticket = self.admission.take(parent.ticket if parent else None)
        max_turns = agent.max_turns
        if task_input.max_turns is not None:
            max_turns = min(max_turns, task_input.max_turns)
        depth = (parent.depth + 1) if parent else 1
        ctx = TaskContext(
            task_id=task_id,
            session_id=session_id,
            run_id=self.run_id,
            trace_id=self.trace_id,
            parent_id=parent.task_id if parent else None,
            depth=depth,
            agent=agent,
            description=task_input.description,
            timeout_s=float(agent.timeout_s),
            ticket=ticket,
            name=task_input.name,
        )
        self.tasks[task_id] = ctx
        try:
            self.children_started[ctx.parent_id] = self.children_started.get(ctx.parent_id, 0) + 1
            servers, mcp_warnings = servers_for(
                agent, self.mcp, mcp_offer_patterns(self.gate.policy.rules)
            )
            if fork is not None and servers:  # a fork's tools are its parent's
                mcp_warnings.append("a fork-mode subagent starts no MCP servers")
                servers = []
            warnings = [*warnings, *mcp_warnings]
            spec = runner_spec(
                ctx,
                task_input,
                mcp_servers=servers,
                history=history,
                max_turns=max_turns,
                may_delegate=depth < self.config.max_depth,
                model=self._model(agent, task_input),
                config=self.config,
                fork=fork,
                sources=ContextSources(
                    self.config.claude_dir,
                    self.workspace,
                    self.config.project_skills,
                    self.config.user_skills,
                ),
            )
            for warning in warnings:
                self.recorder.note("task_warning", ctx, warning=warning)
            await self.recorder.created(ctx, task_input.prompt)
        except BaseException as exc:
            self.admission.release(ticket)
            if isinstance(exc, asyncio.CancelledError):
                await self._stopped_before_start(ctx)
            else:  # refused after it was made (its spec, the store): it never runs
                self.tasks.pop(task_id, None)
            raise
        return ctx, spec

    def _model(self, agent: AgentDefinition, task_input: TaskInput) -> str:
        """The task's model: the call's alias (`inherit`: the parent's), else the
        agent type's, else the parent's."""
        if task_input.model == "inherit":
            return self.default_model
        if task_input.model is not None:
            return self.config.model_aliases.get(task_input.model, task_input.model)
        return agent.model or self.default_model

    async def _claim(self, session_id: str, task_id: str) -> None:
        if self.store is not None:
            await asyncio.to_thread(
                self.store.claim_session, session_id, self.run_id, task_id, run_owner_dead
            )

    async def _release(self, session_id: str, task_id: str) -> None:
        if self.store is None:
            return
        try:
            await asyncio.to_thread(self.store.release_session, session_id, task_id)
        except StoreError as exc:  # a dead owner's claim is taken over anyway
            log.debug("could not release session %s: %s", session_id, exc)

    async def _load_session(self, session_id: str, agent_type: str) -> list[JSONObject]:
        if self.store is None:
            raise TaskNotFoundError(f"cannot resume {session_id}: this run has no store")
        running = self.background.running_ids()
        return await asyncio.to_thread(session_history, self.store, session_id, agent_type, running)

    # -- results, stop ------------------------------------------------------

    async def wait_for(self, task_id: str, timeout_s: float | None) -> TaskResult | None:
        """The result of a task, waiting up to timeout_s (None: forever)."""
        runner = self.background.runner(task_id)
        if task_id in self.results or runner is None:
            return self.results.get(task_id)
        done, _ = await asyncio.wait({runner}, timeout=timeout_s)
        return self.results.get(task_id) if done else None

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
            raise TaskNotFoundError(
                f"no task {task_id!r} in this run; a task id is valid only if a Task call "
                "in this run returned it"
            )
        targets = [ctx, *self.descendants(task_id)]
        stopped = [c for c in targets if c.status in ACTIVE_STATUSES]
        for c in stopped:
            c.stop_requested = True
        await asyncio.gather(*(self._kill(c) for c in stopped))
        return [c.task_id for c in stopped]

    async def stop_all(self) -> list[str]:
        active = [c for c in self.tasks.values() if c.status in ACTIVE_STATUSES]
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

    async def _supervise(self, ctx: TaskContext, spec: wire_models.TaskSpec) -> TaskResult:
        """Wait for a slot, run the subagent, give the slot back."""
        assert ctx.ticket is not None
        try:
            admitted = await self.admission.wait(ctx.ticket)
            # `warden stop` from another process while it waited in the queue (a stop
            # while it starts is seen once its container exists, in `_run_sandbox`).
            if (
                admitted
                and ctx.ticket.queued
                and not ctx.stop_requested
                and await self._stop_requested_elsewhere(ctx.task_id)
            ):
                ctx.stop_requested = True
            if admitted and not ctx.stop_requested:
                try:
                    return await self._run_sandbox(ctx, spec)
                except WardenError as exc:
                    # Failed before its sandbox was set up (its image could not be
                    # resolved): an end like any other, recorded now, not left for the
                    # run's close to wait on and record as stopped.
                    if self._endings.begin(ctx.task_id):
                        await self._conclude(ctx, task_result(ctx, None, None, str(exc)))
                    return self.results[ctx.task_id]
            if self._endings.begin(ctx.task_id):
                await self._conclude(ctx, task_result(ctx, None, None, None))
            return self.results[ctx.task_id]
        except asyncio.CancelledError:
            # Stopped at any await before its sandbox's end began (queued, admitted,
            # starting): its end is recorded here.
            await self._stopped_before_start(ctx)
            raise
        except Exception as exc:
            # Failed before its sandbox's end began (its image, the warm pool): the
            # caller is told (raised), and the task's end is recorded as failed.
            if self._endings.begin(ctx.task_id):
                result = task_result(ctx, None, None, str(exc))
                await asyncio.shield(self._conclude(ctx, result))
            raise
        finally:
            self.admission.release(ctx.ticket)

    async def _stopped_before_start(self, ctx: TaskContext) -> None:
        """Record a stopped task's end, unless that is under way already (shielded)."""
        if self._endings.begin(ctx.task_id):
            ctx.stop_requested = True
            await asyncio.shield(self._conclude(ctx, task_result(ctx, None, None, None)))

    def _new_socket_dir(self) -> Path:
        """A broker socket directory, marked as this process's so a cleanup after a
        kill -9 can tell it is a dead owner's (`lifecycle.socket_dirs`)."""
        return socket_dirs.mark(make_socket_dir(self.identity, socket_dirs.socket_root()))

    async def _say_weakened_guards(self) -> None:
        """Once per run, before its first sandbox: the guards this process cannot give
        (`backend.weakened`), as warnings and run events."""
        if self._guards_said:
            return
        self._guards_said = True
        for message in await asyncio.to_thread(weakened_guards, self.plan.disk):
            log.warning("%s", message)
            await self.events.emit(
                "sandbox_guard_weakened", trace_id=self.trace_id, message=message
            )

    def _forwarding(self, ctx: TaskContext) -> ForwardingPolicy:
        """What `ctx`'s broker forwards: the gate's rules, and the provider reaches only
        what the task's egress reaches (nothing without egress: the model API is egress)."""
        egress = NO_EGRESS if self.egress is None else self.egress.provider_egress(ctx, ctx.agent)
        return dataclasses.replace(self.gate.forwarding_policy(ctx), egress=egress)

    async def _run_sandbox(self, ctx: TaskContext, spec: wire_models.TaskSpec) -> TaskResult:
        await self._say_weakened_guards()
        key = self.plan.pool_key(ctx.agent)
        # A warm sandbox mounts the shared workspace: an isolated task starts cold.
        isolated = ctx.task_id in self.worktrees.isolated
        warm = None if isolated else self.pool.take(key)
        if not isolated:
            self.pool.refill(key, self._warm_factory(ctx.agent))
        socket_dir = warm.socket_dir if warm else self._new_socket_dir()
        if warm:
            ctx.container_id = warm.container_id
        budget = Budget(max_turns=spec.max_turns, max_total_tokens=self._token_budget(ctx.agent))
        broker = Broker(
            socket_dir=socket_dir,
            spec=spec,
            upstream=self.upstream
            if self.upstream_for is None
            else self.upstream_for(self.upstream, ctx.task_id, ctx.parent_id),
            host=TaskHost(
                ctx,
                gate=self.gate,
                recorder=self.recorder,
                store=self.store,
                delegate=self.run_child,
            ),
            budget=budget,
            identity=self.identity,
            forwarding=self._forwarding(ctx),
            connections=self.connections,
        )
        ctx.broker = broker
        sandbox: SandboxResult | None = None
        failure: str | None = None
        ctx.status = TaskStatus.RUNNING
        starting = time.monotonic()
        try:
            await self.recorder.sandbox_starting(ctx)
            await broker.start()
            if self.egress is not None:  # its socket is in place before the runner looks
                egress = await self.egress.open(ctx, ctx.agent, socket_dir)
                if egress is not None:
                    self._egress_of[ctx.task_id] = egress
            if warm:
                warm.release()  # its runner was waiting for this broker
            if ctx.container_id is None:
                copy = await self.worktrees.prepare(ctx)
                # The spec walks the workspace for the deny rules' mounts: off the loop.
                ctx.container_id = await self._blocking(
                    lambda: self.backend.start(
                        self.plan.spec(
                            ctx.agent, socket_dir, task_id=ctx.task_id, working_copy=copy
                        )
                    )
                )
            await self.recorder.update(
                ctx.task_id,
                status=ctx.status.value,
                container_id=ctx.container_id,
                started_at=time.time(),
            )
            await self.recorder.emit(
                "task_started",
                ctx,
                description=ctx.description,
                container_id=ctx.container_id[:12],
                background=ctx.task_id in self.background,
                call_id=ctx.call_id,
                # For the trace: the task's span covers its queue and container start.
                since_created_s=round(time.monotonic() - ctx.started, 3),
                container_start_s=round(time.monotonic() - starting, 3),
                queued_s=round(ctx.ticket.waited_s, 3) if ctx.ticket and ctx.ticket.queued else 0.0,
                setup=task_setup(
                    spec,
                    timeout_s=ctx.timeout_s,
                    limits=agent_limits(ctx.agent),
                    disk=agent_disk_limits(self.plan.disk, ctx.agent),
                    token_budget=budget.max_total_tokens,
                    image=self.plan.image_resolver(ctx.agent).name,
                    source=ctx.agent.source,
                ),
            )
            ctx.announced.set()
            # Stopped while it was starting, here or by `warden stop` from another
            # process: that one found no container to kill yet (it records the stop
            # before it looks for the container, and the container exists by now).
            if ctx.stop_requested or await self._stop_requested_elsewhere(ctx.task_id):
                ctx.stop_requested = True
                await self._kill(ctx)
            sandbox = await self._blocking(self.backend.wait, ctx.container_id, ctx.timeout_s)
        except asyncio.CancelledError:
            ctx.stop_requested = True
            raise
        except WardenError as exc:
            failure = str(exc)
        finally:
            # Shielded: a cancelled parent must still not leave a container behind,
            # and the task's end must still be recorded (claimed now, before the
            # shielded step starts, so nothing else records it first).
            self._endings.begin(ctx.task_id)
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
        ctx.announced.set()  # nothing the broker holds waits past the task's end
        try:
            if ctx.container_id is not None:
                await self._blocking(self.backend.remove, ctx.container_id)
        except WardenError:
            log.exception("could not remove container %s of %s", ctx.container_id, ctx.task_id)
        finally:
            await broker.close()
            if (egress := self._egress_of.pop(ctx.task_id, None)) is not None:
                await egress.close()
            socket_dirs.remove(socket_dir)
        if (
            sandbox is not None
            and sandbox.status is SandboxStatus.KILLED_OUTSIDE
            and await self._stop_requested_elsewhere(ctx.task_id)
        ):
            ctx.stop_requested = True  # `warden stop` from another process
        if sandbox is not None and sandbox.meter_gap:
            await self.recorder.emit("disk_meter_gap", ctx, message=sandbox.meter_gap)
        result = task_result(ctx, sandbox, budget, failure)
        # The sandbox is gone: nothing changes the working copy any more.
        result = await self.worktrees.conclude(
            ctx, result, self.recorder, rules=self.gate.task_policy(ctx)
        )
        await self._conclude(ctx, result)

    async def _stop_requested_elsewhere(self, task_id: str) -> bool:
        if self.store is None:
            return False
        try:
            return await asyncio.to_thread(self.store.stop_requested, task_id)
        except StoreError:
            return False  # unreadable store: it is reported as killed from outside

    async def _conclude(self, ctx: TaskContext, result: TaskResult) -> None:
        """Record the task's end (the caller has claimed it: `TaskEndings.begin`)."""
        try:
            self.results[ctx.task_id] = result
            try:
                await self.recorder.finished(ctx, result)
            except StoreError as exc:  # state disk full or unwritable: the run reports it
                if self.events.failure is None:
                    log.warning("could not record the end of %s: %s", ctx.task_id, exc)
            await self._release(ctx.session_id, ctx.task_id)
            await self.background.ended(ctx, result)
        finally:
            self._endings.done(ctx.task_id)

    def _token_budget(self, agent: AgentDefinition) -> int | None:
        """The run's cap, or the agent's own when that is lower."""
        budgets = [b for b in (self.config.max_total_tokens, agent.token_budget) if b]
        return min(budgets) if budgets else None
