"""Agent files written for Claude Code (a representative set in tests/corpus/agents,
listing the tools public libraries list) load unchanged; the tools warden runs are
kept, and every tool it drops is one docs/tools.md lists with its reason, named
by the warning. The dropped-tool count over the set is asserted (and printed), so a
tool warden starts or stops running shows up here."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from orchestrator.agents.definition import UNSUPPORTED_TOOLS_DOC
from orchestrator.agents.files import load_agent_dir

ROOT = Path(__file__).resolve().parents[3]
CORPUS = ROOT / "tests" / "corpus" / "agents"

EXPECTED_DROPPED = {
    "MultiEdit": 2,
    "NotebookRead": 1,
    "LS": 1,
    "AskUserQuestion": 1,
    "ExitPlanMode": 1,
    "SendMessage": 1,
    "TaskCreate": 1,
    "TaskGet": 1,
    "TaskList": 1,
    "TaskUpdate": 1,
}


def test_the_corpus_loads_and_only_documented_tools_are_dropped() -> None:
    loaded = load_agent_dir(CORPUS)
    assert not loaded.problems, loaded.problems
    assert len(loaded.agents) == len(list(CORPUS.glob("*.md")))
    dropped = Counter(
        "mcp__*" if tool.startswith("mcp__") else tool
        for agent in loaded.agents
        for tool in agent.dropped_tools
    )
    mcp_tools = sum(len(agent.mcp_tools) for agent in loaded.agents)
    kept = sum(len(agent.tools or ()) for agent in loaded.agents) + mcp_tools
    listed = kept + sum(dropped.values())
    print(f"agent corpus: {len(loaded.agents)} files, {sum(dropped.values())} of {listed} "
          f"listed tools dropped: {dict(sorted(dropped.items()))}")  # fmt: skip
    assert dict(dropped) == EXPECTED_DROPPED
    assert mcp_tools == 5  # `mcp__server__tool` names are kept (their servers start)
    doc = (ROOT / UNSUPPORTED_TOOLS_DOC).read_text()
    for tool in dropped:
        assert f"`{tool.replace('*', 'server__tool')}`" in doc, tool
    drops = [w for w in loaded.warnings if "dropped tool" in w]
    assert len(drops) == sum(dropped.values())
    assert all(UNSUPPORTED_TOOLS_DOC in w for w in drops), drops


def test_claude_codes_background_notebook_todo_and_web_tools_are_kept() -> None:
    agents = {a.name: a for a in load_agent_dir(CORPUS).agents}
    assert agents["frontend-dev"].tools is not None
    assert {"TaskOutput", "TaskStop", "TodoWrite"} <= set(agents["frontend-dev"].tools)
    assert "NotebookEdit" in (agents["data-scientist"].tools or ())
    assert {"WebFetch", "WebSearch"} <= set(agents["docs-researcher"].tools or ())
