"""What a subagent was set up with (model, tools, MCP servers by name, limits, disk caps,
system prompt), recorded in its `task_started` event so `warden logs TASK` can show how
it was configured."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, cast

from orchestrator.backend.contract import DiskLimits, ResourceLimits
from orchestrator.jsontypes import JSONObject, JSONValue
from orchestrator.store.records import clip_text

if TYPE_CHECKING:
    from orchestrator.broker import wire_models

SYSTEM_PROMPT_EVENT_CHARS = 16_000
"""Longest system prompt kept in the event (cut with an announced marker beyond)."""


def task_setup(
    spec: wire_models.TaskSpec,
    *,
    timeout_s: float,
    limits: ResourceLimits,
    disk: DiskLimits,
    token_budget: int | None,
    image: str | None,
    source: str | None,
) -> JSONObject:
    """The `setup` payload of a `task_started` event."""
    return {
        "model": spec.model,
        "tools": list(spec.tools),
        "max_turns": spec.max_turns,
        "max_tokens": spec.max_tokens,
        "token_budget": token_budget,
        "timeout_s": timeout_s,
        "limits": cast(JSONObject, asdict(limits)),  # numbers only, nested `disk` too
        "disk": cast(JSONObject, asdict(disk)),
        "image": image,
        "source": source,
        "system_prompt": clip_text(spec.system_prompt, SYSTEM_PROMPT_EVENT_CHARS),
        "mcp_servers": [
            {
                "name": m.name,
                "transport": m.transport,
                "tools": None if m.tools is None else list[JSONValue](m.tools),
                # the tools deny rules and `disallowedTools` keep out of its offer
                **({"denied": list[JSONValue](m.denied)} if m.denied else {}),
            }
            for m in spec.mcp_servers
        ],
    }
