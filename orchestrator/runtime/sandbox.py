"""What a subagent's container is: who it runs as, its limits, its mounts, its
command. `SandboxPlan` builds the `SandboxSpec` of one agent's sandbox (cold for
a task, or warm for the pool); the functions below decide identity and limits.

An agent definition can come from the workspace, so it may only lower the run's
limits, never raise them, and no sandbox ever runs as root.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator import labels
from orchestrator.backend.contract import (
    DiskLimits,
    Mount,
    ResourceLimits,
    SandboxSpec,
    parse_user,
    root_owned_note,
)
from orchestrator.broker import SandboxIdentity, groups_for
from orchestrator.images.choice import WARDEN_RUNNER
from orchestrator.permissions import paths
from orchestrator.runtime.pool import WARM_WAIT_S, PoolKey
from orchestrator.workspace import agent_memory
from sandbox_tools import wire

if TYPE_CHECKING:
    from orchestrator.agents.definition import AgentDefinition
    from orchestrator.runtime.protocols import ImageResolver
    from orchestrator.workspace import WorkspaceGuard

log = logging.getLogger(__name__)

RUNNER_COMMAND = WARDEN_RUNNER
"""The in-container runner (`sandbox_tools`); only it knows `--wait` (warm starts).
A project image starts it through warden's mounted runtime instead (`images.choice`)."""
SANDBOX_ENV = {"HOME": "/tmp"}
CLAUDE_TARGET = f"{wire.WORKSPACE}/.claude"
"""The read-only `.claude` every sandbox gets: an agent's memory is mounted over it."""


def sandbox_identity(
    workspace: Path, fallback_uid: int, user: str | None = None
) -> SandboxIdentity:
    """`user` when given, else the workspace owner's uid:gid (so files it writes stay
    the user's), or the fallback when root owns the workspace: a sandbox never runs
    as root (`parse_user` refuses uid or gid 0)."""
    if user is not None:
        return SandboxIdentity(*parse_user(user))
    try:
        owner = workspace.stat()
    except OSError:
        return SandboxIdentity(fallback_uid, fallback_uid)
    if owner.st_uid == 0:
        return SandboxIdentity(fallback_uid, fallback_uid)
    return SandboxIdentity(owner.st_uid, owner.st_gid or fallback_uid)


def warn_if_root_owned(workspace: Path, fallback_uid: int, user: str | None) -> None:
    """Say so when the run's sandboxes get the fallback uid because root owns the
    workspace: every write they try there would fail with no other sign why."""
    if user is not None:
        return
    try:
        root_owned = workspace.stat().st_uid == 0
    except OSError:
        return
    if root_owned:
        log.warning("%s", root_owned_note(workspace, fallback_uid))


def agent_limits(agent: AgentDefinition) -> ResourceLimits:
    """Memory, CPU and pids: the agent's own where it sets them, else the defaults."""
    default = ResourceLimits()
    return replace(
        default,
        memory_bytes=agent.memory_limit or default.memory_bytes,
        cpus=agent.cpus or default.cpus,
        pids=agent.pids or default.pids,
    )


def agent_disk_limits(run: DiskLimits, agent: AgentDefinition) -> DiskLimits:
    """The run's limits; an agent file may lower the write cap, never raise it (agent
    files can come from the workspace, and the cap protects the host)."""
    own = agent.disk_write_limit
    if not own or (run.write_limit_bytes and own >= run.write_limit_bytes):
        return run
    return replace(run, write_limit_bytes=int(own))


@dataclass(frozen=True)
class SandboxPlan:
    """Everything the sandboxes of one run share; `spec` adds the agent's part."""

    workspace: Path
    guard: WorkspaceGuard
    identity: SandboxIdentity
    image_resolver: ImageResolver
    session: str
    run_id: str
    disk: DiskLimits
    runner_command: tuple[str, ...] = RUNNER_COMMAND

    def spec(
        self,
        agent: AgentDefinition,
        socket_dir: Path,
        *,
        task_id: str | None,
        working_copy: Path | None = None,
    ) -> SandboxSpec:
        """The container for one agent; task_id None makes a warm sandbox, whose
        runner imports first and then waits for its broker socket. `working_copy`:
        the task's own copy is its `/workspace` (`isolation: worktree`), never the
        shared workspace."""
        limits = replace(agent_limits(agent), disk=agent_disk_limits(self.disk, agent))
        image = self.image_resolver(agent)
        # A test's own runner command replaces the runner, in warden's images only.
        runner = image.runner if self.runner_command == RUNNER_COMMAND else self.runner_command
        command = list(runner)
        extra = {"task": task_id} if task_id else {"warm": "1"}
        if task_id is None:
            command += ["--wait", f"{WARM_WAIT_S:g}"]
        return SandboxSpec(
            image=image.ref,
            command=command,
            workspace=self.workspace if working_copy is None else working_copy,
            mounts=[
                Mount(source=socket_dir, target=wire.BROKER_SOCKET_DIR, read_only=True),
                *image.mounts,
                # a working copy's changes reach the workspace only through a reviewed
                # apply: its memory is not mounted writable over it either
                *(
                    self._with_memory(agent, self.guard.mounts())
                    if working_copy is None
                    else self.guard.copy_mounts(working_copy)
                ),
            ],
            env={**image.env, **SANDBOX_ENV},
            user=f"{self.identity.uid}:{self.identity.gid}",
            groups=groups_for(socket_dir),
            limits=limits,
            warden_labels=labels.warden_labels(self.session, run=self.run_id, **extra),
        )

    def _with_memory(self, agent: AgentDefinition, mounts: list[Mount]) -> list[Mount]:
        """`mounts` and the agent's project or local memory directory, read-write
        (`workspace.agent_memory`), unless a deny rule's wall already holds that
        directory or one above it (a wall is never undone for memory)."""
        target = agent_memory.sandbox_path(agent.memory_scope or "", agent.name)
        if target is None:
            return mounts
        walled = self._walled(target, mounts)
        if walled is not None:
            log.warning("agent %s: its memory %s stays read-only: %s", agent.name, target, walled)
            return mounts
        owner = (self.identity.uid, self.identity.gid)
        return [
            *mounts,
            agent_memory.memory_mount(
                self.guard.workspace, agent.memory_scope or "", agent.name, owner
            ),
        ]

    def _walled(self, target: str, mounts: list[Mount]) -> str | None:
        """What holds `target` or a directory above it read-only or hidden, besides
        the `.claude` mount every sandbox has: a protected path's mount, or a deny
        rule's wall (matched as a path, so a rule over `.claude` counts too)."""
        for m in mounts:
            if m.target != CLAUDE_TARGET and (
                target == m.target or target.startswith(m.target + "/")
            ):
                return f"{m.target} is mounted over it"
        for wall in self.guard.walls:
            if paths.matches(wall.pattern, target, fold=True):
                return f"the deny rule {wall.rule} covers it"
        return None

    def pool_key(self, agent: AgentDefinition) -> PoolKey:
        """Warm sandboxes are interchangeable within (image, limits, writable memory
        directory); the other mounts are not part of the key because each sandbox
        computes its own when it starts. A warm sandbox made for one agent's memory
        never serves another agent (it could write that memory)."""
        memory = agent_memory.sandbox_path(agent.memory_scope or "", agent.name) or ""
        return (self.image_resolver(agent).ref, agent_limits(agent).to_json() + memory)
