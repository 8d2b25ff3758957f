"""The frontmatter keys of an agent file beyond name, description, tools and hooks:
Claude Code's (`memory`, `skills`, `effort`, `initialPrompt`, `omitClaudeMd`,
`background`, `isolation`, `mcpServers`, `color`) with the pinned Claude Code's
meaning, and warden's own limits in one `warden:` block (RAM, CPUs, pids, disk,
token budget, network, image, timeout, fork), which no Claude Code key can collide
with.

The old top-level spellings of warden's keys still load, each with a deprecation
warning; `memory:` is read by its value: a scope (`user`, `project`, `local`) is
Claude Code's agent memory, a size (`512m`) is the old RAM limit.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.errors import AgentDefinitionError

MemoryScope = Literal["user", "project", "local"]
MEMORY_SCOPES: tuple[MemoryScope, ...] = ("user", "project", "local")
MEMORY_TOOLS = ("Write", "Edit", "Read")
"""Tools an agent with `memory` gets even when its `tools` list omits them (Claude Code)."""
EffortLevel = Literal["low", "medium", "high", "xhigh", "max"]
EFFORT_LEVELS: tuple[EffortLevel, ...] = ("low", "medium", "high", "xhigh", "max")
EFFORT_ALIASES = {"med": "medium"}
NO_EFFORT_MODELS = (
    "claude-opus-4-0", "claude-opus-4-1", "claude-sonnet-4-0", "claude-sonnet-4-5",
    "claude-haiku-4-5",
)  # fmt: skip
"""Models the pinned Claude Code sends no effort to (besides every `claude-3-*`)."""
NO_MAX_EFFORT_MODELS = (*NO_EFFORT_MODELS, "claude-opus-4-5")
"""Models without `max`: Claude Code sends `high` instead."""
NO_XHIGH_EFFORT_MODELS = (*NO_MAX_EFFORT_MODELS, "claude-opus-4-6", "claude-sonnet-4-6")
"""Models without `xhigh`: Claude Code sends `high` instead."""
_DATED_MODEL = re.compile(r"^(claude-(?:opus|sonnet|haiku)-4)-(\d{8})$")
NO_MID_CONVERSATION_SYSTEM_MODELS = (
    "claude-opus-4-0", "claude-opus-4-1", "claude-opus-4-5", "claude-opus-4-6",
    "claude-opus-4-7", "claude-sonnet-4-0", "claude-sonnet-4-5", "claude-sonnet-4-6",
    "claude-haiku-4-5",
)  # fmt: skip
"""Models the pinned Claude Code sends no `system`-role message in `messages` (besides
every `claude-3-*`): their skill listing is a reminder in the first user message."""
ISOLATIONS = ("worktree",)

WARDEN_KEYS = {
    "memory": "memory_limit",
    "cpus": "cpus",
    "pids": "pids",
    "diskWriteLimit": "disk_write_limit",
    "tokenBudget": "token_budget",
    "network": "network",
    "image": "image",
    "timeout": "timeout_s",
    "fork": "fork",
}
"""Keys of the `warden:` block → `AgentDefinition` field."""
OLD_TOP_LEVEL = ("cpus", "pids", "diskWriteLimit", "tokenBudget", "network", "image", "timeout",
                 "fork")  # fmt: skip
"""warden keys that were top-level before the `warden:` block (`memory` is apart)."""


class McpServerConfig(BaseModel):
    """One MCP server as an agent file defines it (Claude Code's `.mcp.json` shape):
    a stdio command, or a remote (`http`/`sse`) URL. Started by the tools layer."""

    model_config = ConfigDict(extra="allow", frozen=True)

    type: Literal["stdio", "http", "sse"] = "stdio"
    command: str | None = Field(default=None, min_length=1)
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    url: str | None = Field(default=None, min_length=1)
    headers: dict[str, str] = Field(default_factory=dict)


class McpServerSpec(BaseModel):
    """One entry of an agent file's `mcpServers`: a server by name, with its own
    config (`{name: {command: …}}`), or without one (a bare `name`: a server the
    project's or user's MCP configuration defines)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=100)
    config: McpServerConfig | None = None


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h)?\s*$", re.IGNORECASE)
_DURATION_UNITS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}


def is_size(value: object) -> bool:
    if isinstance(value, int) and not isinstance(value, bool):
        return value > 0
    return isinstance(value, str) and _SIZE.match(value) is not None


def parse_duration(value: object, key: str, file: Path) -> float:
    """Seconds from `900`, `90s`, `15m` or `1h`."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    found = _DURATION.match(str(value)) if isinstance(value, str) else None
    if found and float(found.group(1)) > 0:
        unit = (found.group(2) or "s").lower()
        return float(found.group(1)) * _DURATION_UNITS[unit]
    raise AgentDefinitionError(
        f"{file}: `{key}: {value}` is not a duration; use seconds (900) or 90s, 15m, 1h"
    )


def parse_size(value: object, key: str, file: Path) -> int:
    """Bytes from `1073741824`, `512m`, `1g`, `2GiB` (1024-based, like Docker)."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    found = _SIZE.match(value) if isinstance(value, str) else None
    if found and float(found.group(1)) > 0:
        return int(float(found.group(1)) * _SIZE_UNITS[found.group(2).lower()])
    raise AgentDefinitionError(
        f"{file}: `{key}: {value}` is not a size; use bytes or a unit: 512m, 1g, 2GiB"
    )


def name_list(value: object, key: str, file: Path) -> list[str]:
    """Names from `a, b` or a YAML list of text."""
    if value is None:
        return []
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return [item.strip() for item in value if item.strip()]
    raise AgentDefinitionError(
        f"{file}: `{key}` must be a comma-separated string or a list of names, not {value!r}"
    )


def warden_values(values: dict[str, object], file: Path, warnings: list[str]) -> dict[str, object]:
    """warden's own keys, from the `warden:` block and (deprecated) the top level,
    by their block names. The same key in both places is refused (which one holds
    would be a guess); an unknown key in the block is refused (a limit misspelt
    would not hold)."""
    block = values.get("warden")
    if block is None:
        block = {}
    if not isinstance(block, dict):
        raise AgentDefinitionError(
            f"{file}: `warden:` must be a mapping of warden's keys "
            f"({', '.join(WARDEN_KEYS)}), not {block!r}"
        )
    unknown = [str(key) for key in block if key not in WARDEN_KEYS]
    if unknown:
        raise AgentDefinitionError(
            f"{file}: `warden.{unknown[0]}` is not a warden key, so what it sets would not "
            f"hold; the block takes {', '.join(WARDEN_KEYS)}"
        )
    found: dict[str, object] = dict(block)
    for key in OLD_TOP_LEVEL:
        if key not in values:
            continue
        if key in block:
            raise AgentDefinitionError(
                f"{file}: `{key}` is set both at the top level and under `warden:`; "
                "keep the one under `warden:`"
            )
        found[key] = values[key]
        warnings.append(
            f"{file}: top-level `{key}` is deprecated (Claude Code may give it a meaning); "
            f"move it under `warden:` (`warden: {{{key}: …}}`)"
        )
    memory = values.get("memory")
    if memory is not None and memory not in MEMORY_SCOPES:
        if not is_size(memory):
            raise AgentDefinitionError(
                f"{file}: `memory: {memory}` is neither a Claude Code memory scope "
                f"({', '.join(MEMORY_SCOPES)}) nor a size; for the sandbox's RAM limit "
                "write `warden: {memory: 512m}`"
            )
        if "memory" in block:
            raise AgentDefinitionError(
                f"{file}: `memory: {memory}` (a RAM size) at the top level and `warden.memory` "
                "both set the RAM limit; keep `warden.memory`"
            )
        found["memory"] = memory
        warnings.append(
            f"{file}: `memory: {memory}` as a RAM limit is deprecated (in Claude Code "
            "`memory` is the agent's memory scope: user, project or local); write "
            f"`warden: {{memory: {memory}}}`"
        )
    return found


def _effort_level(text: str) -> str | None:
    """A level (`med` is `medium`, as in Claude Code), a whole number as text, or None."""
    word = text.strip().lower()
    word = EFFORT_ALIASES.get(word, word)
    if word in EFFORT_LEVELS or word.isdigit():
        return word
    return None


def request_effort(effort: str | None, model: str) -> EffortLevel | None:
    """The `output_config.effort` the pinned Claude Code sends for an agent's `effort`
    on `model`: the level as written; nothing for a number (it sends none) or for a
    model without effort; `high` for `max`/`xhigh` where the model lacks them."""
    level = next((lvl for lvl in EFFORT_LEVELS if lvl == effort), None)
    if level is None:
        return None
    name = _model_name(model)
    if name.startswith("claude-3-") or name in NO_EFFORT_MODELS:
        return None
    if (level == "max" and name in NO_MAX_EFFORT_MODELS) or (
        level == "xhigh" and name in NO_XHIGH_EFFORT_MODELS
    ):
        return "high"
    return level


def _model_name(model: str) -> str:
    """`model` as the pinned Claude Code's model table names it (no date suffix)."""
    name = model.strip().lower()
    if (dated := _DATED_MODEL.match(name)) is not None:
        return f"{dated.group(1)}-0"  # `claude-opus-4-20250514` is Opus 4.0
    return re.sub(r"-\d{8}$", "", name)


def mid_conversation_system(model: str) -> bool:
    """Whether the pinned Claude Code sends `model` its skill listing as a `system`-role
    message after the first user message (measured: Sonnet 5 does, Haiku 4.5 gets a
    reminder instead); a model its table does not know does, as on the first-party API."""
    name = _model_name(model)
    return not (name.startswith("claude-3-") or name in NO_MID_CONVERSATION_SYSTEM_MODELS)


def claude_code_fields(
    values: dict[str, object], file: Path, name: str, warnings: list[str]
) -> dict[str, object]:
    """`AgentDefinition` fields from Claude Code's keys. Lenient as Claude Code is
    where a key only adds (a bad `effort` or `mcpServers` entry is skipped with a
    warning); nothing here widens what the agent may do."""
    fields: dict[str, object] = {}
    where = f"{file}: agent {name!r}"
    memory = values.get("memory")
    if memory in MEMORY_SCOPES:
        fields["memory_scope"] = memory
    skills = name_list(values.get("skills"), "skills", file)
    if skills:
        fields["skills"] = tuple(dict.fromkeys(skills))
    effort = values.get("effort")
    if effort is not None:
        if isinstance(effort, int) and not isinstance(effort, bool):
            fields["effort"] = str(effort)
        elif isinstance(effort, str) and (level := _effort_level(effort)) is not None:
            fields["effort"] = level
        else:
            warnings.append(
                f"{where}: `effort: {effort}` is not a level ({', '.join(EFFORT_LEVELS)}) "
                "or a whole number; ignored"
            )
    for key, field, kind in (
        ("initialPrompt", "initial_prompt", str),
        ("color", "color", str),
        ("omitClaudeMd", "omit_claude_md", bool),
        ("background", "background", bool),
    ):
        value = values.get(key)
        if value is None:
            continue
        if not isinstance(value, kind):
            raise AgentDefinitionError(
                f"{file}: `{key}` must be {'true or false' if kind is bool else 'text'}, "
                f"not {value!r}"
            )
        fields[field] = value.strip() if isinstance(value, str) else value
    isolation = values.get("isolation")
    if isolation is not None:
        if isolation not in ISOLATIONS:
            raise AgentDefinitionError(
                f"{file}: `isolation: {isolation}` is not an isolation mode; Claude Code "
                "agent files take `worktree`"
            )
        fields["isolation"] = isolation
    servers = mcp_servers(values.get("mcpServers"), where, warnings)
    if servers:
        fields["mcp_servers"] = tuple(servers)
    return fields


def mcp_servers(value: object, where: str, warnings: list[str]) -> list[McpServerSpec]:
    """`mcpServers` as Claude Code reads it: a list of names and one-key mappings
    `{name: config}` (a mapping of several is read as such a list). An entry that is
    neither is skipped with a warning, as Claude Code skips it."""
    if value is None:
        return []
    items: list[object]
    if isinstance(value, dict):
        items = [{key: config} for key, config in value.items()]
    elif isinstance(value, list):
        items = list(value)
    elif isinstance(value, str):
        items = [part.strip() for part in value.split(",") if part.strip()]
    else:
        warnings.append(f"{where}: `mcpServers` must be a list, not {value!r}; ignored")
        return []
    specs: list[McpServerSpec] = []
    for item in items:
        try:
            if isinstance(item, str):
                specs.append(McpServerSpec(name=item.strip()))
                continue
            if not isinstance(item, dict) or len(item) != 1:
                raise ValueError("expected a server name or `{name: config}` with one key")
            ((server, config),) = item.items()
            if not isinstance(config, dict):
                raise ValueError(f"the config of {server!r} is not a mapping")
            spec = McpServerSpec(name=str(server), config=McpServerConfig.model_validate(config))
            if spec.config is not None and not (spec.config.command or spec.config.url):
                raise ValueError(f"{server!r} has neither `command` nor `url`")
            specs.append(spec)
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            warnings.append(f"{where}: `mcpServers` entry {item!r} skipped: {first}")
    return specs
