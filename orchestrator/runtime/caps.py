"""The caps the host puts on a run's tasks, whatever a subagent asks: how deep
tasks nest, how many children one task starts, how many run at once, tokens,
disk, model retries. `check_caps` refuses a task that would cross the first two
before anything about it exists (the others are enforced by the admission queue,
the broker's budget and the disk watcher).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, Unpack

from orchestrator.apply.policy import ApplyPolicy
from orchestrator.apply.review import ApplySettings
from orchestrator.backend.contract import DiskLimits
from orchestrator.config import DEFAULT_FALLBACK_UID, DEFAULT_MODEL_ALIASES, PoolConfig
from orchestrator.errors import WardenError
from sandbox_tools import wire

if TYPE_CHECKING:
    from orchestrator.config import Settings
    from orchestrator.runtime.tasks import TaskContext


class CapError(WardenError):
    """A cap on tasks was hit; the message says which and what to do."""


@dataclass
class TaskManagerConfig:
    """Caps the host enforces, whatever a subagent asks."""

    max_total_tokens: int | None = None
    """Token budget of each subagent (every usage field over all its model calls,
    checked before each call); an agent's `tokenBudget` may lower it, never raise it."""
    fallback_uid: int = DEFAULT_FALLBACK_UID
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
    warm_pool: PoolConfig = field(default_factory=PoolConfig)
    """How many warm sandboxes are kept ready, growing on bursts, within a memory budget."""
    warm_pool_size: int | None = None
    """Shorthand for a fixed pool of this many per image and limits (0: every task
    starts cold); None uses `warm_pool`."""
    disk: DiskLimits = field(default_factory=DiskLimits)
    """Disk limits of every sandbox (an agent's `diskWriteLimit` may only lower the cap)."""
    model_max_retries: int = wire.DEFAULT_MODEL_MAX_RETRIES
    """Retries of one subagent model call on 429/5xx/529."""
    model_retry_total_s: float = wire.DEFAULT_MODEL_RETRY_TOTAL_S
    """Longest one subagent model call keeps retrying."""
    mcp_startup_timeout_s: float = wire.DEFAULT_MCP_STARTUP_TIMEOUT_S
    """How long a subagent's MCP server may take to start and list its tools."""
    mcp_tool_timeout_s: float = wire.DEFAULT_MCP_TOOL_TIMEOUT_S
    """How long one MCP tool call may take."""
    claude_dir: Path | None = None
    """The user's Claude Code directory (CLAUDE.md, skills, agent memory); None: none."""
    project_skills: dict[str, str] | None = None
    """The workspace's skills as its trust verdict read them (`NAME` → SKILL.md text;
    empty when the workspace is not trusted); None: read from the workspace."""
    user_skills: bool = True
    """Whether the user's `~/.claude/skills` are offered (False under a managed
    `strictPluginOnlyCustomization` that locks skills, as in Claude Code)."""
    model_aliases: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_MODEL_ALIASES))
    """Model alias → model id, for a Task call's `model` (as for agent files')."""
    context_windows: dict[str, int] = field(default_factory=dict)
    """Context window (tokens) per model id; others get
    `wire.DEFAULT_CONTEXT_WINDOW_TOKENS`."""

    apply: ApplySettings = field(default_factory=ApplySettings)
    """`isolation: worktree`: the run's default isolation, `--apply` mode and the
    policy a change set must pass (`orchestrator.apply`)."""

    def context_window(self, model: str) -> int:
        return self.context_windows.get(model, wire.DEFAULT_CONTEXT_WINDOW_TOKENS)

    def pool_config(self) -> PoolConfig:
        """The warm pool's sizing (`warm_pool_size`, when given, fixes it)."""
        if self.warm_pool_size is None:
            return self.warm_pool
        size = self.warm_pool_size
        return replace(self.warm_pool, min_ready=size, max_ready=size)

    @classmethod
    def from_settings(
        cls, settings: Settings, **overrides: Unpack[CapOverrides]
    ) -> TaskManagerConfig:
        """The caps and retry budget of `Settings`; overrides (flags) that are not
        None win."""
        config = cls(
            fallback_uid=settings.fallback_uid,
            max_depth=settings.max_depth,
            max_children_per_task=settings.max_children,
            max_concurrent_total=settings.max_concurrent,
            queue_limit=settings.queue_limit,
            model_max_retries=settings.model_max_retries,
            model_retry_total_s=settings.model_retry_total_s,
            mcp_startup_timeout_s=settings.mcp_timeout_s,
            mcp_tool_timeout_s=settings.mcp_tool_timeout_s,
            context_windows=dict(settings.model_context_windows),
            model_aliases=dict(settings.model_aliases),
            claude_dir=settings.claude_dir,
            disk=DiskLimits.from_settings(settings),
            warm_pool=settings.pool_config(),
            apply=ApplySettings(
                mode=settings.apply_mode,
                isolation=settings.isolation,
                policy=ApplyPolicy(
                    max_binary_bytes=settings.apply_max_binary,
                    max_file_bytes=settings.apply_max_file,
                ),
            ),
        )
        for name, value in overrides.items():
            if value is not None:
                setattr(config, name, value)  # names and types checked by CapOverrides
        return config


class TaskCaps(TypedDict, total=False):
    """The cap flags of `warden run` (None: keep the settings')."""

    max_depth: int | None
    max_children_per_task: int | None
    max_concurrent_total: int | None
    queue_limit: int | None


class CapOverrides(TaskCaps, total=False):
    """Flags that override `TaskManagerConfig` fields (None: keep the settings')."""

    max_total_tokens: int | None
    fallback_uid: int | None
    user: str | None
    warm_pool_size: int | None
    disk: DiskLimits | None
    model_max_retries: int | None
    model_retry_total_s: float | None


def check_caps(
    config: TaskManagerConfig,
    parent: TaskContext | None,
    children_started: Mapping[str | None, int],
) -> None:
    """Raise CapError when a new task under `parent` (None: the root) would nest
    deeper than max_depth or give its parent more than max_children_per_task."""
    depth = (parent.depth if parent else 0) + 1
    if depth > config.max_depth:
        raise CapError(
            f"max_depth cap ({config.max_depth}) reached: a subagent at depth "
            f"{depth - 1} may not delegate further. Do the work yourself, or report back "
            "to your parent what is left to do."
        )
    if parent is not None and children_started.get(parent.task_id, 0) >= (
        config.max_children_per_task
    ):
        raise CapError(
            f"max_children_per_task cap ({config.max_children_per_task}) reached for "
            f"{parent.task_id}: it may not start more subagents. Do the rest yourself or "
            "report back what is left."
        )
