"""A scripted, Anthropic-compatible model server for tests and the offline demo.

    script = Script.load("demo.yaml")
    async with ScriptedModelServer(script) as server:
        client = anthropic.AsyncAnthropic(base_url=server.base_url, api_key="x")

Sync callers: `with ScriptedModelServer(script).in_thread() as server: ...`.
Standalone: `python -m orchestrator.scripted SCRIPT [--port N] [--record FILE]`.

May import: `errors`, `documents` (PDFs billed by their pages, as the broker
estimates them). Nothing else of warden: tests and the demo run it alone.
"""

from orchestrator.scripted.billing import MovableClock
from orchestrator.scripted.script import (
    PLACEHOLDERS,
    Conversation,
    Match,
    Script,
    ScriptedError,
    ScriptError,
    TextBlock,
    ToolUseBlock,
    Turn,
    Usage,
)
from orchestrator.scripted.server import RecordedRequest, ScriptedModelServer

__all__ = [
    "PLACEHOLDERS",
    "Conversation",
    "Match",
    "MovableClock",
    "RecordedRequest",
    "Script",
    "ScriptError",
    "ScriptedError",
    "ScriptedModelServer",
    "TextBlock",
    "ToolUseBlock",
    "Turn",
    "Usage",
]
