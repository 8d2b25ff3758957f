"""Egress for one run: which tasks get a proxy, and what each decision leaves behind.

`EgressService.open(task, socket_dir)` starts a task's proxy beside its broker
socket (or returns None when that task has no egress: the run has none, or its
agent file says `network: none`, or its parent task has none); a nested task's rules
are its parent's narrowed by its own agent file, never the run's; `TaskEgress.close()` stops it and records what
the task did. Questions go to the run's approver through the permission gate,
like a tool call's (tool `Network`, input `{"host", "port"}`; the run's
`permissions.approvers.Asker`): allow once, for
the run (this host:port), or always (`host` added to
`sandbox.network.allowedDomains` in `.claude/settings.local.json`). Every decision
is an audit record; each task's destinations, bytes and any cut are an
`egress_summary` event.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.broker.provider_egress import NO_EGRESS, ProviderEgress
from orchestrator.egress.limits import EgressLimits, Meter
from orchestrator.egress.provider import provider_egress
from orchestrator.egress.proxy import EgressProxy
from orchestrator.egress.resolver import Resolver
from orchestrator.egress.rules import RuleSet
from orchestrator.egress.sources import agent_rules
from orchestrator.egress.verdict import TOOL_NAME, Answer, ConnectionPolicy, Verdict
from orchestrator.errors import ConfigError, PolicyError
from orchestrator.jsontypes import JSONLike

if TYPE_CHECKING:
    from orchestrator.event_sink import EventSink
    from orchestrator.permissions.approvers import Asker, AskingTask
    from orchestrator.store import Store

log = logging.getLogger(__name__)

MAX_SUMMARY_DESTINATIONS = 200
"""Destinations listed per task in its `egress_summary` (the rest are counted)."""


@dataclass
class EgressService:
    """The run's egress rules, mode and limits, and where decisions go."""

    rules: RuleSet
    mode: str
    limits: EgressLimits = field(default_factory=EgressLimits)
    resolver: Resolver = field(default_factory=Resolver)
    """Tests pass `StaticResolver`; nothing else selects a resolver."""
    asker: Asker | None = None
    """Reaches the run's approvers (the permission gate); None: every question is denied."""
    store: Store | None = None
    events: EventSink | None = None
    workspace: Path | None = None
    """Where "always allow" writes `.claude/settings.local.json`."""
    settings_base: str | None = None
    """What it writes on top of (`permissions.always_allow.settings_base`)."""
    sandbox_uid: int | None = None
    _ask_locks: dict[tuple[str, int], asyncio.Lock] = field(default_factory=dict, repr=False)
    """One question at a time per host:port across the run's tasks, so a "for this
    run" answer is seen by every connection that was waiting behind it."""
    _effective: dict[str, RuleSet | None] = field(default_factory=dict, repr=False)
    """Each opened task's rules (None: no egress), so a nested task starts from its
    parent's, never from the run's: delegating cannot widen what a subagent reaches."""

    def rules_for(self, task: AskingTask, agent: object) -> RuleSet | None:
        """`task`'s egress rules (None: no egress): its parent's, or the run's, narrowed
        by its agent file; worked out once per task. PolicyError names a malformed
        agent file `network:` key."""
        if task.task_id in self._effective:
            return self._effective[task.task_id]
        base: RuleSet | None = self.rules
        if task.parent_id is not None and task.parent_id in self._effective:
            base = self._effective[task.parent_id]
        rules = (
            None
            if base is None
            else agent_rules(
                base,
                task.agent_type,
                str(getattr(agent, "source", "?")),
                {"network": getattr(agent, "network", None)},
            )
        )
        self._effective[task.task_id] = rules
        return rules

    def provider_egress(self, task: AskingTask, agent: object) -> ProviderEgress:
        """Where the model provider may go for `task` (server tools, MCP servers, URL
        sources): its egress rules read strictly (`provider`); nowhere when it has no
        egress or its agent file's `network:` key cannot be read."""
        try:
            return provider_egress(self.rules_for(task, agent))
        except PolicyError:
            return NO_EGRESS  # `open` raises it for the task; nothing is forwarded meanwhile

    async def open(self, task: AskingTask, agent: object, socket_dir: Path) -> TaskEgress | None:
        """Start `task`'s proxy in `socket_dir`; None when it has no egress (the run
        has none, its agent file says `network: none`, or its parent task had none)."""
        rules = self.rules_for(task, agent)
        if rules is None:
            return None
        egress = TaskEgress(self, task, rules)
        await egress.start(socket_dir)
        return egress


class TaskEgress:
    """One task's proxy and meter."""

    def __init__(self, service: EgressService, task: AskingTask, rules: RuleSet) -> None:
        self.service = service
        self.task = task
        self.meter = Meter(service.limits)
        self.connections = ConnectionPolicy(rules, service.mode, service.resolver, self._ask)
        uids = {os.getuid()}
        if service.sandbox_uid is not None:
            uids.add(service.sandbox_uid)
        self.proxy: EgressProxy | None = None
        self._uids = frozenset(uids)
        self._asking: dict[tuple[str, int], asyncio.Future[Answer]] = {}
        """Questions of this task in flight: parallel connections to one new host
        share one question and its answer."""

    async def start(self, socket_dir: Path) -> None:
        self.proxy = EgressProxy(
            socket_dir,
            self.connections,
            self.meter,
            allowed_uids=self._uids,
            record=self._record,
            record_now=self._write_audit,
            notice=self._notice,
        )
        await self.proxy.start()

    async def close(self) -> None:
        if self.proxy is not None:
            await self.proxy.close()
        destinations = sorted(
            self.meter.destinations.values(), key=lambda d: (-d.bytes_down, d.host, d.port)
        )
        await self._emit(
            "egress_summary",
            connections=self.meter.connections,
            bytes_up=self.meter.bytes_up,
            bytes_down=self.meter.bytes_down,
            cut=self.meter.cut,
            destinations=[asdict(d) for d in destinations[:MAX_SUMMARY_DESTINATIONS]],
            destinations_not_listed=max(0, len(destinations) - MAX_SUMMARY_DESTINATIONS),
        )

    async def _ask(self, host: str, port: int, why: str) -> Answer:
        """One question per host:port and answer: a connection that arrives while
        the question is open waits for its answer instead of asking again."""
        key = (host, port)
        pending = self._asking.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        answered: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._asking[key] = answered
        try:
            lock = self.service._ask_locks.setdefault(key, asyncio.Lock())
            async with lock:
                answer = await self._ask_once(host, port, why)
        except BaseException as exc:
            if isinstance(exc, Exception):
                answered.set_exception(exc)
                answered.exception()  # retrieved: waiters see it, nothing logs it
            else:
                answered.cancel()
            raise
        else:
            answered.set_result(answer)
            return answer
        finally:
            del self._asking[key]

    async def _ask_once(self, host: str, port: int, why: str) -> Answer:
        asker = self.service.asker
        if asker is None:
            return Answer("deny", "no approver", "")
        workspace = self.service.workspace
        answer = await asker.ask_about(
            self.task,
            tool_name=TOOL_NAME,
            tool_input={"host": host, "port": port},
            asked_by="egress proxy",
            reason=f"connect to {host}:{port}: {why}",
            always_rule=f'"{host}" in sandbox.network.allowedDomains' if workspace else "",
            always_file=str(workspace / ".claude" / "settings.local.json") if workspace else "",
        )
        if answer.behavior == "allow" and answer.scope == "always" and workspace is not None:
            await self._write_always(host)
        return Answer(
            answer.behavior, answer.decided_by, answer.reason, answer.channel, answer.person
        )

    async def _write_always(self, host: str) -> None:
        from orchestrator.permissions.always_allow import add_allowed_domain

        assert self.service.workspace is not None
        try:
            path = await asyncio.to_thread(
                partial(
                    add_allowed_domain,
                    self.service.workspace,
                    host,
                    base=self.service.settings_base,
                )
            )
        except (OSError, ConfigError) as exc:
            log.warning("could not add %s to allowedDomains: %s", host, exc)
            await self._emit("permission_rule_failed", rule=host, error=str(exc)[:500])
            return
        await self._emit("permission_rule_added", rule=f"allowedDomains: {host}", path=str(path))

    async def _record(self, verdict: Verdict, method: str) -> None:
        if verdict.behavior == "deny":
            await self._emit(
                "egress_denied",
                host=verdict.host,
                port=verdict.port,
                decided_by=verdict.decided_by,
                reason=verdict.reason[:500],
            )
        if self.service.store is not None:
            await asyncio.to_thread(self._write_audit, verdict, method)

    def _write_audit(self, verdict: Verdict, method: str) -> None:
        """The decision's audit record, durable when this returns (blocking: a worker
        or the connection's relay thread calls it); nothing without a store."""
        store = self.service.store
        if store is None:
            return
        from orchestrator.store import audit_record

        record = audit_record(
            run_id=self.task.run_id,
            task_id=self.task.task_id,
            agent_type=self.task.agent_type,
            tool_name=TOOL_NAME,
            tool_input={"host": verdict.host, "port": verdict.port},
            noted={"method": method},
            decision=verdict.policy,
            final=verdict.behavior,
            decided_by=verdict.decided_by,
            source=verdict.source,
            reason=verdict.reason,
            channel=verdict.channel,
            person=verdict.person,
        )
        store.record_audit(record)

    async def _notice(self, kind: str, message: str) -> None:
        await self._emit("broker_notice", notice=kind, message=message[:500])

    async def _emit(self, kind: str, **data: JSONLike) -> None:
        if self.service.events is None:
            return
        await self.service.events.emit(
            kind,
            task_id=self.task.task_id,
            parent_id=self.task.parent_id,
            agent_type=self.task.agent_type,
            trace_id=self.task.trace_id,
            **data,
        )
