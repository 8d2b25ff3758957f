"""Subagent types: the built-ins and Claude Code subagent files.

A subagent type is an `AgentDefinition`. `AgentRegistry.load(settings, workspace)`
collects them, where a later source replaces an earlier one of the same name,
as in Claude Code:

1. built-in (`general-purpose`, `bash`, and Claude Code's read-only `Explore` and
   `Plan`, with warden's own prompts of the same intent; both leave CLAUDE.md and
   the git snapshot out of their context, as Claude Code's do),
2. user: `Settings.config_dir/agents/**/*.md`,
3. project: `WORKSPACE/.claude/agents/**/*.md` (wins).

Two files of one source with the same `name` are an error. Files are read once,
when the registry loads; a subagent that later writes into `.claude/agents/`
does not change the running registry. Project files must stay inside the
workspace (a symlink out of it is refused), since subagents can write there.

Loading is lenient where Claude Code is, and loud about it: a file that is not an
agent definition (no frontmatter, e.g. a README) is skipped; a listed tool warden
does not run (Claude Code-only tools, `mcp__*`, names it does not know) is dropped
with one warning each; a file that cannot be read as an agent is reported and
skipped, and every problem of a directory is reported in one pass
(`AgentRegistry.problems`). Asking for an agent that failed to load says why.
`model:` aliases (`sonnet`, `opus`, `haiku`, `inherit`) are resolved through
`Settings.model_aliases`. File parsing lives in `orchestrator.agents.files`.
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.agents.definition import (
    DEFAULT_TIMEOUT_S,
    IMAGE_BASH,
    AgentDefinition,
)
from orchestrator.agents.files import load_agent_dir
from orchestrator.config import DEFAULT_MODEL_ALIASES, Settings
from orchestrator.errors import UnknownAgentError
from sandbox_tools.wire import DELEGATION_TOOL_NAMES, TOOL_NAMES

if TYPE_CHECKING:
    from orchestrator.permissions.settings_files import SettingsStack

log = logging.getLogger(__name__)

PROJECT_AGENTS_DIR = Path(".claude") / "agents"
"""Project subagent files, relative to the workspace."""
USER_AGENTS_DIR = "agents"
NOT_TRUSTED = "not in the content trust was decided on"
"""The print a project agent file trust did not see must match (nothing does)."""
"""User subagent files, relative to `Settings.claude_dir` and `Settings.config_dir`."""

GENERAL_PURPOSE_PROMPT = """\
You are a general-purpose subagent. A parent agent delegated one task to you; \
do that task, completely and carefully, and then report back.

Where you are: an isolated sandbox container with no network access. The \
project is mounted at /workspace, your working directory. /workspace is shared \
with the parent and with other subagents, so what you write there persists \
after you finish; anything outside /workspace is thrown away with the container.

Your tools: Bash (commands run in /workspace), Read, Write, Edit, Glob and Grep. \
Use Glob and Grep to find things and Read to look at them before you change \
anything; use Edit for changes to existing files and Write for new ones. When \
the task involves code, check your work the way the project does (run its tests \
or the script you wrote). Stay within the task: do not reorganise, reformat or \
"improve" unrelated files.

Some tool calls may be refused by the host's permission policy. A refusal comes \
back as the tool result with a reason: adapt, and do not repeat the same call.

You cannot ask questions; nobody can answer them while you work. When something \
is ambiguous, choose the reasonable reading, and say which one you chose.

Your final message is the ONLY thing the parent sees: not your tool calls, not \
their output. Make it concise and self-contained: the answer or outcome, the \
files you created or changed (paths relative to /workspace), how you checked \
the result, and anything left undone or uncertain. Quote exact values (numbers, \
names, short snippets) the parent will need rather than pointing at where you \
saw them."""

BASH_PROMPT = """\
You are a shell subagent. A parent agent delegated one task to you that can be \
done from a shell; do it, and then report back.

Where you are: a minimal, locked-down sandbox container with no network access. \
The project is mounted at /workspace, your working directory; it is shared with \
the parent and other subagents, so files you write there persist, and nothing \
else does. The image has the common shell utilities (coreutils, find, grep, \
sed, awk, and python3 for scripts) but no package manager, compiler or network \
client: do not try to install anything.

Your tools: Bash, and the file tools Read, Write, Edit and Glob. Each Bash call \
runs one command line in /workspace and returns its output (long output is cut, \
and says so): prefer commands with small, precise output (`wc -l`, `grep -n`, \
`head`, `sed -n 'A,Bp'`). Quote paths. Keep commands non-interactive. Use Read \
to look at a file, Edit for a change to an existing one, Write for a new one, \
Glob to find files by name. A call the host's permission policy refuses \
comes back with a reason: adapt, do not repeat it.

You cannot ask questions. When something is ambiguous, choose the reasonable \
reading and say which one you chose.

Your final message is the ONLY thing the parent sees. Make it concise and \
self-contained: the answer or outcome, the exact figures or lines that support \
it, the files you changed, and anything that failed or is left undone."""

EXPLORE_PROMPT = """\
You are a search subagent: a parent agent needs something found or understood in \
this project, quickly. Your job is to locate and read, never to change anything.

You work read-only. You have no tools that edit files, and you must not use Bash \
to change anything either: no file creation, moving, copying or deletion, no \
redirections into files, no installs, no commits. Bash is for read-only commands \
(ls, find, git status, git log, git diff, head, tail, wc).

How to work:
- Glob finds files by name pattern; Grep searches contents with regular expressions; \
Read opens a file once you know its path.
- Start broad, then narrow. Issue several independent searches in one turn when \
you can: speed matters more than exhaustiveness, unless the parent asked for a \
thorough search (it may say "quick", "medium" or "very thorough").
- Try the other names a thing may go by (singular and plural, snake_case and \
camelCase, the words of an error message).

Your final message is all the parent sees: answer the question directly, with the \
paths (as absolute paths) and line numbers of what you found, and quote only the \
lines that matter. Do not write report files."""

PLAN_PROMPT = """\
You are a planning subagent: a software architect who studies the project and \
designs how to carry out the change the parent describes. You do not make the \
change.

You work read-only. You have no tools that edit files, and you must not use Bash \
to change anything either: no file creation (not even in /tmp), moving, copying or \
deletion, no redirections or heredocs into files, no installs, no commits. Bash is \
for read-only commands (ls, find, git status, git log, git diff, head, tail).

How to work:
1. Understand the requirements, and the perspective the parent asks you to take.
2. Explore: read the files the parent names, find the project's existing patterns \
and conventions (Glob, Grep, Read), trace the code paths involved, and look for \
similar features to follow.
3. Design: choose an approach that fits the existing architecture; weigh the \
alternatives and say why you chose this one.
4. Detail it: the steps in order, what depends on what, and the risks to watch.

End your answer with a section "Critical files for implementation" listing the \
3 to 5 files that matter most, as paths. Your final message is all the parent sees."""

READ_ONLY_TOOLS = ("Bash", "Read", "Glob", "Grep", "TaskStop", "Skill")
"""Explore's and Plan's tools: Claude Code's read-only set, as warden has it."""

BUILTIN_AGENTS = (
    AgentDefinition(
        name="general-purpose",
        description=(
            "General-purpose agent for multi-step work in the workspace: researching "
            "code, finding and reading files, editing and writing files, running "
            "commands and tests. Use it when a task needs several tools or steps."
        ),
        system_prompt=GENERAL_PURPOSE_PROMPT,
        # Task is offered only while the run's max_depth allows nesting.
        tools=(*TOOL_NAMES, *DELEGATION_TOOL_NAMES),
        max_turns=50,
        timeout_s=DEFAULT_TIMEOUT_S,
    ),
    AgentDefinition(
        name="bash",
        description=(
            "Shell specialist with Bash and the file tools (Read, Write, Edit, Glob), in "
            "a minimal image without package managers, compilers or network clients. Use "
            "it for commands, counting, searching and small edits."
        ),
        system_prompt=BASH_PROMPT,
        tools=("Bash", "Read", "Write", "Edit", "Glob", "TaskOutput", "TaskStop"),
        max_turns=30,
        image=IMAGE_BASH,
        timeout_s=DEFAULT_TIMEOUT_S,
    ),
    AgentDefinition(
        name="Explore",
        description=(
            "Fast read-only search agent: finds files by pattern, searches code for "
            "symbols or keywords, answers where something is defined or used. Not for "
            "reviews or open-ended analysis. Say how thorough to be: quick, medium or "
            "very thorough."
        ),
        system_prompt=EXPLORE_PROMPT,
        tools=READ_ONLY_TOOLS,
        model=DEFAULT_MODEL_ALIASES["haiku"],
        model_alias="haiku",
        max_turns=50,
        timeout_s=DEFAULT_TIMEOUT_S,
        omit_claude_md=True,
        omit_git_status=True,
    ),
    AgentDefinition(
        name="Plan",
        description=(
            "Software architect agent for implementation plans: studies the code read-only "
            "and returns a step-by-step plan, the critical files and the trade-offs."
        ),
        system_prompt=PLAN_PROMPT,
        tools=READ_ONLY_TOOLS,
        max_turns=50,
        timeout_s=DEFAULT_TIMEOUT_S,
        omit_claude_md=True,
        omit_git_status=True,
    ),
)


class AgentRegistry:
    """The subagent types of one run, by name."""

    def __init__(
        self, agents: list[AgentDefinition] | None = None, warnings: list[str] | None = None
    ) -> None:
        self._agents: dict[str, AgentDefinition] = {}
        self.warnings: list[str] = list(warnings or [])
        """What loading dropped or worked around (also logged)."""
        self.problems: list[str] = []
        """Files that could not be loaded as agents, each with why (also logged)."""
        self.failed: dict[str, str] = {}
        """Agent name → why its file did not load (when the name could be read)."""
        self.overridden: dict[str, list[str]] = {}
        """Name → sources replaced by a higher-precedence definition."""
        for agent in agents if agents is not None else BUILTIN_AGENTS:
            self.add(agent)

    def add(self, agent: AgentDefinition) -> None:
        """Add `agent`, replacing any earlier definition of the same name."""
        previous = self._agents.get(agent.name)
        if previous is not None:
            self.overridden.setdefault(agent.name, []).append(previous.source)
            log.info("agent %r from %s replaces %s", agent.name, agent.source, previous.source)
        self._agents[agent.name] = agent
        self.failed.pop(agent.name, None)

    @classmethod
    def load(
        cls,
        settings: Settings,
        workspace: Path | None,
        *,
        trusted: bool = True,
        stack: SettingsStack | None = None,
        prints: Mapping[str, str] | None = None,
    ) -> AgentRegistry:
        """Built-ins, then the user's agent files (Claude Code's `~/.claude/agents/`,
        then warden's), then the project's (see the module doc). The project's are
        read only in a trusted workspace; managed `strictPluginOnlyCustomization`
        (agents) keeps only the built-ins. `prints` (path relative to the workspace →
        digest, the snapshot trust was decided on): a project agent file is loaded only
        with those bytes, so a file changed after the verdict is refused, not used."""
        from orchestrator.permissions.settings_files import load_stack
        from orchestrator.permissions.sources import MAX_POLICY_BYTES

        registry = cls([resolve_model(agent, settings) for agent in BUILTIN_AGENTS])
        if stack is None:  # the run passes the settings it read once (`workspace.inputs`)
            stack = load_stack(settings, workspace, MAX_POLICY_BYTES)
        locked = "agents" in stack.managed.plugin_only
        sources: list[tuple[Path, Path | None]] = [
            (settings.claude_dir / USER_AGENTS_DIR, None),
            (settings.config_dir / USER_AGENTS_DIR, None),
        ]
        if workspace is not None:
            sources.append((workspace / PROJECT_AGENTS_DIR, workspace))
        for directory, confine_to in list(sources):
            why = None
            if locked:
                why = "managed settings allow no user or project agents (strictPluginOnlyCustomization)"
            elif confine_to is not None and not trusted:
                why = "the workspace is not trusted (trust it with --trust-workspace)"
            if why and directory.is_dir() and any(directory.glob("*.md")):
                sources.remove((directory, confine_to))
                registry.warnings.append(f"{directory}: agent files not loaded: {why}")
                log.warning("%s: agent files not loaded: %s", directory, why)
            elif why:
                sources.remove((directory, confine_to))
        for directory, confine_to in sources:
            expect = None
            if prints is not None and confine_to is not None:
                expect = partial(expected_print, root=confine_to, prints=prints)
            loaded = load_agent_dir(directory, confine_to=confine_to, expect=expect)
            for warning in loaded.warnings:
                log.warning("%s", warning)
            for problem in loaded.problems:
                log.warning("agent file skipped: %s", problem)
            registry.warnings.extend(loaded.warnings)
            registry.problems.extend(loaded.problems)
            for name, why in loaded.failed.items():
                if name not in registry:
                    registry.failed[name] = why
            for agent in loaded.agents:
                registry.add(resolve_model(agent, settings))
        return registry

    def get(self, name: str) -> AgentDefinition:
        """The definition named `name`; raises `UnknownAgentError` listing the valid ones."""
        agent = self._agents.get(name)
        if agent is not None:
            return agent
        if name in self.failed:
            raise UnknownAgentError(
                f"subagent type {name!r} did not load: {self.failed[name]}. Fix the file "
                "(`warden agents validate DIR` lists every problem)"
            )
        close = difflib.get_close_matches(name, self._agents, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise UnknownAgentError(
            f"unknown subagent type {name!r}.{hint} Valid types: {', '.join(self.names())}"
        )

    def names(self) -> list[str]:
        """Every known type, sorted."""
        return sorted(self._agents)

    def listed(self) -> list[AgentDefinition]:
        """Every type in the order a Task tool lists them: the built-in ones first,
        then by name."""
        builtin = {agent.name for agent in BUILTIN_AGENTS}
        names = sorted(self._agents, key=lambda n: (n not in builtin, n))
        return [self._agents[name] for name in names]

    def __contains__(self, name: object) -> bool:
        return name in self._agents

    def __iter__(self) -> Iterator[AgentDefinition]:
        return iter(self._agents[name] for name in self.names())

    def __len__(self) -> int:
        return len(self._agents)


def expected_print(file: Path, *, root: Path, prints: Mapping[str, str]) -> str:
    """The digest `file`'s bytes must have: its own print, or for a link recorded as
    the same link, its target's (a file trust did not see gets one nothing matches)."""
    rel = os.path.relpath(file, root)
    found = prints.get(rel, NOT_TRUSTED)
    if found.startswith("link:") and os.path.islink(file) and found == "link:" + os.readlink(file):
        target = os.path.relpath(os.path.realpath(file), os.path.realpath(root))
        return prints.get(target, NOT_TRUSTED)
    return found


def resolve_model(agent: AgentDefinition, settings: Settings) -> AgentDefinition:
    """`agent` with an alias in `model` replaced by its model id (kept in `model_alias`;
    a built-in's alias is resolved again, for the run's alias settings)."""
    if agent.model_alias is not None:
        resolved = settings.resolve_model(agent.model_alias)
        return agent if resolved == agent.model else agent.model_copy(update={"model": resolved})
    if agent.model is None:
        return agent
    resolved = settings.resolve_model(agent.model)
    if resolved == agent.model:
        return agent
    return agent.model_copy(update={"model": resolved, "model_alias": agent.model})
