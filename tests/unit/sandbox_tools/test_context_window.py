"""A subagent never outgrows its model's context window: the real runner, broker and
SDK against the scripted model with a small window. Old tool results are cleared
(the call stays), then the oldest turns are replaced by a summary the subagent
writes; no request is refused as "prompt is too long", the host's transcript keeps
every result whole, the prompt cache still serves the turns between compactions,
and a session resumed from that transcript compacts again and finishes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.broker.wire_models import TaskSpec
from orchestrator.scripted import (
    Conversation,
    Match,
    Script,
    ScriptedModelServer,
    TextBlock,
    ToolUseBlock,
    Turn,
)
from orchestrator.scripted.validate import check_messages
from sandbox_tools.context import CLEARED_RESULT, SUMMARY_HEADER, ContextWindow
from sandbox_tools.runner import EXIT_OK
from tests.unit.broker.host_subagent import run_subagent

MODEL = "claude-small-window"
WINDOW = 12_000
CALLS = 60
STEP = (
    "n=$(( $(cat count 2>/dev/null || echo 0) + 1 )); echo $n > count; head -c 2000 log.txt; "
    f'echo " [call $n]"; if [ $n -ge {CALLS} ]; then echo ALL DONE; fi'
)
SUMMARY = "Summary: I have been reading log.txt, one chunk per call, as asked."

SCRIPT = Script(
    conversations=[
        Conversation(
            name="stop",
            match=Match(last_message_contains="ALL DONE"),
            turns=[Turn(content=[TextBlock(text="finished reading")])] * 400,
        ),
        Conversation(
            name="summary",
            match=Match(last_message_contains="outgrow the context window"),
            turns=[Turn(content=[TextBlock(text=SUMMARY)])] * 400,
        ),
        Conversation(
            name="reader",
            match=Match(prompt_contains="read the log"),
            turns=[Turn(content=[ToolUseBlock(name="Bash", input={"command": STEP})])] * 400,
        ),
    ]
)


def _spec(**extra: Any) -> TaskSpec:
    values: dict[str, Any] = {
        "task_id": "sa_ctx",
        "trace_id": "t",
        "agent_type": "general-purpose",
        "model": MODEL,
        "system_prompt": "You read logs carefully.",
        "prompt": "Please read the log, a chunk at a time, until it says it is over.",
        "tools": ["Bash"],
        "max_turns": 200,
        "max_tokens": 1000,
        "context_window_tokens": WINDOW,
        **extra,
    }
    return TaskSpec.model_validate(values)


def _results(messages: list[dict[str, Any]]) -> list[str]:
    return [
        str(b.get("content"))
        for m in messages
        if isinstance(m.get("content"), list)
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "tool_result"
    ]


async def test_a_long_subagent_stays_inside_a_small_window_and_resumes(tmp_path: Path) -> None:
    (tmp_path / "log.txt").write_text("line of the log\n" * 200)
    with ScriptedModelServer(SCRIPT, context_windows={MODEL: WINDOW}).in_thread() as server:
        first = await run_subagent(server.base_url, _spec(), tmp_path)
        assert first.exit_code == EXIT_OK
        assert first.host.results[-1].status == "completed", first.host.results
        assert first.host.results[-1].text == "finished reading"
        statuses = [r.status for r in server.requests]
        assert statuses.count(400) == 0 and set(statuses) == {200}
        bodies = [json.dumps(r.body) for r in server.requests]
        assert any(CLEARED_RESULT in b for b in bodies)  # step 1 ran
        assert any(r.conversation == "summary" for r in server.requests)  # step 2 ran
        assert any(SUMMARY_HEADER in b and SUMMARY in b for b in bodies)
        # Without compaction the last request would be far over the window.
        full = first.host.transcripts[-1][1]
        assert len(json.dumps(full)) // 4 > 3 * WINDOW
        # The host's transcript (the runner's last checkpoint) keeps every result whole.
        results = _results(full)
        assert len(results) == CALLS and CLEARED_RESULT not in results
        assert all("line of the log" in r for r in results)
        # Between compactions each turn read its prefix from the cache.
        usage = first.budget.usage
        assert usage["cache_read_input_tokens"] > usage["input_tokens"]

        resumed = await run_subagent(
            server.base_url,
            _spec(prompt="Go on: read the log once more.", history=full),
            tmp_path,
        )
        assert resumed.exit_code == EXIT_OK
        assert resumed.host.results[-1].text == "finished reading"
        assert {r.status for r in server.requests} == {200}
        assert (tmp_path / "count").read_text().strip() == str(CALLS + 1)


def test_the_view_keeps_calls_drops_old_results_and_stays_a_valid_conversation() -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "the task"}]
    for i in range(12):
        use = {"type": "tool_use", "id": f"t{i}", "name": "Read", "input": {"file_path": f"f{i}"}}
        messages.append({"role": "assistant", "content": [{"type": "text", "text": "x"}, use]})
        result = {"type": "tool_result", "tool_use_id": f"t{i}", "content": "y" * 3000}
        messages.append({"role": "user", "content": [result]})
    original = json.dumps(messages)

    def size(view: list[dict[str, Any]]) -> int:
        return len(json.dumps(view)) // 3

    context = ContextWindow(window_tokens=9000, max_tokens=1000)
    assert context.compact(messages, size, lambda head: pytest.fail("no summary needed"))
    view = context.view(messages)
    assert json.dumps(messages) == original  # the conversation itself is untouched
    assert context.fits(size(view))
    check_messages(view)  # type: ignore[arg-type]
    assert [b["name"] for m in view[1::2] for b in m["content"] if b["type"] == "tool_use"] == [
        "Read"
    ] * 12  # every call is still there
    kept = _results(view)
    assert kept == [CLEARED_RESULT] * 8 + ["y" * 3000] * 4  # all but the newest KEEP_RESULTS
    assert context.view(messages) == view  # deterministic: the cached prefix holds

    summaries: list[list[dict[str, Any]]] = []

    def summarize(head: list[dict[str, Any]]) -> str:
        summaries.append(head)
        return "the summary"

    tight = ContextWindow(window_tokens=2500, max_tokens=1000)
    assert tight.compact(messages, size, summarize)
    view = tight.view(messages)
    check_messages(view)  # type: ignore[arg-type]
    assert view[0]["content"][0]["text"].startswith("the task") and "the summary" in json.dumps(
        view[0]
    )
    assert "outgrow the context window" in json.dumps(summaries[0][-1])
    assert tight.fits(size(view))


def test_a_models_window_comes_from_the_settings_and_reaches_the_runner() -> None:
    """WARDEN_CONTEXT_WINDOWS sets a model's window; others keep the standard 200,000;
    a malformed value is refused with the fix."""
    from orchestrator.config import Settings
    from orchestrator.errors import ConfigError
    from orchestrator.runtime.caps import TaskManagerConfig

    settings = Settings.from_env({"WARDEN_CONTEXT_WINDOWS": "big-model=1000000, small=32000"})
    config = TaskManagerConfig.from_settings(settings)
    assert config.context_window("big-model") == 1_000_000
    assert config.context_window("small") == 32_000
    assert config.context_window("claude-sonnet-5") == 200_000
    with pytest.raises(ConfigError, match="model=tokens"):
        Settings.from_env({"WARDEN_CONTEXT_WINDOWS": "big-model:lots"})
