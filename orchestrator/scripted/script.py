"""The script a `ScriptedModelServer` replays, and how a request picks its turn.

A script is a list of conversations. A request belongs to the first conversation
whose `match` fits it; its turn is the number of assistant messages already in
the request, so the server keeps no state per conversation and parallel
conversations need nothing special. A turn is the assistant's reply (text and
`tool_use` blocks), or an error to answer with instead.

Texts (and string values inside `tool_use` inputs) may hold placeholders that are
filled from the request: see `PLACEHOLDERS`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from orchestrator.errors import ConfigError, api_error_type
from orchestrator.jsontypes import JSONObject, JSONValue

MAX_PLACEHOLDER_CHARS = 4_000
"""Longest text a placeholder expands to; longer results are cut and say so."""

PLACEHOLDERS = {
    "{last_tool_result}": "text of the last tool_result in the request's last user message",
    "{tool_results}": "texts of every tool_result in the last user message, blank-line separated",
    "{prompt}": "text of the first user message",
    "{turn}": "the turn number (assistant messages already in the request)",
}
"""Placeholders a scripted text may contain, and what each becomes."""


class ScriptError(ConfigError):
    """A script file or script object is invalid."""


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TextBlock(_Closed):
    """An assistant text block."""

    type: Literal["text"] = "text"
    text: str
    """The text; placeholders (see `PLACEHOLDERS`) are filled from the request."""


class ToolUseBlock(_Closed):
    """An assistant `tool_use` block; its id is generated (`toolu_…`)."""

    type: Literal["tool_use"] = "tool_use"
    name: str = Field(min_length=1)
    """The tool to call, e.g. `Task` or `Bash`."""
    input: JSONObject | str = Field(default_factory=dict)
    """The tool input; placeholders in its string values are filled too. A string is
    a malformed call (a model whose tool JSON did not parse), for fault tests."""


ContentBlock = Annotated[TextBlock | ToolUseBlock, Field(discriminator="type")]


class ScriptedError(_Closed):
    """Answer a turn with an API error instead of a message."""

    status: int = Field(ge=400, le=599)
    """HTTP status, e.g. 400, 429, 529."""
    type: str | None = None
    """Anthropic error type; None picks the usual one for `status`."""
    message: str = "scripted error"
    """The error message the client sees."""
    body: JSONObject | None = None
    """Send this JSON body instead of the API's error shape built from type and message."""
    retry_after_s: float | None = Field(default=None, ge=0)
    """Sent as `retry-after` / `retry-after-ms`; the SDK waits that long before retrying."""
    times: int | None = Field(default=None, ge=1)
    """Fail only this many times per conversation and turn, then answer the turn
    normally (so an SDK retry succeeds); None fails every time."""

    @property
    def error_type(self) -> str:
        return self.type or api_error_type(self.status)


StreamFaultKind = Literal[
    "cut_in_block", "no_message_stop", "overloaded_error", "api_error", "reset"
]


class StreamFault(_Closed):
    """Break a streamed answer to this turn (fault tests); a plain request is answered
    whole. `cut_in_block`: the stream ends cleanly inside the last content block
    (mid tool input); `no_message_stop`: every event but `message_stop`, then a clean
    end; `overloaded_error` / `api_error`: an `error` event of that type after the
    first content block starts; `reset`: the connection is reset (TCP RST) there."""

    kind: StreamFaultKind
    times: int | None = Field(default=None, ge=1)
    """Break only this many streamed answers per conversation and turn, then answer
    whole (so a retry succeeds); None breaks every one."""


class Usage(_Closed):
    """Token counts to report instead of the chars/4 estimate."""

    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)


StopReason = Literal["end_turn", "tool_use", "max_tokens", "stop_sequence", "refusal"]


class Turn(_Closed):
    """One assistant reply (or an error answering that turn)."""

    content: list[ContentBlock] = Field(default_factory=list)
    """The assistant's content blocks, in order."""
    stop_reason: StopReason | None = None
    """None means `tool_use` when a tool_use block is present, else `end_turn`."""
    usage: Usage | None = None
    """Reported usage; None estimates it from the sizes of request and reply."""
    delay_s: float = Field(default=0.0, ge=0)
    """Wait this long before answering, to simulate a slow model."""
    error: ScriptedError | None = None
    """Answer with this error (while `error.times` lasts)."""
    stream_fault: StreamFault | None = None
    """Break a streamed answer this way (while `stream_fault.times` lasts)."""

    @model_validator(mode="after")
    def _has_something(self) -> Turn:
        if not self.content and self.error is None:
            raise ValueError("a turn needs `content` blocks or an `error`")
        if self.error is not None and self.error.times is not None and not self.content:
            raise ValueError("a turn whose error stops after `times` needs `content` for after")
        return self

    @property
    def effective_stop_reason(self) -> StopReason:
        if self.stop_reason is not None:
            return self.stop_reason
        has_tool = any(isinstance(block, ToolUseBlock) for block in self.content)
        return "tool_use" if has_tool else "end_turn"


class Match(_Closed):
    """Which requests belong to a conversation; every condition given must hold."""

    system_contains: str | None = None
    """Substring of the system prompt."""
    prompt_contains: str | None = None
    """Substring of the first user message's text."""
    has_tool: str | None = None
    """A tool name offered in the request's `tools`."""
    lacks_tool: str | None = None
    """A tool name NOT offered in the request's `tools`."""
    last_message_contains: str | None = None
    """Substring of the last message's text (its text blocks and tool results)."""

    def describe(self) -> str:
        parts = [f"{key}={value!r}" for key, value in self.model_dump().items() if value]
        return ", ".join(parts) or "anything"


class Conversation(_Closed):
    """A scripted conversation: which requests it answers, and its turns."""

    name: str = Field(min_length=1)
    """Names the conversation in errors, recordings and tool_use ids."""
    match: Match = Field(default_factory=Match)
    """Conditions a request must meet; empty matches every request."""
    turns: list[Turn] = Field(min_length=1)
    """Turn N answers a request that already holds N assistant messages."""


class Script(_Closed):
    """What the scripted model answers. Load with `Script.load(path)`."""

    conversations: list[Conversation] = Field(min_length=1)
    """Tried in order; the first whose `match` fits a request answers it."""
    when_exhausted: Literal["end_turn", "error"] = "end_turn"
    """Past a conversation's last turn: reply with an `end_turn` text saying the
    script ran out, or answer 400."""

    @model_validator(mode="after")
    def _unique_names(self) -> Script:
        names = [conversation.name for conversation in self.conversations]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"conversation names must be unique; repeated: {duplicates}")
        return self

    @classmethod
    def load(cls, path: str | Path) -> Script:
        """Read a script from a YAML or JSON (`*.json`) file."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ScriptError(f"cannot read script {path}: {exc.strerror or exc}") from exc
        except UnicodeDecodeError as exc:
            raise ScriptError(
                f"script {path} is not UTF-8 text (byte {exc.start} is 0x{exc.object[exc.start]:02x}); "
                "a replay script is YAML or JSON: pass the right file"
            ) from exc
        try:
            data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        except (json.JSONDecodeError, yaml.YAMLError) as exc:
            raise ScriptError(f"script {path} is not valid {path.suffix or 'YAML'}: {exc}") from exc
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ScriptError(f"script {path} is invalid; fix these fields:\n{exc}") from exc

    def find(self, request: RequestView) -> Conversation | None:
        """The first conversation whose `match` fits the request."""
        for conversation in self.conversations:
            if request.matches(conversation.match):
                return conversation
        return None


def _text_of(content: JSONValue) -> str:
    """The text of a message content (a string, or a list of blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for block in content:
            if isinstance(block, dict):
                text = block.get("text")
                if block.get("type") == "text" and isinstance(text, str):
                    parts.append(text)
                elif block.get("type") == "tool_result":
                    parts.append(_text_of(block.get("content", "")))
        return "\n".join(parts)
    return ""


def _cut(text: str) -> str:
    if len(text) <= MAX_PLACEHOLDER_CHARS:
        return text
    dropped = len(text) - MAX_PLACEHOLDER_CHARS
    return f"{text[:MAX_PLACEHOLDER_CHARS]}\n[... {dropped} more characters truncated]"


class RequestView:
    """The parts of a Messages API request body that matching and placeholders read."""

    def __init__(self, body: JSONObject) -> None:
        self.body = body
        system = body.get("system", "")
        self.system = _text_of(system)
        messages = body.get("messages")
        # Claude Code puts `role: "system"` entries among the messages; they are
        # instructions, not turns of the conversation.
        self.messages: list[JSONObject] = [
            m
            for m in (messages if isinstance(messages, list) else [])
            if isinstance(m, dict) and m.get("role") != "system"
        ]
        tools = body.get("tools")
        self.tool_names = [
            str(tool.get("name"))
            for tool in (tools if isinstance(tools, list) else [])
            if isinstance(tool, dict)
        ]
        first_user = next((m for m in self.messages if m.get("role") == "user"), None)
        self.prompt = _text_of(first_user.get("content")) if first_user else ""
        self.turn = sum(1 for m in self.messages if m.get("role") == "assistant")

    def matches(self, match: Match) -> bool:
        return (
            (match.system_contains is None or match.system_contains in self.system)
            and (match.prompt_contains is None or match.prompt_contains in self.prompt)
            and (match.has_tool is None or match.has_tool in self.tool_names)
            and (match.lacks_tool is None or match.lacks_tool not in self.tool_names)
            and (
                match.last_message_contains is None
                or match.last_message_contains in self.last_message_text()
            )
        )

    def last_message_text(self) -> str:
        """Texts of the last message: its text blocks and tool results."""
        return _text_of(self.messages[-1].get("content")) if self.messages else ""

    def describe(self) -> str:
        def head(text: str) -> str:
            return repr(text[:80] + ("…" if len(text) > 80 else ""))

        return (
            f"system starts {head(self.system)}, first user message starts "
            f"{head(self.prompt)}, tools {self.tool_names}"
        )

    def instance_key(self) -> str:
        """Identifies one conversation instance: its system prompt and first message."""
        digest = hashlib.sha256(f"{self.system}\0{self.prompt}".encode()).hexdigest()
        return digest[:16]

    def tool_results(self) -> list[str]:
        """Texts of the tool_result blocks in the last user message."""
        if not self.messages or self.messages[-1].get("role") != "user":
            return []
        content = self.messages[-1].get("content")
        if not isinstance(content, list):
            return []
        return [
            _text_of(block.get("content", ""))
            for block in content
            if isinstance(block, dict) and block.get("type") == "tool_result"
        ]

    def fill(self, text: str) -> str:
        """Replace the placeholders in `text` (only those present are computed)."""
        if "{" not in text:
            return text
        results = self.tool_results()
        values: dict[str, Callable[[], str]] = {
            "{last_tool_result}": lambda: _cut(results[-1]) if results else "(no tool result)",
            "{tool_results}": lambda: _cut("\n\n".join(results)) if results else "(no tool result)",
            "{prompt}": lambda: _cut(self.prompt),
            "{turn}": lambda: str(self.turn),
        }
        for placeholder, value in values.items():
            if placeholder in text:
                text = text.replace(placeholder, value())
        return text

    def fill_value(self, value: JSONValue) -> JSONValue:
        """`fill` applied to every string inside a JSON value."""
        if isinstance(value, str):
            return self.fill(value)
        if isinstance(value, list):
            return [self.fill_value(item) for item in value]
        if isinstance(value, dict):
            return {key: self.fill_value(item) for key, item in value.items()}
        return value


def tool_use_id(conversation: str, instance: str, turn: int, index: int) -> str:
    """Deterministic, unique per conversation instance, turn and block index."""
    digest = hashlib.sha256(f"{conversation}\0{instance}\0{turn}\0{index}".encode()).hexdigest()
    return f"toolu_{digest[:24]}"
