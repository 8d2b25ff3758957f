"""warden's settings: one closed set of values, filled from the environment in one place.

`Settings`, `PoolConfig` and `AnalyserBound` are frozen, keyword-only stdlib
dataclasses made by `values.value` (only `__init__` compiled per class; not slotted:
`slots=True` builds each class twice, paid at every start), not pydantic models (the project's rule is libraries first; this is where
we do not, and why): every `warden` command builds `Settings` before anything else, and
`warden exec`'s whole start-up budget (issue 39: at most 1.5x a bare `docker run`,
about 55 ms over the docker SDK's own floor) could not pay for importing pydantic
(~64 ms of wall time on these machines) plus building these models (~16 ms). Each
field still has its default and the docstring under it; `from_env` is still the one
function that reads the environment; `__post_init__` enforces the bounds the models'
`Field(ge=, gt=, le=)` did. A bad value raises `SettingError` (a `ConfigError`) naming
the variable, the value it had and what is accepted. How a variable's text becomes a
value (sizes, context windows, approver names) and what a bound is live in
`setting_fields`; this module owns which settings there are.

May import: `errors`, `setting_fields`, `values`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import field
from pathlib import Path
from typing import Any, Literal

from orchestrator.errors import ConfigError
from orchestrator.setting_fields import Secret as Secret
from orchestrator.setting_fields import SettingError as SettingError
from orchestrator.setting_fields import approver_spec_problem as approver_spec_problem
from orchestrator.setting_fields import (
    check_bounds,
    parse_context_windows,
    parse_number,
    parse_size,
    real,
    whole,
)
from orchestrator.values import value
from sandbox_tools import wire

DEFAULT_BASE_IMAGE = "python:3.12-slim"
DEFAULT_FALLBACK_UID = 2_100_000_000
"""uid (and gid) of sandboxes in a root-owned workspace: above the ranges accounts and
directory services (SSSD: up to 2,000,200,000) hand out, so no host user shares it
(a user with the sandbox's uid could connect to its sockets, or ptrace it)."""
DEFAULT_DISK_WRITE_BYTES = 2 * 1024**3
"""Most bytes one sandbox may write (and the largest file it may make); see
`backend.disk`."""
DEFAULT_DISK_FREE_FLOOR_BYTES = 1024**3
"""Least free space the workspace's file system must keep while a sandbox runs."""
DEFAULT_DISK_FREE_INODES = 10_000
"""Least free inodes (files, directories, links) the workspace's file system must keep
while a sandbox runs: millions of empty files use no bytes, yet exhaust it all the same."""
DEFAULT_BUILD_PIDS = 1024
"""Most processes of all a dev container build's steps at once (`images.buildbox`)."""
DEFAULT_BUILD_MEMORY_BYTES = 2 * 1024**3
"""Memory of all a dev container build's steps together, no swap."""
DEFAULT_BUILD_DEADLINE_S = 900.0
"""Wall-clock time of a whole dev container build."""
BUILD_PIDS_VARIABLE = "WARDEN_BUILD_PIDS_LIMIT"
BUILD_MEMORY_VARIABLE = "WARDEN_BUILD_MEMORY"
BUILD_DEADLINE_VARIABLE = "WARDEN_BUILD_DEADLINE_S"
BUILD_DISK_VARIABLE = "WARDEN_BUILD_DISK_LIMIT"
DEFAULT_MODEL = "claude-sonnet-5"
"""The parent's model (and its subagents') unless `--model` or an agent file says otherwise."""
DEFAULT_MODEL_ALIASES: dict[str, str] = {
    "sonnet": DEFAULT_MODEL,
    "opus": "claude-opus-4-8",
    "haiku": "claude-haiku-4-5",
    "opusplan": DEFAULT_MODEL,
}
"""Claude Code's model aliases, as agent files use them (`model: sonnet`), mapped to
model ids as the pinned Claude Code maps them (measured: its subagents' requests name
`claude-sonnet-5`, `claude-opus-4-8`, `claude-haiku-4-5-20251001`). `opusplan` means Opus while planning and Sonnet otherwise; subagents
execute, so it is Sonnet. Override one with Claude Code's variables
`ANTHROPIC_DEFAULT_SONNET_MODEL`, `ANTHROPIC_DEFAULT_OPUS_MODEL`,
`ANTHROPIC_DEFAULT_HAIKU_MODEL`."""
_ALIAS_VARIABLES = {
    "sonnet": "ANTHROPIC_DEFAULT_SONNET_MODEL",
    "opus": "ANTHROPIC_DEFAULT_OPUS_MODEL",
    "haiku": "ANTHROPIC_DEFAULT_HAIKU_MODEL",
}
CLAUDE_MANAGED_SETTINGS = Path("/etc/claude-code/managed-settings.json")
"""Where Claude Code reads an enterprise's managed settings on Linux."""
DEFAULT_MAX_CONCURRENT = 32
DEFAULT_QUEUE_LIMIT = 256
DEFAULT_MAX_CHILDREN = 10

DEFAULT_POOL_MIN = 1
DEFAULT_POOL_MAX = 8
DEFAULT_POOL_IDLE_S = 60.0
DEFAULT_POOL_MEMORY_BYTES = 4 * 1024**3
DEFAULT_WEBHOOK_TIMEOUT_S = 300.0
"""A webhook question unanswered this long is denied (five minutes)."""
DEFAULT_WEBHOOK_LISTEN = "127.0.0.1:0"
"""Where webhook answers are taken: loopback, any free port."""
"""Memory limits of all warm sandboxes together: 8 at the default 512 MiB each."""


@value
class PoolConfig:
    """How many warm sandboxes the pool keeps, and within what memory."""

    min_ready: int = whole(DEFAULT_POOL_MIN, ge=0)
    """Kept ready per image and limits while the run lasts (0 with `max_ready` 0: off)."""
    max_ready: int = whole(DEFAULT_POOL_MAX, ge=0)
    """Most ready (or starting) per image and limits after bursts."""
    idle_s: float = real(DEFAULT_POOL_IDLE_S, gt=0)
    """A sandbox above `min_ready` unused this long is removed."""
    memory_budget_bytes: int = whole(DEFAULT_POOL_MEMORY_BYTES, ge=0)
    """Sum of the memory limits of all warm sandboxes, ready or starting."""

    def __post_init__(self) -> None:
        check_bounds(self)

    @property
    def enabled(self) -> bool:
        return self.max_ready > 0 and self.memory_budget_bytes > 0

    def most_at(self, memory_bytes: int) -> int:
        """How many warm sandboxes of this memory limit the budget holds."""
        return self.memory_budget_bytes // memory_bytes if memory_bytes > 0 else 0

    def describe(self, memory_bytes: int) -> str:
        """One line for `warden doctor` and logs."""
        if not self.enabled:
            return "warm pool off: every task starts cold"
        fits = self.most_at(memory_bytes)
        return (
            f"warm pool: {self.min_ready} ready per image, growing on bursts to "
            f"{self.max_ready}; extras removed after {self.idle_s:g} s idle; memory budget "
            f"{self.memory_budget_bytes // 1024**2} MiB ({fits} sandbox(es) at "
            f"{memory_bytes // 1024**2} MiB each)"
        )


DEFAULT_ANALYSER_DEADLINE_MS = 1000
"""Longest one Bash command line's analysis may take in a worker process before the
call asks (a 60 KB here-document writing a source file takes about 20 ms)."""
DEFAULT_ANALYSER_WORKERS = 2


@value
class AnalyserBound:
    """The Bash analyser's time bound (`permissions.analyser_bound`): long command lines
    are analysed in worker processes, and one over its deadline asks."""

    deadline_ms: int = whole(DEFAULT_ANALYSER_DEADLINE_MS, ge=1, le=600_000)
    """A worker's analysis of one command line longer than it is killed after this long
    and the call asks; a call also waits at most this long for a free worker."""
    workers: int = whole(DEFAULT_ANALYSER_WORKERS, ge=1, le=16)
    """Worker processes kept warm (each about 40 MB)."""

    def __post_init__(self) -> None:
        check_bounds(self)


_NUMBERS = {
    "WARDEN_MODEL_MAX_RETRIES": "model_max_retries",
    "WARDEN_MODEL_RETRY_TOTAL_S": "model_retry_total_s",
    "WARDEN_MCP_TIMEOUT_S": "mcp_timeout_s",
    "WARDEN_MCP_TOOL_TIMEOUT_S": "mcp_tool_timeout_s",
    "WARDEN_MAX_CONCURRENT": "max_concurrent",
    "WARDEN_QUEUE_LIMIT": "queue_limit",
    "WARDEN_MAX_DEPTH": "max_depth",
    "WARDEN_WEBHOOK_TIMEOUT_S": "webhook_timeout_s",
    "WARDEN_MAX_CHILDREN": "max_children",
    "WARDEN_WARM_POOL_MIN": "warm_pool_min",
    "WARDEN_WARM_POOL_MAX": "warm_pool_max",
    "WARDEN_WARM_POOL_IDLE_S": "warm_pool_idle_s",
    BUILD_PIDS_VARIABLE: "build_pids_limit",
    BUILD_DEADLINE_VARIABLE: "build_deadline_s",
    "WARDEN_ANALYSER_DEADLINE_MS": "analyser_deadline_ms",
    "WARDEN_ANALYSER_WORKERS": "analyser_workers",
}
"""Numeric settings read from the environment: variable -> field."""


_PATHS = (
    "state_dir",
    "config_dir",
    "github_step_summary",
    "managed_policy",
    "claude_managed_settings",
    "claude_dir",
)
"""Settings that are paths (text given for one becomes a Path)."""

MIN_SECRET_CHARS = 16
"""Shortest shared secret warden accepts (WARDEN_WEBHOOK_SECRET, WARDEN_MCP_TOKEN): a
guessable secret protects nothing."""


@value
class Settings:
    """Process-wide settings. Build with `Settings.from_env()`, or directly in tests
    (change one with `dataclasses.replace`)."""

    state_dir: Path = field(default_factory=lambda: Path.home() / ".local/state/warden")
    """Where the SQLite store, run logs and broker sockets live (outside any workspace,
    so a subagent cannot tamper with its own audit trail)."""
    config_dir: Path = field(default_factory=lambda: Path.home() / ".config/warden")
    """The user's config: `agents/*.md`, `settings.json`."""
    base_image: str = DEFAULT_BASE_IMAGE
    """Python base image for warden's images; bootstrapped from Debian if absent."""
    fallback_uid: int = whole(DEFAULT_FALLBACK_UID, gt=0)
    """uid:gid sandboxes run as when the workspace is owned by root (never 0)."""
    anthropic_base_url: str | None = None
    """Anthropic-compatible endpoint (ANTHROPIC_BASE_URL); None is the SDK default."""
    anthropic_api_key: Secret | None = None
    """The model API key (ANTHROPIC_API_KEY). Stays on the host, always."""
    non_interactive: bool = False
    """True under CI=true: nothing waits for a human."""
    github_step_summary: Path | None = None
    """Under GitHub Actions (GITHUB_ACTIONS=true): the job's step-summary file
    (GITHUB_STEP_SUMMARY). A run appends its Markdown summary there and prints
    workflow-command annotations for denials and failures."""
    github_annotations: bool = False
    """True under GitHub Actions: denials and failures become `::error`/`::warning`
    workflow commands on stderr."""
    disk_write_limit: int = whole(DEFAULT_DISK_WRITE_BYTES, ge=0)
    """Most bytes one sandbox may write (WARDEN_DISK_WRITE_LIMIT, e.g. `2g`; 0: no cap).
    Crossing it kills the sandbox with status `disk_limit`."""
    disk_free_floor: int = whole(DEFAULT_DISK_FREE_FLOOR_BYTES, ge=0)
    """Free space the workspace's file system must keep while sandboxes run
    (WARDEN_DISK_FREE_FLOOR, e.g. `1g`; 0: no floor)."""
    disk_free_inodes: int = whole(DEFAULT_DISK_FREE_INODES, ge=0)
    """Free inodes the workspace's file system must keep while sandboxes run
    (WARDEN_DISK_FREE_INODES, a count; 0: no floor)."""
    managed_policy: Path | None = None
    """An administrator's policy file (WARDEN_MANAGED_POLICY); its deny and ask rules
    and its mode hold whatever any other source says."""
    claude_managed_settings: Path = CLAUDE_MANAGED_SETTINGS
    """Claude Code's managed settings file on Linux, deployed by an enterprise; read
    below `managed_policy`. Deliberately not movable by an environment variable."""
    claude_dir: Path = field(default_factory=lambda: Path.home() / ".claude")
    """Claude Code's user directory (`CLAUDE_CONFIG_DIR`, as Claude Code reads it):
    `settings.json` and `agents/`."""
    build_pids_limit: int = whole(DEFAULT_BUILD_PIDS, ge=0)
    """Most processes of a dev container build's steps together (WARDEN_BUILD_PIDS_LIMIT;
    0: none)."""
    build_memory: int = whole(DEFAULT_BUILD_MEMORY_BYTES, gt=6 * 1024 * 1024)
    """Memory of a dev container build's steps together (WARDEN_BUILD_MEMORY, e.g. `2g`)."""
    build_deadline_s: float = real(DEFAULT_BUILD_DEADLINE_S, gt=0)
    """Wall-clock time of a whole dev container build (WARDEN_BUILD_DEADLINE_S)."""
    build_disk_limit: int | None = whole(None, ge=0)
    """Most bytes a dev container build's steps write together (WARDEN_BUILD_DISK_LIMIT,
    e.g. `2g`; 0: no cap); None: the sandbox write limit (`disk_write_limit`)."""
    devcontainer: bool = True
    """Run subagents in the workspace's dev container when it has one
    (WARDEN_DEVCONTAINER=0 turns it off by default; `--devcontainer` /
    `--no-devcontainer` decide per run)."""
    trust_workspace: bool = False
    """Treat every workspace as trusted (WARDEN_TRUST_WORKSPACE=1, for CI): its own
    allow rules, mode, hooks and agent files apply (see `workspace.trust`)."""
    approvers: tuple[str, ...] = ()
    """Who answers questions (WARDEN_APPROVERS, comma list; `warden run --approver`
    replaces it): `terminal`, `webhook:URL`. Empty: the terminal when there is one."""
    webhook_secret: Secret | None = None
    """The shared secret of `webhook:` approvers (WARDEN_WEBHOOK_SECRET): questions and
    answers are signed with HMAC-SHA256 of it. Never on the command line (`ps` shows it)."""
    webhook_timeout_s: float = real(DEFAULT_WEBHOOK_TIMEOUT_S, gt=0)
    """A webhook question nobody answers within this is denied (WARDEN_WEBHOOK_TIMEOUT_S)."""
    webhook_listen: str = DEFAULT_WEBHOOK_LISTEN
    """HOST:PORT where warden takes webhook answers (WARDEN_WEBHOOK_LISTEN; port 0: any free
    one). Loopback unless you put a proxy or tunnel in front: answers are signed, not secret."""
    webhook_callback_url: str | None = None
    """The answer URL sent to the receiver when it is not the listening address itself,
    e.g. behind a reverse proxy (WARDEN_WEBHOOK_CALLBACK_URL)."""

    isolation: Literal["worktree"] | None = None
    """The run's default isolation (WARDEN_ISOLATION=worktree; `warden run --isolation`):
    every subagent works in its own working copy, its changes applied after review."""
    apply_mode: Literal["ask", "auto", "never"] = "ask"
    """What happens to an isolated subagent's changes that policy passes
    (WARDEN_APPLY; `warden run --apply`): a person reviews them (`ask`), they are
    applied (`auto`, for CI), or they wait for `warden apply TASK` (`never`)."""
    apply_max_binary: int = whole(1 << 20, ge=0)
    """Largest binary file a change set may write (WARDEN_APPLY_MAX_BINARY, e.g. `4m`)."""
    apply_max_file: int = whole(16 << 20, ge=0)
    """Largest text file a change set may write (WARDEN_APPLY_MAX_FILE, e.g. `32m`)."""

    model_aliases: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_MODEL_ALIASES))
    """Model alias → model id, for `model:` in agent files and `--model`
    (see `DEFAULT_MODEL_ALIASES`)."""

    def __post_init__(self) -> None:
        check_bounds(self)
        for name in _PATHS:
            value = getattr(self, name)
            if isinstance(value, str):
                object.__setattr__(self, name, Path(value))
            elif not isinstance(value, Path | None):
                raise SettingError(name, value, "must be a path")
        for name in ("anthropic_api_key", "webhook_secret"):
            value = getattr(self, name)
            if isinstance(value, str):
                object.__setattr__(self, name, Secret(value))
            elif not isinstance(value, Secret | None):
                raise SettingError(name, "<hidden>", "must be text")
        if self.isolation not in (None, "worktree"):
            raise SettingError("isolation", self.isolation, "must be worktree (or unset)")
        if self.apply_mode not in ("ask", "auto", "never"):
            raise SettingError("apply_mode", self.apply_mode, "must be ask, auto or never")
        object.__setattr__(self, "approvers", tuple(self.approvers))
        for spec in self.approvers:
            problem = approver_spec_problem(spec)
            if problem:
                raise SettingError("approvers", spec, problem)
        for model, tokens in self.model_context_windows.items():
            if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1000:
                raise SettingError(
                    "model_context_windows", f"{model}={tokens}", "tokens must be at least 1000"
                )

    def resolve_model(self, name: str) -> str:
        """The model id for `name`: an alias's id, or `name` itself (a model id)."""
        alias = name.strip().lower()
        if alias.endswith("[1m]"):
            alias = alias[: -len("[1m]")]
        return self.model_aliases.get(alias, name.strip())

    model_max_retries: int = whole(wire.DEFAULT_MODEL_MAX_RETRIES, ge=0, le=100)
    """Retries of one model call on 429/5xx/529, parent and subagents
    (WARDEN_MODEL_MAX_RETRIES); 400/401/402/403 and spend limits are never retried."""
    model_retry_total_s: float = real(wire.DEFAULT_MODEL_RETRY_TOTAL_S, gt=0)
    """Longest one model call keeps retrying (WARDEN_MODEL_RETRY_TOTAL_S)."""
    mcp_timeout_s: float = real(wire.DEFAULT_MCP_STARTUP_TIMEOUT_S, gt=0)
    """How long a subagent's MCP server may take to start and list its tools before
    it counts as failed (WARDEN_MCP_TIMEOUT_S)."""
    mcp_tool_timeout_s: float = real(wire.DEFAULT_MCP_TOOL_TIMEOUT_S, gt=0)
    """How long one MCP tool call may take (WARDEN_MCP_TOOL_TIMEOUT_S)."""
    model_context_windows: dict[str, int] = field(default_factory=dict)
    """Context window in tokens per model id, for models whose window is not the
    standard 200,000 (a subagent keeps each request inside its model's window;
    WARDEN_CONTEXT_WINDOWS=model=tokens,...)."""
    max_concurrent: int = whole(DEFAULT_MAX_CONCURRENT, ge=1)
    """Subagents running at once per run; more wait in a queue (WARDEN_MAX_CONCURRENT)."""
    queue_limit: int = whole(DEFAULT_QUEUE_LIMIT, ge=0)
    """Tasks that may wait for a free slot; past it a task is refused (WARDEN_QUEUE_LIMIT)."""
    max_depth: int = whole(1, ge=1)
    """How deep subagents may nest; 1: they may not delegate (WARDEN_MAX_DEPTH)."""
    max_children: int = whole(DEFAULT_MAX_CHILDREN, ge=1)
    """Subagents one subagent may start over its life (WARDEN_MAX_CHILDREN)."""
    warm_pool_min: int = whole(DEFAULT_POOL_MIN, ge=0)
    """Warm sandboxes kept ready per image and limits (WARDEN_WARM_POOL_MIN)."""
    warm_pool_max: int = whole(DEFAULT_POOL_MAX, ge=0)
    """Most warm sandboxes per image and limits after bursts (WARDEN_WARM_POOL_MAX; 0: off)."""
    warm_pool_idle_s: float = real(DEFAULT_POOL_IDLE_S, gt=0)
    """A warm sandbox above the minimum unused this long is removed (WARDEN_WARM_POOL_IDLE_S)."""
    warm_pool_memory: int = whole(DEFAULT_POOL_MEMORY_BYTES, ge=0)
    """Sum of the memory limits of all warm sandboxes (WARDEN_WARM_POOL_MEMORY, e.g. `4g`;
    0: off)."""

    analyser_deadline_ms: int = whole(DEFAULT_ANALYSER_DEADLINE_MS, ge=1, le=600_000)
    """Longest analysis of one long Bash command line before the call asks
    (WARDEN_ANALYSER_DEADLINE_MS); see `AnalyserBound`."""
    analyser_workers: int = whole(DEFAULT_ANALYSER_WORKERS, ge=1, le=16)
    """Analyser worker processes kept warm (WARDEN_ANALYSER_WORKERS)."""

    def analyser_bound(self) -> AnalyserBound:
        """The Bash analyser's time bound from these settings."""
        return AnalyserBound(deadline_ms=self.analyser_deadline_ms, workers=self.analyser_workers)

    def pool_config(self) -> PoolConfig:
        """The warm pool's sizing from these settings."""
        return PoolConfig(
            min_ready=self.warm_pool_min,
            max_ready=self.warm_pool_max,
            idle_s=self.warm_pool_idle_s,
            memory_budget_bytes=self.warm_pool_memory,
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The one function that reads warden's environment variables."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}  # Any: each field's own type, checked by __post_init__
        origin: dict[str, str] = {}
        """setting -> the variable it came from, for messages about a bad value."""
        if "WARDEN_STATE_DIR" in env:
            values["state_dir"] = Path(env["WARDEN_STATE_DIR"])
        elif "XDG_STATE_HOME" in env:
            values["state_dir"] = Path(env["XDG_STATE_HOME"]) / "warden"
        if "WARDEN_CONFIG_DIR" in env:
            values["config_dir"] = Path(env["WARDEN_CONFIG_DIR"])
        elif "XDG_CONFIG_HOME" in env:
            values["config_dir"] = Path(env["XDG_CONFIG_HOME"]) / "warden"
        if env.get("CLAUDE_CONFIG_DIR"):
            values["claude_dir"] = Path(env["CLAUDE_CONFIG_DIR"]).expanduser()
        if "WARDEN_BASE_IMAGE" in env:
            values["base_image"] = env["WARDEN_BASE_IMAGE"]
        if "WARDEN_FALLBACK_UID" in env:
            values["fallback_uid"] = parse_number(
                cls, "fallback_uid", "WARDEN_FALLBACK_UID", env["WARDEN_FALLBACK_UID"]
            )
            origin["fallback_uid"] = "WARDEN_FALLBACK_UID"
        for key, name in (
            ("disk_write_limit", "WARDEN_DISK_WRITE_LIMIT"),
            ("disk_free_floor", "WARDEN_DISK_FREE_FLOOR"),
            ("warm_pool_memory", "WARDEN_WARM_POOL_MEMORY"),
            ("apply_max_binary", "WARDEN_APPLY_MAX_BINARY"),
            ("apply_max_file", "WARDEN_APPLY_MAX_FILE"),
        ):
            if env.get(name):
                values[key] = parse_size(env[name], name)
                origin[key] = name
        inodes = env.get("WARDEN_DISK_FREE_INODES", "").strip()
        if inodes:
            if not inodes.isdigit():
                raise ConfigError(
                    f"WARDEN_DISK_FREE_INODES={inodes!r} is not a count of inodes; "
                    "give a whole number such as 10000 (0: no floor)"
                )
            values["disk_free_inodes"] = int(inodes)
        if env.get(BUILD_DISK_VARIABLE, "").strip():
            values["build_disk_limit"] = parse_size(env[BUILD_DISK_VARIABLE], BUILD_DISK_VARIABLE)
            origin["build_disk_limit"] = BUILD_DISK_VARIABLE
        if env.get(BUILD_MEMORY_VARIABLE, "").strip():
            values["build_memory"] = parse_size(env[BUILD_MEMORY_VARIABLE], BUILD_MEMORY_VARIABLE)
            origin["build_memory"] = BUILD_MEMORY_VARIABLE
        if env.get("WARDEN_DEVCONTAINER", "").strip():
            values["devcontainer"] = env["WARDEN_DEVCONTAINER"].strip().lower() not in {
                "0",
                "false",
                "no",
                "off",
            }
        if env.get("WARDEN_ISOLATION", "").strip():
            values["isolation"] = env["WARDEN_ISOLATION"].strip()
            origin["isolation"] = "WARDEN_ISOLATION"
        if env.get("WARDEN_APPLY", "").strip():
            values["apply_mode"] = env["WARDEN_APPLY"].strip()
            origin["apply_mode"] = "WARDEN_APPLY"
        if env.get("WARDEN_MANAGED_POLICY"):
            values["managed_policy"] = Path(env["WARDEN_MANAGED_POLICY"])
        if env.get("ANTHROPIC_BASE_URL"):
            values["anthropic_base_url"] = env["ANTHROPIC_BASE_URL"]
        if env.get("ANTHROPIC_API_KEY"):
            values["anthropic_api_key"] = env["ANTHROPIC_API_KEY"]
        for variable, setting in _NUMBERS.items():
            if env.get(variable):
                values[setting] = parse_number(cls, setting, variable, env[variable])
                origin[setting] = variable
        values["non_interactive"] = env.get("CI", "").lower() in {"1", "true", "yes"}
        if env.get("GITHUB_ACTIONS", "").lower() == "true":
            values["github_annotations"] = True
            if env.get("GITHUB_STEP_SUMMARY"):
                values["github_step_summary"] = Path(env["GITHUB_STEP_SUMMARY"])
        if env.get("WARDEN_APPROVERS", "").strip():
            values["approvers"] = tuple(
                a.strip() for a in env["WARDEN_APPROVERS"].split(",") if a.strip()
            )
            origin["approvers"] = "WARDEN_APPROVERS"
        if env.get("WARDEN_WEBHOOK_SECRET"):
            if len(env["WARDEN_WEBHOOK_SECRET"]) < MIN_SECRET_CHARS:
                raise ConfigError(
                    f"WARDEN_WEBHOOK_SECRET is shorter than {MIN_SECRET_CHARS} characters: a "
                    "guessable secret lets anyone forge answers. Use a random one, e.g. "
                    "`python3 -c 'import secrets; print(secrets.token_urlsafe(32))'`"
                )
            values["webhook_secret"] = env["WARDEN_WEBHOOK_SECRET"]
        if env.get("WARDEN_WEBHOOK_LISTEN", "").strip():
            values["webhook_listen"] = env["WARDEN_WEBHOOK_LISTEN"].strip()
        if env.get("WARDEN_WEBHOOK_CALLBACK_URL", "").strip():
            values["webhook_callback_url"] = env["WARDEN_WEBHOOK_CALLBACK_URL"].strip()
        values["trust_workspace"] = env.get("WARDEN_TRUST_WORKSPACE", "").lower() in {
            "1",
            "true",
            "yes",
        }
        if env.get("WARDEN_CONTEXT_WINDOWS", "").strip():
            values["model_context_windows"] = parse_context_windows(env["WARDEN_CONTEXT_WINDOWS"])
            origin["model_context_windows"] = "WARDEN_CONTEXT_WINDOWS"
        aliases = dict(DEFAULT_MODEL_ALIASES)
        for alias, variable in _ALIAS_VARIABLES.items():
            if env.get(variable, "").strip():
                aliases[alias] = env[variable].strip()
        if env.get("ANTHROPIC_DEFAULT_SONNET_MODEL", "").strip():
            aliases["opusplan"] = aliases["sonnet"]
        values["model_aliases"] = aliases
        try:
            return cls(**values)
        except SettingError as exc:
            source = origin.get(exc.setting)
            if source is None:
                raise
            raise SettingError(exc.setting, env[source], exc.accepted, source) from None
