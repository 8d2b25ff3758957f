"""The skill listing travels as Claude Code sends it: a `system`-role message right
after a new subagent's first user message, unwrapped, never a cache breakpoint
(the CLI marks the first user message, before it). It stays in that place through
the whole conversation: every later request, the transcript checkpoints, a resume
from them (repaired), and the context window's summary."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from orchestrator.scripted.validate import check_messages
from sandbox_tools import conversation
from sandbox_tools.caching import cached_messages
from sandbox_tools.context import SUMMARY_INSTRUCTION, ContextWindow
from sandbox_tools.runner import EXIT_OK
from tests.unit.sandbox_tools.test_runner import (
    FakeBroker,
    make_spec,
    serve_and_run,
    socket_dir,
    text_turn,
    tool_turn,
    uncached,
)

__all__ = ["socket_dir"]  # the fixture, used by name

LISTING = "The following skills are available for use with the Skill tool:\n\n- greet: Greets"
SYSTEM: Any = {"role": "system", "content": LISTING}
SKILL: Any = {"name": "greet", "description": "Greets", "directory": "/workspace/.claude/skills/greet",
         "text": "Say hi."}  # fmt: skip
PRELOADED = {"type": "text", "text": "<command-name>greet</command-name>"}


async def test_a_new_subagent_sends_the_listing_after_its_first_message(
    socket_dir: Path, tmp_path: Path
) -> None:
    spec = make_spec(tools=["Read", "Skill"], skills=[SKILL], skill_listing=LISTING,
                     context_after=[PRELOADED])  # fmt: skip
    broker = FakeBroker(spec, [tool_turn("Read", {"file_path": "x"}, "t1"),
                               tool_turn("Read", {"file_path": "x"}, "t2"), text_turn("ok")])  # fmt: skip
    assert await serve_and_run(broker, socket_dir, tmp_path) == EXIT_OK
    requests = broker.model_requests
    for request in requests:
        messages = request["messages"]
        assert messages[1] == SYSTEM  # a string, no reminder wrapper, no breakpoint
        assert [m["role"] for m in messages].count("system") == 1
    first = requests[0]["messages"]
    # Claude Code's first request: the breakpoint on the first user message's last
    # block (the preloaded skill), before the listing
    assert first[0]["content"][-1] == {**PRELOADED, "cache_control": {"type": "ephemeral"}}
    assert "greet: Greets" not in json.dumps(first[0])
    # the prefix each turn reads from the cache still holds, listing included
    for before, after in itertools.pairwise(requests):
        sent = uncached(before["messages"])
        assert uncached(after["messages"])[: len(sent)] == sent
    # checkpointed as sent, so a resume finds it where it was
    assert broker.transcripts[-1].messages[1] == SYSTEM


async def test_a_resumed_session_keeps_its_listing_once(socket_dir: Path, tmp_path: Path) -> None:
    """The host repairs the stored transcript (`conversation.repair` keeps the listing
    at index 1) and the runner adds no second one, whatever the spec's listing says."""
    stored: Any = [{"role": "user", "content": [{"type": "text", "text": "the task"}]}, SYSTEM,
              {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read",
                                                 "input": {"file_path": "x"}}]}]  # fmt: skip
    history: Any = conversation.repair(stored)
    assert history[1] == SYSTEM and history[3]["content"][0]["tool_use_id"] == "t1"
    spec = make_spec(tools=["Read", "Skill"], skills=[SKILL], history=history,
                     skill_listing=LISTING + "\n- newer: Newer", prompt="go on")  # fmt: skip
    broker = FakeBroker(spec, [text_turn("ok")])
    assert await serve_and_run(broker, socket_dir, tmp_path) == EXIT_OK
    messages = broker.model_requests[0]["messages"]
    assert messages[1] == SYSTEM and [m["role"] for m in messages].count("system") == 1
    check_messages(uncached(messages))


def test_repair_keeps_the_listing_in_its_place_and_drops_other_system_messages() -> None:
    user: Any = {"role": "user", "content": "task"}
    answer: Any = {"role": "assistant", "content": [{"type": "text", "text": "a"}]}
    blocks: Any = {"role": "system", "content": [{"type": "text", "text": LISTING}]}
    repaired = conversation.repair(
        [user, blocks, answer, {"role": "system", "content": "later"}, {"role": "user", "content": "b"}]
    )
    assert [m["role"] for m in repaired] == ["user", "system", "assistant", "user"]
    assert repaired[1] == SYSTEM  # its text, as a string
    assert conversation.repair([SYSTEM, user, answer])[0]["role"] == "user"
    assert [m["role"] for m in conversation.repair([SYSTEM, user, answer])] == ["user", "assistant"]


def test_breakpoints_skip_the_listing() -> None:
    """The rolling breakpoints count user and assistant messages only: the listing is
    never marked and never shifts which turn is."""
    user: Any = {"role": "user", "content": "task"}
    use: Any = {"type": "tool_use", "id": "t1", "name": "Read", "input": {}}
    result: Any = {"type": "tool_result", "tool_use_id": "t1", "content": "r"}
    sent = cached_messages([user, SYSTEM, {"role": "assistant", "content": [use]},
                            {"role": "user", "content": [result]}])  # fmt: skip
    marked = [i for i, m in enumerate(sent) if "cache_control" in json.dumps(m)]
    assert marked == [0, 3] and sent[1] == SYSTEM


def test_the_summary_keeps_the_listing_after_it() -> None:
    """Compaction replaces the oldest turns by the summary; the listing stays right
    after it, is never asked to carry the summary instruction, and a second
    compaction counts from the right message."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "the task"}, SYSTEM]
    for i in range(16):
        use = {"type": "tool_use", "id": f"t{i}", "name": "Read", "input": {"file_path": f"f{i}"}}
        messages.append({"role": "assistant", "content": [use]})
        result = {"type": "tool_result", "tool_use_id": f"t{i}", "content": f"R{i} " + "y" * 3000}
        messages.append({"role": "user", "content": [result]})

    def size(view: list[dict[str, Any]]) -> int:
        return len(json.dumps(view)) // 3

    heads: list[Any] = []

    def summarize(head: Any) -> str:
        heads.append(head)
        return f"summary {len(heads)}"

    context = ContextWindow(window_tokens=2500, max_tokens=1000)
    for _ in range(2):
        assert context.compact(messages, size, summarize)
        view: Any = context.view(messages)
        check_messages(view)
        assert view[1] == SYSTEM and [m["role"] for m in view].count("system") == 1
        assert "the task" in view[0]["content"][0]["text"]
        messages += [{"role": "assistant", "content": [{"type": "text", "text": "x" * 9000}]},
                     {"role": "user", "content": "y" * 9000}]  # fmt: skip
    assert len(heads) == 2
    for head in heads:
        assert head[1] == SYSTEM  # the model summarises with its listing in view
        assert SUMMARY_INSTRUCTION in json.dumps(head[-1]) and head[-1]["role"] == "user"
    # the second summary reaches past the first: what it kept is a later message
    assert context.summary == "summary 2" and context.summary_upto > len(messages) - 6


def test_with_listing_adds_nothing_without_one_and_never_a_second() -> None:
    first: list[dict[str, Any]] = [{"role": "user", "content": "task"}]
    assert conversation.with_listing(first, "") == first
    assert conversation.with_listing([*first, SYSTEM], "other") == [*first, SYSTEM]
