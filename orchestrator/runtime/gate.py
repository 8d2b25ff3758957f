"""The permission gate: every tool call of every subagent is decided here, on
the host. Rules and PreToolUse hooks decide first; an "ask" pauses that one
call while the question climbs the task's ancestors to the run's approver (a
human, CI, or an embedding callback). Every decision is audited."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.broker import ForwardingPolicy, wire_models
from orchestrator.errors import ConfigError
from orchestrator.jsontypes import JSONLike, JSONObject, input_hash
from orchestrator.permissions import (
    CallContext,
    Decision,
    EffectivePolicy,
    HookSet,
    PermissionEngine,
    ToolCall,
    effective_tools,
    evaluate,
    narrow_mode,
)
from orchestrator.permissions.always_allow import SETTINGS_FILE, add_allow_rule, exact_rule
from orchestrator.permissions.approvers import (
    ApprovalAnswer,
    ApprovalQuestion,
    Approver,
    AskingTask,
    SessionApprovals,
)
from orchestrator.permissions.hooks import HookSandbox
from orchestrator.runtime.tasks import TaskContext
from orchestrator.runtime.todos import TODOS_EVENT, event_data, parse_todos
from orchestrator.workspace import agent_memory
from sandbox_tools import wire

if TYPE_CHECKING:
    from orchestrator.event_sink import EventSink, TaskIdentity
    from orchestrator.permissions.approvers import Asker
    from orchestrator.store import Store

log = logging.getLogger(__name__)

SESSION_APPROVAL = "session approval (allowed for the rest of this run)"
"""`decided_by` of a call allowed unasked because a person allowed it for the run."""


class PolicyGate:
    """Implements the TaskManager's `PermissionGate` with the permission engine, and
    the `Asker` through which egress reaches the same approver."""

    def __init__(
        self,
        *,
        policy: EffectivePolicy,
        hooks: HookSet,
        workspace_host: Path | None,
        approver: Approver,
        store: Store | None = None,
        events: EventSink | None = None,
        approvals: SessionApprovals | None = None,
        hook_sandbox: HookSandbox | None = None,
        known_tasks: Mapping[str, AskingTask] | None = None,
        settings_base: str | None = None,
        warm_up: Callable[[], object] | None = None,
    ) -> None:
        self.policy = policy
        self.hooks = hooks
        self.workspace_host = workspace_host
        self.settings_base = settings_base
        """What "always allow" writes on top of (`always_allow.settings_base`)."""
        self.approver = approver
        self.store = store
        self.events = events
        self.approvals = approvals or SessionApprovals()
        self.hook_sandbox = hook_sandbox
        self._tasks: dict[str, AskingTask] = {}
        self.known_tasks: Mapping[str, AskingTask] = {} if known_tasks is None else known_tasks
        """Every task of the run (the manager's), so a question names all its ancestors."""
        self._engines: dict[str, PermissionEngine] = {}
        self._warm_up = warm_up
        """Called once, at the first tool call: what the decisions need soon but the run
        need not start before its first model request (a run's Bash analyser workers,
        fresh interpreters whose start would compete for the CPU with that request's)."""

    @property
    def asker(self) -> Asker:
        """`PermissionGate`: egress asks the run's approver through this gate
        (`ask_about`), as a tool call's question is asked."""
        return self

    def engine_for(self, task: TaskContext) -> PermissionEngine:
        """A task's engine: its parent's policy narrowed to its agent's tools, so a
        child never gets more than its parent."""
        engine = self._engines.get(task.task_id)
        if engine is None:
            parent = self._engines.get(task.parent_id) if task.parent_id else None
            # a skill the parent loaded holds for the rest of the parent's response only
            base = parent.policy.without_loaded_skills() if parent is not None else self.policy
            narrowed = narrow_mode(
                effective_tools(task.agent.policy_tools(), base),
                task.agent.permission_mode,
                f"agent {task.agent.name} ({task.agent.source})",
            ).model_copy(  # its own memory only: a child's is the child's
                update={
                    "memory_dir": agent_memory.sandbox_path(
                        task.agent.memory_scope or "", task.agent.name
                    )
                }
            )
            hooks = self.hooks
            if task.agent.hooks:  # the agent file's own hooks, for its calls only
                hooks = hooks.with_hooks(task.agent.hooks)
            engine = PermissionEngine(
                narrowed, hooks, workspace_host=self.workspace_host, sandbox=self.hook_sandbox
            )
            self._engines[task.task_id] = engine
        return engine

    def task_policy(self, task: TaskContext) -> EffectivePolicy:
        """`PermissionGate`: the policy of `task`'s engine (the run's, narrowed to its
        agent's tools and mode, under its parent's)."""
        return self.engine_for(task).policy

    async def answer_tool_call(
        self, task: TaskContext, request: wire_models.PermissionRequest
    ) -> wire_models.PermissionResponse:
        if self._warm_up is not None:
            warm_up, self._warm_up = self._warm_up, None
            warm_up()
        self._tasks[task.task_id] = task
        call = ToolCall(
            tool_name=request.tool_name,
            tool_input=dict(request.tool_input),
            tool_use_id=request.tool_use_id,
        )
        context = self._context(task)
        engine = self.engine_for(task)
        digest = input_hash(call.tool_name, call.tool_input)
        if call.tool_name == "TodoWrite" and isinstance(bad := parse_todos(call.tool_input), str):
            await self._emit(
                "permission_denied", task, tool_name=call.tool_name,
                tool_use_id=call.tool_use_id, input_hash=digest, decided_by="host", reason=bad,
            )  # fmt: skip
            return wire_models.PermissionResponse(behavior="deny", reason=bad)
        audited = False
        if engine.rules_alone(call.tool_name):
            # One worker-thread hop for the rules (they may resolve symlinks) and, when
            # they settle the call, its durable audit record.
            decision, audited = await asyncio.to_thread(
                self._evaluate_rules_and_audit, engine, task, call, context, digest
            )
        else:
            decision = await engine.evaluate(call, context)
        tool_input = decision.updated_input or call.tool_input
        if tool_input is not call.tool_input:  # a hook's updatedInput is what is audited
            digest = input_hash(call.tool_name, tool_input)
        final: str = decision.behavior
        decided_by, reason = _decided_by(decision), decision.reason
        answer: ApprovalAnswer | None = None
        for outcome in decision.hook_outcomes:
            if outcome.error:
                await self._emit("hook_error", task, hook=outcome.hook, error=outcome.error)
        if decision.behavior == "ask":
            if self.approvals.allows(call.tool_name, tool_input):
                final, decided_by = "allow", SESSION_APPROVAL
            else:
                answer = await self._ask(task, call, tool_input, decision)
                final, decided_by = answer.behavior, answer.decided_by
                reason = answer.reason or decision.reason
        if not audited:
            await self._audit(
                task, call, tool_input, digest, decision, final, decided_by, reason, answer
            )
        if final == "allow" and call.tool_name == "Skill":
            skill = tool_input.get("skill")
            if isinstance(skill, str):
                engine.skill_loaded(skill.strip().removeprefix("/"))
        if final == "allow" and call.tool_name == "TodoWrite":
            todos = parse_todos(tool_input)
            if not isinstance(todos, str):
                await self._emit(TODOS_EVENT, task, **event_data(todos))
        if final != "allow":
            await self._emit(
                "permission_denied",
                task,
                tool_name=call.tool_name,
                tool_use_id=call.tool_use_id,
                input_hash=digest,
                decided_by=decided_by,
                reason=reason[:500],
            )
        if final == "allow":
            return wire_models.PermissionResponse(
                behavior="allow", reason=reason, updated_input=decision.updated_input
            )
        return wire_models.PermissionResponse(behavior="deny", reason=_denial(reason, decided_by))

    def model_answered(self, task: TaskContext) -> None:
        """The task's model answered: the tools a skill allowed in its last response
        are allowed no longer (`PermissionEngine.turn_ended`)."""
        engine = self._engines.get(task.task_id)
        if engine is not None:
            engine.turn_ended()

    def forwarding_policy(self, task: TaskContext) -> ForwardingPolicy:
        """What this task's broker may forward upstream: its effective policy's
        rules (server tools, MCP servers, betas; see `orchestrator.broker.forwarding`)."""
        return ForwardingPolicy.from_rules(self.engine_for(task).policy.rules)

    def task_denial(self, subagent_type: str) -> str | None:
        """Why a `Task(type)` deny rule of the run's policy refuses a subagent of this
        type, or None (a question is not a refusal: the parent has no one to ask)."""
        call = ToolCall(tool_name="Task", tool_input={"subagent_type": subagent_type})
        decision = evaluate(self.policy, call, workspace_host=self.workspace_host).decision
        if decision.behavior != "deny" or decision.rule is None:
            return None
        return (
            f"Task denied: {decision.reason}. This subagent type may not be started in "
            "this workspace; use another type, or change the rule."
        )

    async def tool_finished(self, task: TaskContext, call: ToolCall, response: JSONObject) -> None:
        """Run PostToolUse hooks for a finished call; their outcomes are recorded
        (the call already happened, so they can only report). The broker calls
        this only for calls this gate allowed, with the input it approved; the
        response is the container's text, passed to hooks as data."""
        context = self._context(task)
        for outcome in await self.engine_for(task).post_tool_use(call, response, context):
            await self._emit(
                "post_tool_use_hook",
                task,
                hook=outcome.hook,
                tool_name=call.tool_name,
                exit_code=outcome.exit_code,
                decision=outcome.decision,
                reason=outcome.reason[:500],
                error=outcome.error,
            )

    def _context(self, task: TaskContext) -> CallContext:
        """Who makes a call, as hooks see it (Claude Code's hook input fields)."""
        return CallContext(
            session_id=task.session_id,
            agent_id=task.task_id,
            agent_type=task.agent_type,
            cwd=wire.WORKSPACE,
            permission_mode=self.policy.mode,
        )

    def chain(self, task: AskingTask) -> list[str]:
        """The asking task's ancestors, root side first, ending with the task itself."""
        chain = [task.task_id]
        parent = task.parent_id
        while parent is not None:
            chain.insert(0, parent)
            ancestor = self.known_tasks.get(parent) or self._tasks.get(parent)
            parent = ancestor.parent_id if ancestor else None
        return chain

    def _always(self, tool_name: str, tool_input: JSONObject, decision: Decision) -> dict[str, str]:
        """The exact rule "always allow" would write for this call, if there is one.
        Not for a call an ask rule or a hook asked about: an allow rule does not
        override those, so the next run would ask again."""
        if self.workspace_host is None or decision.rule is not None or decision.hook:
            return {}
        rule = exact_rule(tool_name, tool_input, self.workspace_host)
        if rule is None:
            return {}
        return {"always_rule": rule, "always_file": str(self.workspace_host / SETTINGS_FILE)}

    async def _write_rule(self, task: TaskContext, rule: str) -> None:
        assert self.workspace_host is not None
        try:
            path = await asyncio.to_thread(
                partial(add_allow_rule, self.workspace_host, rule, base=self.settings_base)
            )
        except (OSError, ConfigError) as exc:
            log.warning("could not write the always-allow rule %s: %s", rule, exc)
            await self._emit("permission_rule_failed", task, rule=rule, error=str(exc)[:500])
            return
        await self._emit("permission_rule_added", task, rule=rule, path=str(path))

    def _agent_of(self, task_id: str) -> str:
        task = self.known_tasks.get(task_id) or self._tasks.get(task_id)
        return task.agent_type if task is not None else "?"

    def _description_of(self, task_id: str) -> str:
        task = self.known_tasks.get(task_id) or self._tasks.get(task_id)
        return task.description if task is not None else ""

    async def _ask(
        self,
        task: TaskContext,
        call: ToolCall,
        tool_input: JSONObject,
        decision: Decision,
    ) -> ApprovalAnswer:
        question = self.question(
            task,
            tool_name=call.tool_name,
            tool_input=tool_input,
            asked_by=_decided_by(decision),
            reason=decision.reason,
            **self._always(call.tool_name, tool_input, decision),
        )
        answer = await self.ask(task, question)
        if answer.behavior == "allow" and answer.scope == "always" and question.always_rule:
            await self._write_rule(task, question.always_rule)
        return answer

    def question(
        self,
        task: AskingTask,
        *,
        tool_name: str,
        tool_input: JSONObject,
        asked_by: str,
        reason: str,
        always_rule: str = "",
        always_file: str = "",
    ) -> ApprovalQuestion:
        """The question for one call of `task`, naming its chain of ancestors."""
        self._tasks[task.task_id] = task
        chain = self.chain(task)
        return ApprovalQuestion(
            task_id=task.task_id,
            agent_type=task.agent_type,
            description=task.description,
            chain=tuple(chain),
            chain_agents=tuple(self._agent_of(t) for t in chain),
            chain_descriptions=tuple(self._description_of(t) for t in chain),
            run_id=task.run_id,
            always_rule=always_rule,
            always_file=always_file,
            tool_name=tool_name,
            tool_input=tool_input,
            input_hash=input_hash(tool_name, tool_input),
            asked_by=asked_by,
            reason=reason,
        )

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
        """`Asker`: a question that is not a tool call (egress's `Network`), asked as a
        tool call's is; an input allowed for the run before is allowed unasked."""
        if self.approvals.allows(tool_name, tool_input):
            return ApprovalAnswer(behavior="allow", scope="session", decided_by=SESSION_APPROVAL)
        question = self.question(
            task,
            tool_name=tool_name,
            tool_input=tool_input,
            asked_by=asked_by,
            reason=reason,
            always_rule=always_rule,
            always_file=always_file,
        )
        return await self.ask(task, question)

    async def ask(self, task: AskingTask, question: ApprovalQuestion) -> ApprovalAnswer:
        """Put one question to the run's approver (events before and after; an
        approver failure denies). "For this run" answers are remembered; writing an
        "always" rule is the caller's part (it knows where the rule belongs)."""
        await self._emit(
            "approval_requested",
            task,
            question_id=question.question_id,
            tool_name=question.tool_name,
            input_hash=question.input_hash,
            asked_by=question.asked_by,
            chain=question.chain,
        )
        try:
            answer = await self.approver.approve(question)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # an approver bug must fail closed, not open
            log.exception("approver failed")
            answer = ApprovalAnswer(
                behavior="deny",
                channel="approver error",
                reason=f"the approver failed ({type(exc).__name__}); denied",
            )
        self.approvals.remember(question, answer)
        await self._emit(
            "approval_answered",
            task,
            question_id=question.question_id,
            tool_name=question.tool_name,
            input_hash=question.input_hash,
            behavior=answer.behavior,
            scope=answer.scope,
            decided_by=answer.decided_by,
            channel=answer.channel,
            person=answer.person,
        )
        return answer

    async def _emit(self, kind: str, task: TaskIdentity, **data: JSONLike) -> None:
        if self.events is not None:
            await self.events.emit_for(kind, task, **data)

    def _evaluate_rules_and_audit(
        self,
        engine: PermissionEngine,
        task: TaskContext,
        call: ToolCall,
        context: CallContext,
        digest: str,
    ) -> tuple[Decision, bool]:
        """Worker thread: the rules' decision and, unless it asks (then a person's
        answer is audited with it), its audit record written and durable.
        (decision, whether it was audited)."""
        decision = engine.evaluate_rules(call, context)
        if decision.behavior == "ask":
            return decision, False
        self._write_audit(
            task, call, call.tool_input, digest, decision, decision.behavior,
            _decided_by(decision), decision.reason,
        )  # fmt: skip
        return decision, True

    async def _audit(
        self,
        task: TaskContext,
        call: ToolCall,
        tool_input: JSONObject,
        digest: str,
        decision: Decision,
        final: str,
        decided_by: str,
        reason: str,
        answer: ApprovalAnswer | None = None,
    ) -> None:
        if self.store is None:
            return
        await asyncio.to_thread(
            self._write_audit,
            task, call, tool_input, digest, decision, final, decided_by, reason, answer,
        )  # fmt: skip

    def _write_audit(
        self,
        task: TaskContext,
        call: ToolCall,
        tool_input: JSONObject,
        digest: str,
        decision: Decision,
        final: str,
        decided_by: str,
        reason: str,
        answer: ApprovalAnswer | None = None,
    ) -> None:
        """Blocking: the audit record, on disk when this returns (StoreError if not)."""
        if self.store is None:
            return
        from orchestrator.store import audit_record

        record = audit_record(
            run_id=task.run_id,
            task_id=task.task_id,
            agent_type=task.agent_type,
            tool_name=call.tool_name,
            tool_use_id=call.tool_use_id,
            digest=digest,
            tool_input=tool_input,
            decision=decision.behavior,
            final="allow" if final == "allow" else "deny",
            decided_by=decided_by,
            source=decision.source or "",
            reason=reason + _hook_errors(decision),
            channel=answer.channel if answer else "",
            person=answer.person if answer else "",
        )
        self.store.record_audit(record)


def _decided_by(decision: Decision) -> str:
    if decision.hook:
        return f"hook: {decision.hook}"
    if decision.rule:
        return f"rule: {decision.rule}"
    source = decision.source or "mode: default"
    return source if source.startswith("mode") else f"mode: {source}"


def _hook_errors(decision: Decision) -> str:
    errors = [f"{o.hook}: {o.error}" for o in decision.hook_outcomes if o.error]
    return f" (hook errors: {'; '.join(errors)})" if errors else ""


def _denial(reason: str, decided_by: str) -> str:
    return f"Permission denied by {decided_by}: {reason}"
