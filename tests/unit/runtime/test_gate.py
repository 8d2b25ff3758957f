"""Locks in how the gate answers a tool call: a decision the rules settle is answered
only once its audit record is on disk (a disk that refuses the sync gets no answer,
never an allow), the rules and that audit write share one worker-thread hop, and a
call that asks is audited once, with the person's answer; what the decisions need
soon (a run's analyser workers) starts at the first call, not before it."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from orchestrator.agents.registry import AgentRegistry
from orchestrator.broker import wire_models
from orchestrator.config import Settings
from orchestrator.errors import StoreError
from orchestrator.permissions import load_hooks, load_policy
from orchestrator.permissions.approvers import ApprovalAnswer, ApprovalQuestion
from orchestrator.runtime.gate import PolicyGate
from orchestrator.runtime.tasks import TaskContext
from orchestrator.store import Store, TaskRecord, TaskStatus

T = TypeVar("T")
RUN_ID = "run_g"
TASK_ID = "sa_g"
WAIT_S = 30.0
"""Generous: the machine may be loaded; nothing here waits this long when it works."""


class _Allow:
    """An approver that allows every question and remembers it."""

    def __init__(self) -> None:
        self.asked: list[ApprovalQuestion] = []

    async def approve(self, question: ApprovalQuestion) -> ApprovalAnswer:
        self.asked.append(question)
        return ApprovalAnswer(behavior="allow", decided_by="person: tester", channel="test")


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store.open(tmp_path / "state" / "warden.db")
    s.create_run(RUN_ID, prompt="p", workspace=str(tmp_path / "ws"), model="m", pid=os.getpid())
    s.create_task(
        TaskRecord(
            task_id=TASK_ID,
            run_id=RUN_ID,
            parent_id=None,
            session_id=TASK_ID,
            agent_type="general-purpose",
            description="d",
            prompt="p",
            status=TaskStatus.RUNNING,
            depth=1,
            trace_id="0" * 32,
        )
    )
    return s


def _gate(
    tmp_path: Path,
    store: Store,
    approver: _Allow,
    allow: tuple[str, ...] = (),
    deny: tuple[str, ...] = (),
    warm_up: Callable[[], object] | None = None,
) -> PolicyGate:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    settings = Settings(state_dir=tmp_path / "state", config_dir=tmp_path / "cfg")
    return PolicyGate(
        policy=load_policy(settings, ws, mode="default", allow=allow, deny=deny),
        hooks=load_hooks(settings, ws),
        workspace_host=ws,
        approver=approver,
        store=store,
        warm_up=warm_up,
    )


def _task(tmp_path: Path) -> TaskContext:
    settings = Settings(state_dir=tmp_path / "state", config_dir=tmp_path / "cfg")
    agent = AgentRegistry.load(settings, tmp_path / "ws").get("general-purpose")
    return TaskContext(task_id=TASK_ID, session_id=TASK_ID, run_id=RUN_ID, trace_id="t",
                       parent_id=None, depth=1, agent=agent, description="d", timeout_s=5)  # fmt: skip


def _bash(command: str) -> wire_models.PermissionRequest:
    return wire_models.PermissionRequest(
        tool_name="Bash", tool_input={"command": command}, tool_use_id="toolu_g"
    )


def _hold_wal_syncs(
    monkeypatch: pytest.MonkeyPatch, store: Store, fail: bool = False
) -> tuple[threading.Event, threading.Event]:
    """(entered, release): a WAL sync signals `entered`, then waits for `release`
    (or fails as a refusing disk does)."""
    entered, release = threading.Event(), threading.Event()
    wal = Path(f"{store.path}-wal")
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        if wal.exists() and os.path.samestat(os.fstat(fd), os.stat(wal)):
            entered.set()
            if fail:
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            release.wait(WAIT_S)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    return entered, release


async def test_a_rule_allow_is_answered_only_once_its_audit_record_is_on_disk(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = _gate(tmp_path, store, _Allow(), allow=("Bash(echo:*)",))
    entered, release = _hold_wal_syncs(monkeypatch, store)
    answer = asyncio.ensure_future(gate.answer_tool_call(_task(tmp_path), _bash("echo hello")))
    assert await asyncio.to_thread(entered.wait, WAIT_S), "the audit record was never synced"
    assert not answer.done()  # the sync of its record holds the answer back
    release.set()
    assert (await asyncio.wait_for(answer, WAIT_S)).behavior == "allow"
    [record] = store.audit(RUN_ID)
    assert (record.decision, record.final, record.decided_by) == (
        "allow",
        "allow",
        "rule: Bash(echo:*)",
    )


async def test_a_state_disk_that_refuses_the_sync_gets_no_answer_at_all(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = _gate(tmp_path, store, _Allow(), allow=("Bash(echo:*)",))
    _hold_wal_syncs(monkeypatch, store, fail=True)
    with pytest.raises(StoreError, match="durable"):
        await gate.answer_tool_call(_task(tmp_path), _bash("echo hello"))


async def test_rules_and_their_audit_write_share_one_worker_thread_hop(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = _gate(tmp_path, store, _Allow(), allow=("Bash(echo:*)",), deny=("Bash(rm:*)",))
    hops: list[str] = []
    real = asyncio.to_thread

    def counting(func: Callable[..., T], /, *args: Any, **kwargs: Any) -> Coroutine[Any, Any, T]:
        hops.append(getattr(func, "__name__", "?"))
        return real(func, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", counting)
    task = _task(tmp_path)
    assert (await gate.answer_tool_call(task, _bash("echo hello"))).behavior == "allow"
    assert (await gate.answer_tool_call(task, _bash("rm -rf x"))).behavior == "deny"
    assert len(hops) == 2, hops  # one per call, the durable audit write included
    assert [r.final for r in store.audit(RUN_ID)] == ["allow", "deny"]


async def test_a_call_that_asks_is_audited_once_with_the_persons_answer(
    tmp_path: Path, store: Store
) -> None:
    approver = _Allow()
    gate = _gate(tmp_path, store, approver)  # the default mode asks about Bash
    assert (await gate.answer_tool_call(_task(tmp_path), _bash("touch a"))).behavior == "allow"
    assert len(approver.asked) == 1
    [record] = store.audit(RUN_ID)
    assert (record.decision, record.final, record.decided_by, record.channel) == (
        "ask",
        "allow",
        "person: tester",
        "test",
    )


async def test_a_loaded_skills_tools_are_allowed_for_the_rest_of_that_model_response_only(
    tmp_path: Path, store: Store
) -> None:
    """Claude Code (measured): after a Skill call loads a skill, its `allowed-tools`
    allow the calls after it in the same response; the next response asks again."""
    from orchestrator.permissions.skill_rules import skill_grant

    approver = _Allow()
    gate = _gate(tmp_path, store, approver)
    text = "---\ndescription: d\nallowed-tools: Bash(chmod:*)\n---\nRun chmod.\n"
    gate.policy = gate.policy.model_copy(update={"skills": (skill_grant("tooly", text),)})
    task = _task(tmp_path)
    load = wire_models.PermissionRequest(
        tool_name="Skill", tool_input={"skill": "tooly"}, tool_use_id="toolu_s"
    )
    assert (await gate.answer_tool_call(task, load)).behavior == "allow"
    assert [q.tool_name for q in approver.asked] == ["Skill"]  # it allows tools: asked first
    assert (await gate.answer_tool_call(task, _bash("chmod 644 a"))).behavior == "allow"
    assert len(approver.asked) == 1  # allowed by the skill's rule, unasked
    gate.model_answered(task)
    assert (await gate.answer_tool_call(task, _bash("chmod 644 a"))).behavior == "allow"
    assert [q.tool_name for q in approver.asked] == ["Skill", "Bash"]
    assert [r.decided_by for r in store.audit(RUN_ID)] == [
        "person: tester",
        "rule: Bash(chmod:*)",
        "person: tester",
    ]


async def test_the_warm_up_runs_once_at_the_first_tool_call_not_before(
    tmp_path: Path, store: Store
) -> None:
    """A run hands its analyser workers' start to the gate (`session.open_run`): the
    workers start when there is a call to decide, not on the way to the run's first
    model request, and only once."""
    started: list[int] = []
    gate = _gate(tmp_path, store, _Allow(), allow=("Bash(echo:*)",),
                 warm_up=lambda: started.append(1))  # fmt: skip
    task = _task(tmp_path)
    gate.forwarding_policy(task)  # a task's broker is set up: still no tool call
    assert started == []
    assert (await gate.answer_tool_call(task, _bash("echo hello"))).behavior == "allow"
    assert (await gate.answer_tool_call(task, _bash("echo again"))).behavior == "allow"
    assert started == [1]
