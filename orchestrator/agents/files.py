"""Reading Claude Code subagent files (`*.md` with YAML frontmatter) into `AgentDefinition`s.

    ---
    name: code-reviewer
    description: Reviews recent changes. Use after writing code.
    tools: Read, Grep, Glob, Bash     # or a YAML list; absent = every tool
    model: inherit                    # or sonnet / opus / haiku / a model id
    maxTurns: 20
    memory: project                   # Claude Code: user / project / local agent memory
    skills: [api-style]               # Claude Code: skills preloaded into its context
    color: blue                       # Claude Code: shown by `warden agents list`
    warden:                           # warden's own keys, apart from Claude Code's
      image: agent                    # agent | bash | a local image
      timeout: 10m                    # seconds, or 90s / 10m / 1h
      memory: 1g                      # RAM: bytes, or 512m / 1g / 2GiB
      cpus: 1.5
      pids: 256
      tokenBudget: 200000             # tokens per subagent (all usage fields)
      diskWriteLimit: 500m            # lowers the run's disk write cap
      network: none                   # or {allowedDomains: [...], deniedDomains: [...]}
      fork: true                      # start from the parent's conversation
    ---
    The system prompt.

Claude Code's other keys (`effort`, `initialPrompt`, `omitClaudeMd`, `background`,
`isolation`, `mcpServers`) are read by `orchestrator.agents.keys`, as are the old
top-level spellings of warden's keys (deprecated, with a warning; `memory: 512m`, a
size, is the old RAM limit). Unknown keys are kept in `AgentDefinition.extra`.
`disallowedTools` is honoured (removed from `tools`); `permissionMode` narrows the
parent's mode (it never widens it); `hooks` (Claude Code's settings format) apply to
that agent's tool calls, on top of the settings files' hooks, with the same rules
for running them on the host. Nothing security-relevant is ignored silently.

A file without frontmatter is not an agent definition (a README, notes) and is
skipped. Tools warden does not run are dropped with one warning each.

Many real files (including ones Claude Code's `/agents` command writes) have an
unquoted `description:` holding `user: "…"` examples, which is not valid YAML.
Such frontmatter is read key by key instead, as Claude Code does, and a literal
`\\n` in a description becomes a newline.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import ValidationError

from orchestrator.agents.definition import AgentDefinition, disallowed_mcp, split_tool_names
from orchestrator.agents.keys import (
    MEMORY_SCOPES,
    MEMORY_TOOLS,
    WARDEN_KEYS,
    claude_code_fields,
    parse_duration,
    parse_size,
    warden_values,
)
from orchestrator.config import DEFAULT_MODEL_ALIASES as MODEL_ALIASES
from orchestrator.errors import AgentDefinitionError, PolicyError
from orchestrator.permissions.hooks import parse_hooks
from orchestrator.permissions.models import MODES
from orchestrator.regular_file import open_regular
from sandbox_tools.wire import TOOL_NAMES

MAX_AGENT_FILE_BYTES = 256 * 1024
"""Largest agent file read."""
MAX_AGENT_FILES = 500
"""Most agent files read from one directory."""

KNOWN_KEYS = {
    "name": "name",
    "description": "description",
    "tools": "tools",
    "disallowedTools": "disallowed_tools",
    "model": "model",
    "maxTurns": "max_turns",
    "permissionMode": "permission_mode",
    "hooks": "hooks",
    "memory": "memory_scope",
    "skills": "skills",
    "effort": "effort",
    "initialPrompt": "initial_prompt",
    "omitClaudeMd": "omit_claude_md",
    "background": "background",
    "isolation": "isolation",
    "mcpServers": "mcp_servers",
    "color": "color",
    "warden": "warden",
} | {key: field for key, field in WARDEN_KEYS.items() if key != "memory"}
"""Frontmatter key → `AgentDefinition` field (warden's keys: their deprecated
top-level spellings, read with a warning)."""

RESTRICTING_KEYS = frozenset(
    {
        "tools",
        "disallowedTools",
        "network",
        "permissionMode",
        "maxTurns",
        "timeout",
        "memory",
        "cpus",
        "pids",
        "tokenBudget",
        "diskWriteLimit",
        "hooks",
        "warden",
    }
)
"""Keys that narrow what an agent may do: malformed or misspelt, the file is refused."""
NETWORK_KEYS = ("allowedDomains", "deniedDomains")


def _warden_fields(found: dict[str, object], path: Path, text: str) -> dict[str, object]:
    """`AgentDefinition` fields from warden's keys (`keys.warden_values`)."""
    fields: dict[str, object] = {}
    for key in ("pids", "tokenBudget"):
        if found.get(key) is not None:
            if not isinstance(found[key], int) or isinstance(found[key], bool):
                raise AgentDefinitionError(
                    f"{path}: `{key}` must be a whole number, not {found[key]!r}"
                )
            fields[WARDEN_KEYS[key]] = found[key]
    if found.get("fork") is not None:
        if not isinstance(found["fork"], bool):
            raise AgentDefinitionError(
                f"{path}: `fork` must be true or false, not {found['fork']!r}"
            )
        fields["fork"] = found["fork"]
    if found.get("image") is not None:
        fields["image"] = _text(found, "image", path)
    if found.get("timeout") is not None:
        fields["timeout_s"] = parse_duration(found["timeout"], "timeout", path)
    if found.get("memory") is not None:
        fields["memory_limit"] = parse_size(found["memory"], "memory", path)
    if found.get("diskWriteLimit") is not None:
        fields["disk_write_limit"] = parse_size(found["diskWriteLimit"], "diskWriteLimit", path)
    if found.get("cpus") is not None:
        cpus = found["cpus"]
        try:
            if isinstance(cpus, bool) or not isinstance(cpus, int | float | str):
                raise TypeError(cpus)
            fields["cpus"] = float(cpus)
        except (TypeError, ValueError):
            raise AgentDefinitionError(
                f"{path}: `cpus: {found['cpus']}` is not a number; use e.g. 1 or 1.5"
            ) from None
    if "network" in found:
        check_network(found["network"], path, text)
        fields["network"] = found["network"]
    return fields


def _line(text: str, key: str) -> str:
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith(f"{key}:") or line.lstrip().startswith(f'"{key}":'):
            return f": line {number}"
    return ""


def check_network(block: object, path: Path, text: str) -> None:
    """`network:` is none/off/false, or a mapping of allowedDomains/deniedDomains lists
    of domain strings; anything else is refused (it would keep the run's allowlist)."""
    if block is None or block is False:
        return
    if isinstance(block, str) and block.strip().lower() in ("none", "off"):
        return
    if not isinstance(block, dict):
        raise AgentDefinitionError(
            f"{path}{_line(text, 'network')}: `network` must be `none` or a mapping with "
            f"{' and/or '.join(NETWORK_KEYS)}, not {block!r}"
        )
    for key, value in block.items():
        if key not in NETWORK_KEYS:
            raise AgentDefinitionError(
                f"{path}{_line(text, str(key))}: `network.{key}` is not read, so the agent would "
                f"keep the run's whole allowlist; use {' or '.join(NETWORK_KEYS)}"
            )
        if not isinstance(value, list) or not all(isinstance(d, str) for d in value):
            raise AgentDefinitionError(
                f"{path}{_line(text, str(key))}: `network.{key}` must be a list of domains "
                f"(`[]` for none), not {value!r}"
            )


_FIELD_TO_KEY = {field: key for key, field in KNOWN_KEYS.items()} | {
    "system_prompt": "the body (system prompt)",
    "memory_limit": "warden.memory",
}
_KEY_LINE = re.compile(r"^([A-Za-z_][\w-]*)\s*:(?:\s(.*)|)$")

FRONTMATTER_HELP = (
    "An agent file starts with a line `---`, then YAML with at least `name:` and "
    "`description:`, then a line `---`, then the system prompt."
)


class NotAnAgentFile(AgentDefinitionError):
    """A Markdown file with no frontmatter: not an agent definition (skipped in a directory)."""


@dataclass
class LoadedAgents:
    """What one directory of agent files gave."""

    agents: list[AgentDefinition] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    """What was dropped or worked around; the agents still load."""
    problems: list[str] = field(default_factory=list)
    """Files that did not load, each with why."""
    failed: dict[str, str] = field(default_factory=dict)
    """Agent name → why its file did not load, where the name could be read."""
    skipped: list[Path] = field(default_factory=list)
    """Markdown files that are not agent definitions."""


def split_frontmatter(text: str, file: Path) -> tuple[dict[str, object], str, list[str]]:
    """(frontmatter values, body, warnings) of an agent file's text."""
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        raise NotAnAgentFile(f"{file}: no YAML frontmatter. {FRONTMATTER_HELP}")
    end = next((i for i in range(1, len(lines)) if lines[i].strip() in ("---", "...")), None)
    if end is None:
        raise AgentDefinitionError(
            f"{file}: the frontmatter is not closed; add a line `---` after its last key. "
            + FRONTMATTER_HELP
        )
    front = "\n".join(lines[1:end])
    body = "\n".join(lines[end + 1 :]).strip()
    warnings: list[str] = []
    try:
        values = yaml.safe_load(front) if front.strip() else {}
    except yaml.YAMLError as exc:
        # Claude Code reads agent files whose text values hold `: ` (most published
        # ones); so does warden, key by key, but a restricting key is never guessed:
        # a guess at `disallowedTools: [Bash, Edit` would hand Bash over.
        values = _read_key_by_key(front, file, exc)
        warnings.append(
            f"{file}: frontmatter is not valid YAML ({str(exc).splitlines()[0]}); "
            "read its text keys one by one. Quote the value to silence this."
        )
    if not isinstance(values, dict):
        raise AgentDefinitionError(
            f"{file}: the frontmatter must be `key: value` lines, not a "
            f"{type(values).__name__}. {FRONTMATTER_HELP}"
        )
    return values, body, warnings


def _read_key_by_key(front: str, file: Path, error: yaml.YAMLError) -> dict[str, object]:
    """Frontmatter that is not YAML as a whole: each top-level key on its own. A key
    that restricts the agent must be valid YAML by itself, or the file is refused."""
    chunks: list[tuple[str, int, list[str]]] = []
    for number, line in enumerate(front.splitlines(), start=2):
        found = _KEY_LINE.match(line)
        if found:
            chunks.append((found.group(1), number, [line]))
        elif chunks and (not line.strip() or line[0] in " \t#"):
            chunks[-1][2].append(line)
        elif line.strip() and not line.lstrip().startswith("#"):
            raise AgentDefinitionError(
                f"{file}: line {number} of the frontmatter is not `key: value` ({line[:60]!r}); "
                f"the YAML parser says: {error}"
            )
    values: dict[str, object] = {}
    for key, number, chunk in chunks:
        try:
            parsed = yaml.safe_load("\n".join(chunk))
        except yaml.YAMLError as exc:
            if key in RESTRICTING_KEYS or key.lower() in {k.lower() for k in RESTRICTING_KEYS}:
                problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
                raise AgentDefinitionError(
                    f"{file}: line {number}: `{key}` is not valid YAML ({problem}); it "
                    "restricts the agent, so it is never guessed: close every [ ] and { } "
                    "(e.g. `disallowedTools: [Bash, Edit]`)"
                ) from exc
            parsed = None
        if isinstance(parsed, dict) and key in parsed:
            values[key] = parsed[key]
            continue
        first = chunk[0].split(":", 1)[1].strip()
        rest = [line.strip() for line in chunk[1:] if line.strip()]
        values[key] = "\n".join([first, *rest]).strip()
    return values


def parse_tool_list(value: object, key: str, file: Path) -> list[str] | None:
    """Tools from `Read, Grep` or a YAML list; None when absent (null) or `*`."""
    if value is None or value == "*":
        return None
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return [item.strip() for item in value if item.strip()]
    raise AgentDefinitionError(
        f"{file}: `{key}` must be a comma-separated string (`Read, Grep`) or a list of "
        f"tool names, not {value!r}"
    )


def _text(values: dict[str, object], key: str, file: Path) -> str | None:
    value = values.get(key)
    if value is None:
        return None
    if isinstance(value, bool | dict | list):
        raise AgentDefinitionError(f"{file}: `{key}` must be text, not {value!r}")
    return str(value).strip()


def load_agent_file(
    path: Path, *, source: str | None = None, expect: str | None = None
) -> tuple[AgentDefinition, list[str]]:
    """The definition in one agent file, and warnings about what was dropped. `expect`
    (`sha256:HEX`): the bytes trust was decided on; other bytes are refused."""
    try:
        size = path.stat().st_size
        if size > MAX_AGENT_FILE_BYTES:
            raise AgentDefinitionError(
                f"{path}: {size} bytes is over the {MAX_AGENT_FILE_BYTES}-byte limit for agent "
                "files; shorten the system prompt"
            )
        text = _read_text(path)
    except UnicodeDecodeError as exc:
        raise AgentDefinitionError(f"{path}: not UTF-8 text ({exc}); save it as UTF-8") from exc
    except OSError as exc:
        raise AgentDefinitionError(f"{path}: cannot read it: {exc.strerror or exc}") from exc
    if expect is not None and expect != "sha256:" + hashlib.sha256(text.encode()).hexdigest():
        raise AgentDefinitionError(
            f"{path}: not the content this run's trust verdict was decided on (changed or "
            "added since the run read it); not loaded. Review it and run `warden trust`"
        )
    values, body, warnings = split_frontmatter(text, path)

    name = _text(values, "name", path)
    description = _text(values, "description", path)
    missing = [key for key, value in (("name", name), ("description", description)) if not value]
    if missing:
        raise AgentDefinitionError(
            f"{path}: the frontmatter has no {' or '.join(f'`{k}`' for k in missing)}; "
            "add `name: my-agent` and `description: when to use it`"
        )
    assert description is not None
    if not body:
        raise AgentDefinitionError(
            f"{path}: no system prompt; write the agent's instructions after the closing `---`"
        )

    fields: dict[str, object] = {
        "name": name,
        "description": description.replace("\\n", "\n"),
        "system_prompt": body,
        "source": source or str(path),
    }
    listed = parse_tool_list(values.get("tools"), "tools", path)
    denied = parse_tool_list(values.get("disallowedTools"), "disallowedTools", path) or []
    if listed is not None and values.get("memory") in MEMORY_SCOPES:
        # as in Claude Code: an agent with memory can read and write it whatever its
        # `tools` list (`disallowedTools` still takes them away)
        listed = [*listed, *(t for t in MEMORY_TOOLS if t not in listed)]
    if listed is not None or denied:
        kept, dropped = split_tool_names(list(TOOL_NAMES) if listed is None else listed)
        kept = [tool for tool in kept if tool not in denied]
        for tool, why in dropped:
            warnings.append(f"{path}: agent {name!r}: dropped tool {tool!r}: {why}")
        if not kept:
            warnings.append(
                f"{path}: agent {name!r} has no tool warden runs "
                f"({', '.join(listed or []) or 'empty list'}, minus `disallowedTools`); it "
                "can only answer from its prompt"
            )
        fields["tools"] = tuple(t for t in kept if not t.startswith("mcp__"))
        fields["mcp_tools"] = tuple(dict.fromkeys(t for t in kept if t.startswith("mcp__")))
        fields["dropped_tools"] = tuple(tool for tool, _ in dropped)
        fields["inherits_tools"] = listed is None
        fields["mcp_denied"], ignored = disallowed_mcp(denied)
        for tool in ignored:
            warnings.append(
                f"{path}: agent {name!r}: `disallowedTools` entry {tool!r} removes nothing: "
                "Claude Code takes `mcp__*`, `mcp__server`, `mcp__server__*` or "
                "`mcp__server__tool` there"
            )
    if values.get("hooks") is not None:
        try:
            hooks, hook_warnings = parse_hooks(values["hooks"], f"agent {name}:{path}")
        except PolicyError as exc:
            raise AgentDefinitionError(str(exc)) from exc
        fields["hooks"] = tuple(hooks)
        warnings.extend(hook_warnings)
    mode = values.get("permissionMode")
    if mode is not None:
        if mode not in MODES:
            raise AgentDefinitionError(
                f"{path}: `permissionMode: {mode}` is not a mode; use one of {', '.join(MODES)}"
            )
        fields["permission_mode"] = mode
    model = _text(values, "model", path)
    fields["model"] = None if model in (None, "", "inherit") else model
    if model and model != "inherit" and "-" not in model and model not in MODEL_ALIASES:
        warnings.append(
            f"{path}: agent {name!r}: `model: {model}` is not an alias warden knows "
            f"({', '.join(MODEL_ALIASES)}, inherit); it is sent as a model id"
        )
    if values.get("maxTurns") is not None:
        if not isinstance(values["maxTurns"], int) or isinstance(values["maxTurns"], bool):
            raise AgentDefinitionError(
                f"{path}: `maxTurns` must be a whole number, not {values['maxTurns']!r}"
            )
        fields["max_turns"] = values["maxTurns"]
    fields.update(claude_code_fields(values, path, str(name), warnings))
    fields.update(_warden_fields(warden_values(values, path, warnings), path, text))

    extra = {key: value for key, value in values.items() if key not in KNOWN_KEYS}
    fields["extra"] = extra
    folded = {
        key.lower().replace("_", "").replace("-", ""): key for key in [*KNOWN_KEYS, "network"]
    }
    for key in extra:
        near = folded.get(str(key).lower().replace("_", "").replace("-", ""))
        if near and near != key and near in RESTRICTING_KEYS:
            raise AgentDefinitionError(
                f"{path}{_line(text, str(key))}: key {key!r} is not read, so what it restricts "
                f"would not hold; write it as {near!r}"
            )
        if near and near != key:
            warnings.append(f"{path}: key {key!r} is not read; did you mean {near!r}?")
    try:
        return AgentDefinition.model_validate(fields), warnings
    except ValidationError as exc:
        problems = "; ".join(
            f"`{_FIELD_TO_KEY.get(str(e['loc'][0]), e['loc'][0])}`: {e['msg']}"
            for e in exc.errors()
        )
        raise AgentDefinitionError(f"{path}: {problems}") from exc


def load_agent_dir(
    directory: Path,
    *,
    confine_to: Path | None = None,
    expect: Callable[[Path], str] | None = None,
) -> LoadedAgents:
    """Every agent in `*.md` under `directory` (sorted), and every problem in one pass;
    `confine_to` refuses paths leaving it (a project directory, which subagents can
    write to). `expect`: the `sha256:HEX` a file's bytes must have (trust's snapshot)."""
    loaded = LoadedAgents()
    if not directory.is_dir():
        return loaded
    real_dir = directory.resolve()
    if confine_to is not None and not real_dir.is_relative_to(confine_to.resolve()):
        loaded.problems.append(
            f"{directory} resolves to {real_dir}, outside the workspace {confine_to}; "
            "project agent files must live in the workspace (put shared agents in the "
            "user's config dir instead)"
        )
        return loaded
    files = sorted(directory.rglob("*.md"))
    if len(files) > MAX_AGENT_FILES:
        loaded.problems.append(
            f"{directory}: {len(files)} agent files, over the limit of {MAX_AGENT_FILES}; "
            f"read the first {MAX_AGENT_FILES} in name order"
        )
        files = files[:MAX_AGENT_FILES]
    seen: dict[str, Path] = {}
    for file in files:
        try:
            agent, file_warnings = _load_confined(
                file, real_dir, confined=confine_to is not None, expect=expect and expect(file)
            )
        except NotAnAgentFile:
            loaded.skipped.append(file)
            continue
        except AgentDefinitionError as exc:
            loaded.problems.append(str(exc))
            name = _name_of(file)
            if name:
                loaded.failed.setdefault(name, str(exc))
            continue
        if agent.name in seen:
            loaded.problems.append(
                f"{file} and {seen[agent.name]} both define agent {agent.name!r}; the first "
                "(in name order) is used. Rename one (`name:` in its frontmatter)"
            )
            continue
        seen[agent.name] = file
        loaded.agents.append(agent)
        loaded.warnings.extend(file_warnings)
    return loaded


def _load_confined(
    file: Path, real_dir: Path, *, confined: bool, expect: str | None = None
) -> tuple[AgentDefinition, list[str]]:
    real = file.resolve()
    if confined and not real.is_relative_to(real_dir):
        raise AgentDefinitionError(
            f"{file} is a link to {real}, outside {real_dir}; refusing to read it "
            "(subagents can write to the workspace). Replace the link with the file."
        )
    if not real.is_file():
        raise AgentDefinitionError(f"{file}: not a regular file (a broken link?); remove it")
    return load_agent_file(file, expect=expect)


def _read_text(path: Path) -> str:
    """At most `MAX_AGENT_FILE_BYTES` of a regular file, as UTF-8 (links followed: the
    caller has confined them). Opened non-blocking and checked (`regular_file`): a
    FIFO in the file's place would otherwise hold the open for good."""
    with open_regular(path, follow_links=True) as handle:
        return handle.read(MAX_AGENT_FILE_BYTES).decode("utf-8")


def _name_of(file: Path) -> str | None:
    """The `name:` of a file that failed to load, best effort, for error messages."""
    try:
        text = _read_text(file)
    except (OSError, UnicodeDecodeError):
        return None
    found = re.search(r"^name:\s*['\"]?([A-Za-z0-9][\w.-]{0,63})['\"]?\s*$", text, re.MULTILINE)
    return found.group(1) if found else None
