"""What a subagent's runner is told when it starts (`runner_spec`), and the
conversation a resumed session continues from (`session_history`).

The runner gets the agent's system prompt, the tools it may call (`Task` only
while it may still delegate), its turn cap and retry budget; a resumed session
also gets its stored transcript, repaired, since a crash can leave unanswered
tool calls or broken alternation behind. A fork-mode subagent gets the parent's
conversation instead (`fork_history`), with the parent's system prompt, tool
definitions and model, so its first request reads the parent's cached prefix.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import TYPE_CHECKING

from orchestrator.agents.keys import mid_conversation_system, request_effort
from orchestrator.broker import wire_models
from orchestrator.errors import TaskNotFoundError
from orchestrator.jsontypes import JSONObject, JSONValue
from orchestrator.runtime.caps import CapError, TaskManagerConfig
from orchestrator.runtime.subagent_context import (
    ContextSources,
    available_skills,
    context_reminder,
    listing_reminder,
    memory_section,
    skill_blocks,
    skill_listing,
)
from orchestrator.runtime.tasks import ForkPrefix, TaskContext, TaskInput
from sandbox_tools import conversation, wire

if TYPE_CHECKING:
    from orchestrator.store import Store


log = logging.getLogger(__name__)

FORK_RESULT = "Forked: a subagent carries this call out from here."
"""The result a fork child sees for each Task call of the parent's last turn (the
same for every call, so every fork of one turn shares that prefix too)."""

FORK_DIRECTIVE = (
    "[Fork mode] You are a subagent forked from the conversation above: you have its "
    "context, but you work in your own sandbox, and only your final answer goes back. "
    "Tools you may run: {tools}. Other tools listed above are not available to you; do "
    "not try to delegate further. Your task:\n\n{prompt}"
)
"""The first instruction of a fork-mode subagent (its Task prompt inside)."""


def fork_history(messages: list[JSONObject]) -> list[JSONObject]:
    """The parent's messages, its last turn's tool calls answered by `FORK_RESULT`."""
    history = list(messages)
    last = history[-1] if history else {}
    content = last.get("content")
    uses = [
        b.get("id")
        for b in (content if isinstance(content, list) else [])
        if isinstance(b, dict) and b.get("type") == "tool_use"
    ]
    if last.get("role") == "assistant" and uses:
        results: list[JSONValue] = [
            {"type": "tool_result", "tool_use_id": use, "content": FORK_RESULT} for use in uses
        ]
        history.append({"role": "user", "content": results})
    return history


def runner_spec(
    ctx: TaskContext,
    task_input: TaskInput,
    *,
    history: list[JSONObject],
    max_turns: int,
    may_delegate: bool,
    model: str,
    config: TaskManagerConfig,
    fork: ForkPrefix | None = None,
    sources: ContextSources | None = None,
    mcp_servers: list[JSONObject] | None = None,
) -> wire_models.TaskSpec:
    """The spec a task's broker hands its runner; in fork mode its conversation
    begins with `fork` (the parent's system prompt, tools, messages and model).
    A new task's context is Claude Code's (`subagent_context`): the agent's prompt
    and memory section, the CLAUDE.md files and date before the task, preloaded
    skills after it, the skill listing as a system-role message after that first
    message (to a model that takes none, a reminder at its start: Claude Code's two
    forms); the runner adds the environment and git snapshot."""
    agent = ctx.agent
    tools = agent.offered_tools(may_delegate=may_delegate)
    if not mcp_servers:  # nothing to list or read resources of
        tools = [t for t in tools if t not in wire.MCP_RESOURCE_TOOL_NAMES]
    prompt = task_input.prompt
    system_prompt = agent.system_prompt
    tool_definitions: list[JSONObject] = []
    before: list[JSONObject] = []
    after: list[JSONObject] = []
    skills: list[JSONObject] = []
    listing = ""
    if sources is not None and fork is None and "Skill" in tools:
        skills = available_skills(sources)
    if sources is not None and fork is None:
        memory = memory_section(agent, sources)
        if memory:
            system_prompt = f"{system_prompt}\n\n{memory}"
        if not history:
            before = [context_reminder(agent, sources)]
            after, missing = skill_blocks(agent, sources)
            listing = skill_listing(skills)
            if listing and not mid_conversation_system(model):
                before.insert(0, listing_reminder(listing))
                listing = ""
            for name in missing:
                log.warning("agent %s: skill %r not found (.claude/skills/%s/SKILL.md)",
                            agent.name, name, name)  # fmt: skip
    if fork is not None:
        model, system_prompt = fork.model, fork.system_prompt
        tool_definitions = fork.tool_definitions
        history = fork_history(fork.messages)
        prompt = FORK_DIRECTIVE.format(tools=", ".join(tools) or "none", prompt=prompt)
    return wire_models.TaskSpec(
        task_id=ctx.task_id,
        parent_id=ctx.parent_id,
        trace_id=ctx.trace_id,
        agent_type=agent.name,
        description=task_input.description,
        model=model,
        system_prompt=system_prompt,
        prompt=prompt,
        history=history,
        tools=tools,
        tool_definitions=tool_definitions,
        max_turns=max_turns,
        model_max_retries=config.model_max_retries,
        model_retry_total_s=config.model_retry_total_s,
        context_window_tokens=config.context_window(model),
        context_before=before,
        context_after=after,
        skill_listing=listing,
        environment=sources is not None and fork is None,
        git_status=sources is not None and fork is None and not agent.omit_git_status,
        mcp_servers=[wire_models.McpServerLaunch.model_validate(m) for m in mcp_servers or []],
        mcp_startup_timeout_s=config.mcp_startup_timeout_s,
        mcp_tool_timeout_s=config.mcp_tool_timeout_s,
        # a fork's requests are the parent's (its prefix and settings); others carry
        # the agent's effort as Claude Code sends it
        skills=[wire_models.SkillSpec.model_validate(s) for s in skills],
        effort=request_effort(agent.effort, model) if fork is None else None,
    )


def session_history(
    store: Store, session_id: str, agent_type: str, running: Collection[str]
) -> list[JSONObject]:
    """The transcript session `session_id` continues from (blocking: the store).

    Raises TaskNotFoundError when there is no such session or it belongs to another
    agent type, CapError while one of its tasks (`running`: ids) still runs."""
    mine = store.list_tasks(session_id=session_id)
    if not mine:
        raise TaskNotFoundError(
            f"no subagent session {session_id!r}; session ids are the task ids that Task "
            "calls returned (see `warden ps`)"
        )
    if any(t.agent_type != agent_type for t in mine):
        raise TaskNotFoundError(
            f"session {session_id} belongs to a {mine[0].agent_type!r} subagent, not "
            f"{agent_type!r}; resume it with subagent_type={mine[0].agent_type!r}"
        )
    if any(t.task_id in running for t in mine):
        raise CapError(f"session {session_id} is still running; wait for it or stop it first")
    return conversation.repair(store.get_session_transcript(session_id))
