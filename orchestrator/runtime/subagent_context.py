"""What a subagent is told besides its agent prompt and its task, as Claude Code
tells its subagents: the agent's memory section (appended to the system prompt),
and in the first user message the CLAUDE.md files and the date (one system
reminder before the task) and the preloaded skills (after it). The environment
details and the git snapshot are added by the runner, inside the sandbox
(`sandbox_tools.environment`).

Every file read here may be attacker-written (the workspace's CLAUDE.md, skills
and memory; the user's too, in the end): each is read as a regular file only
(never a FIFO or a device), links confined to the directory they belong to,
size-capped, as text. It is prompt text for the model and nothing else: nothing
here decides or runs anything. The prompt text is warden's own wording, with
the intent of Claude Code's (see docs/agents.md for the differences).
"""

from __future__ import annotations

import datetime
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from orchestrator.agents.definition import BUILTIN_SOURCE, AgentDefinition
from orchestrator.jsontypes import JSONObject
from orchestrator.permissions.skill_rules import SkillGrant, skill_frontmatter, skill_grant
from orchestrator.regular_file import open_regular
from orchestrator.workspace import agent_memory
from orchestrator.workspace.inputs import PolicyInputs
from sandbox_tools import wire

MAX_CONTEXT_FILE_BYTES = 64 * 1024
"""Most of one CLAUDE.md, SKILL.md or MEMORY.md read (the rest is cut, saying so)."""
MEMORY_INDEX_LINES = 200
"""Lines of MEMORY.md put in the prompt (Claude Code's limit too)."""
SANDBOX_WORKSPACE = "/workspace"

MEMORY_SECTION = """\
# Agent memory

You keep a memory that lasts from one task to the next, as files in \
`{directory}`. Use it for what a later task of yours could not work out again \
from the project itself: what the people you work for want and why, decisions \
and their reasons, pitfalls you ran into. Do not store what the code, the git \
history or CLAUDE.md already say, nor the details of the task at hand.

Each memory is a short Markdown file of its own (e.g. `feedback_tests.md`), \
starting with frontmatter (`name`, a one-line `description`, `type`: user, \
feedback, project or reference), then the fact, why it holds, and how to apply \
it. `MEMORY.md` in that directory is the index: one line per memory file, \
`- [Title](file.md) - what it is about`, no frontmatter, kept short (only its \
first {lines} lines are shown to you). Update or remove memories that turn out \
wrong instead of adding duplicates, and check a remembered file, function or \
flag still exists before you rely on it.

{scope}

## MEMORY.md

{index}"""
SCOPE_NOTES = {
    "user": "This memory is yours across every project: keep what you learn general.",
    "project": (
        "This memory belongs to this project and is shared with its team through "
        "version control: keep it about this project."
    ),
    "local": (
        "This memory belongs to this project on this machine only (not in version "
        "control): keep it about this project and machine."
    ),
}
NO_INDEX = "(empty: no memories yet)"
USER_MEMORY_NOTE = (
    "In warden this directory is in the user's home, which your sandbox cannot reach: "
    "its index is above, read-only; put what you would save in your final answer instead."
)

CONTEXT_HEADER = (
    "<system-reminder>\nContext for your task follows. The CLAUDE.md files hold the "
    "user's and the project's instructions: follow them; they take precedence over "
    "your default behaviour.\n"
)
CONTEXT_FOOTER = (
    "\nThis context may not bear on your task; do not respond to it unless it does.\n"
    "</system-reminder>\n"
)
CLAUDE_MD_KINDS = {
    "user": "the user's own instructions, for every project",
    "project": "the project's instructions, checked into it",
    "local": "the project's local instructions, not checked in",
}


@dataclass(frozen=True)
class ContextSources:
    """Where one run's context files are: the user's Claude Code directory and the
    workspace (None: none), and the workspace's skills as trusted."""

    claude_dir: Path | None
    workspace: Path | None
    project_skills: Mapping[str, str] | None = None
    """`NAME` → the text of `.claude/skills/NAME/SKILL.md` as the run's trust verdict
    read it (empty: an untrusted workspace has no skills); None: read the workspace's
    own files (a caller without a trust verdict)."""
    user_skills: bool = True
    """Whether the user's skills (`claude_dir/skills`) are offered."""


def read_text(path: Path, confine_to: Path | None) -> str | None:
    """A regular file's text, at most MAX_CONTEXT_FILE_BYTES (cut, saying so); None
    when absent, not a regular file, or a link out of `confine_to`."""
    try:
        real = path.resolve()
        if confine_to is not None and not real.is_relative_to(confine_to.resolve()):
            return None
        with open_regular(real, follow_links=False) as handle:
            data = handle.read(MAX_CONTEXT_FILE_BYTES + 1)
    except (OSError, ValueError):
        return None
    text = data[:MAX_CONTEXT_FILE_BYTES].decode("utf-8", errors="replace")
    if len(data) > MAX_CONTEXT_FILE_BYTES:
        text += f"\n[cut at {MAX_CONTEXT_FILE_BYTES} bytes]"
    return text


def memory_directory(agent: AgentDefinition, sources: ContextSources) -> tuple[Path, str] | None:
    """(the host directory, how the subagent sees it) of the agent's memory."""
    scope = agent.memory_scope
    if scope == "user" and sources.claude_dir is not None:
        host = sources.claude_dir / agent_memory.USER_MEMORY / agent_memory.memory_slug(agent.name)
        return host, str(host)
    parts = agent_memory.workspace_parts(scope or "", agent.name)
    if parts is not None and sources.workspace is not None:
        return sources.workspace.joinpath(*parts), f"{SANDBOX_WORKSPACE}/{'/'.join(parts)}/"
    return None


def memory_section(agent: AgentDefinition, sources: ContextSources) -> str | None:
    """The memory section of the agent's system prompt; None without `memory`. The
    index is read as `agent_memory.read_index` reads it (a sandbox wrote it)."""
    where = memory_directory(agent, sources)
    if where is None or agent.memory_scope is None:
        return None
    _, shown = where
    if agent.memory_scope == "user":
        assert sources.claude_dir is not None
        base = sources.claude_dir
        parts: tuple[str, ...] = (agent_memory.USER_MEMORY, agent_memory.memory_slug(agent.name))
    else:
        assert sources.workspace is not None
        base = sources.workspace
        parts = agent_memory.workspace_parts(agent.memory_scope, agent.name) or ()
    index = agent_memory.read_index(base, parts)
    lines = (index or "").strip().splitlines()
    if len(lines) > MEMORY_INDEX_LINES:
        lines = [*lines[:MEMORY_INDEX_LINES], f"[{len(lines) - MEMORY_INDEX_LINES} more lines cut]"]
    scope = SCOPE_NOTES[agent.memory_scope]
    if agent.memory_scope == "user":
        scope += " " + USER_MEMORY_NOTE
    return MEMORY_SECTION.format(
        directory=shown, lines=MEMORY_INDEX_LINES, scope=scope,
        index="\n".join(lines) if lines else NO_INDEX,
    )  # fmt: skip


def claude_md_files(sources: ContextSources) -> list[tuple[str, str, str]]:
    """(kind, shown path, text) of each CLAUDE.md that exists, in Claude Code's order:
    the user's, then the project's."""
    found: list[tuple[str, str, str]] = []
    if sources.claude_dir is not None:
        text = read_text(sources.claude_dir / "CLAUDE.md", sources.claude_dir)
        if text is not None:
            found.append(("user", str(sources.claude_dir / "CLAUDE.md"), text))
    if sources.workspace is not None:
        for rel, kind in (
            ("CLAUDE.md", "project"),
            (".claude/CLAUDE.md", "project"),
            ("CLAUDE.local.md", "local"),
        ):
            text = read_text(sources.workspace / rel, sources.workspace)
            if text is not None:
                found.append((kind, f"{SANDBOX_WORKSPACE}/{rel}", text))
    return found


def context_reminder(
    agent: AgentDefinition, sources: ContextSources, today: datetime.date | None = None
) -> JSONObject:
    """The block before the task: the CLAUDE.md files and the date. Only a built-in
    type's `omit_claude_md` leaves the files out (Explore, Plan): the pinned Claude
    Code sends them to a custom agent whose file says `omitClaudeMd: true`, and
    warden does what it does (the request differential checks it)."""
    parts = [CONTEXT_HEADER]
    omit = agent.omit_claude_md and agent.source == BUILTIN_SOURCE
    files = [] if omit else claude_md_files(sources)
    if files:
        parts.append("# claudeMd")
        for kind, shown, text in files:
            parts.append(f"Contents of {shown} ({CLAUDE_MD_KINDS[kind]}):\n\n{text.strip()}\n")
    day = (today or datetime.datetime.now(datetime.UTC).date()).isoformat()
    parts.append(f"# currentDate\nToday's date is {day}.\n")
    parts.append(CONTEXT_FOOTER)
    return {"type": "text", "text": "\n".join(parts)}


def skill_file(name: str, sources: ContextSources) -> tuple[Path, str] | None:
    """(directory, text) of skill `name`: the project's first (as trusted), then the
    user's."""
    if "/" in name or name in ("", ".", ".."):
        return None
    places: list[tuple[Path, Path]] = []
    if sources.workspace is not None and sources.project_skills is not None:
        text = sources.project_skills.get(name)
        if text is not None:
            return sources.workspace / ".claude" / "skills" / name, text
    elif sources.workspace is not None:
        places.append((sources.workspace / ".claude" / "skills", sources.workspace))
    if sources.claude_dir is not None and sources.user_skills:
        places.append((sources.claude_dir / "skills", sources.claude_dir))
    for root, confine in places:
        text = read_text(root / name / "SKILL.md", confine)
        if text is not None:
            return root / name, text
    return None


def skill_blocks(
    agent: AgentDefinition, sources: ContextSources
) -> tuple[list[JSONObject], list[str]]:
    """The preloaded skills' blocks (after the task), and the names not found."""
    blocks: list[JSONObject] = []
    missing: list[str] = []
    for name in agent.skills:
        found = skill_file(name, sources)
        if found is None:
            missing.append(name)
            continue
        directory, text = found
        shown = directory
        if sources.workspace is not None and directory.is_relative_to(sources.workspace):
            shown = Path(SANDBOX_WORKSPACE) / directory.relative_to(sources.workspace)
        body = _without_frontmatter(text).strip()
        blocks.append({"type": "text", "text": f"<skill-name>{name}</skill-name>"})
        blocks.append({"type": "text", "text": f"Skill directory: {shown}\n\n{body}"})
    return blocks, missing


def skill_names(sources: ContextSources) -> list[str]:
    """Every skill the Skill tool may load: the project's (as trusted), then the user's
    that the project's do not shadow, at most `wire.MAX_SKILLS`."""
    names: list[str] = []
    if sources.workspace is not None:
        if sources.project_skills is not None:
            names += sorted(sources.project_skills)
        else:
            names += _skill_dirs(sources.workspace / ".claude" / "skills")
    if sources.claude_dir is not None and sources.user_skills:
        names += _skill_dirs(sources.claude_dir / "skills")
    return list(dict.fromkeys(names))[: wire.MAX_SKILLS]


def _skill_dirs(root: Path) -> list[str]:
    try:
        return sorted(e.name for e in os.scandir(root) if e.is_dir(follow_symlinks=False))
    except OSError:
        return []


def available_skills(sources: ContextSources) -> list[JSONObject]:
    """The skills for the spec (`wire_models.SkillSpec`): name, description (from the
    frontmatter), directory as the subagent sees it, text without the frontmatter."""
    found: list[JSONObject] = []
    for name in skill_names(sources):
        located = skill_file(name, sources)
        if located is None:
            continue
        directory, text = located
        shown = directory
        if sources.workspace is not None and directory.is_relative_to(sources.workspace):
            shown = Path(SANDBOX_WORKSPACE) / directory.relative_to(sources.workspace)
        found.append({
            "name": name,
            "description": listed_description(text),
            "directory": str(shown),
            "text": _without_frontmatter(text).strip()[: wire.MAX_SKILL_CHARS],
            "invocable": skill_grant(name, text).invocable,
        })  # fmt: skip
    return found


def skill_grants(sources: ContextSources) -> tuple[SkillGrant, ...]:
    """What each skill the Skill tool may load means to the permission engine (its
    `allowed-tools`; whether it loads unasked), read from the same text as the spec's."""
    found: list[SkillGrant] = []
    for name in skill_names(sources):
        located = skill_file(name, sources)
        if located is not None:
            found.append(skill_grant(name, located[1]))
    return tuple(found)


def skill_listing(skills: list[JSONObject]) -> str:
    """The text that lists the skills to the model, as Claude Code words it: the runner
    sends it as a `system`-role message after the first user message, unwrapped
    (`sandbox_tools.conversation.with_listing`), or, to a model that takes none,
    `listing_reminder`; empty when no skill is listed."""
    lines = [f"- {s['name']}: {s['description']}" for s in skills if s.get("invocable", True)]
    if not lines:
        return ""
    return "The following skills are available for use with the Skill tool:\n\n" + "\n".join(lines)


def listing_reminder(listing: str) -> JSONObject:
    """The skill listing for a model that takes no `system`-role message in `messages`
    (`agents.keys.mid_conversation_system`): as the pinned CLI sends it then, a
    reminder block at the start of the first user message."""
    return {"type": "text", "text": f"<system-reminder>\n{listing}\n</system-reminder>\n"}


def listed_description(text: str) -> str:
    """What Claude Code lists after a skill's name: its `description` (else the first
    line of its text, a heading's `#` dropped, at most 100 characters), then
    ` - when_to_use` when it has one; cut with `…` at `MAX_SKILL_DESCRIPTION_CHARS`."""
    front = skill_frontmatter(text)
    raw = front.get("description")
    described = str(raw).strip() if isinstance(raw, str | int | float) else ""
    if not described:
        described = _first_line(_without_frontmatter(text))
    when = front.get("when_to_use")
    if when is not None:
        described = f"{described} - {when}"
    limit = wire.MAX_SKILL_DESCRIPTION_CHARS
    return described if len(described) <= limit else described[: limit - 1] + "\u2026"


def _first_line(body: str) -> str:
    for line in body.splitlines():
        line = line.strip()
        if line:
            heading = re.match(r"^#+\s+(.+)$", line)
            shown = heading.group(1) if heading else line
            return shown if len(shown) <= 100 else shown[:97] + "..."
    return "Skill"


def _without_frontmatter(text: str) -> str:
    lines = text.lstrip("\ufeff").splitlines()
    if lines and lines[0].strip() == "---":
        end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
        if end is not None:
            return "\n".join(lines[end + 1 :])
    return text


def trusted_skills(inputs: PolicyInputs) -> dict[str, str]:
    """The workspace's skills a subagent may load or preload: each
    `.claude/skills/NAME/SKILL.md` whose text the trust verdict read (the content the
    person said yes to); none in an untrusted workspace."""
    if not inputs.trusted:
        return {}
    found: dict[str, str] = {}
    for rel, seen in inputs.trust.prints.items():
        parts = rel.split("/")
        if (
            len(parts) == 4
            and parts[:2] == [".claude", "skills"]
            and parts[3] == "SKILL.md"
            and seen.text is not None
            and seen.digest.startswith("sha256:")
        ):
            found[parts[2]] = seen.text
    return found
