"""The scripted model bills and refuses like the Messages API: each test pins one rule
of "Prompt caching" or "Context windows"
(https://platform.claude.com/docs/en/build-with-claude/prompt-caching,
https://platform.claude.com/docs/en/build-with-claude/context-windows), seen through
the real anthropic SDK."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from pypdf import PdfWriter

from orchestrator.documents import PDF_PAGE_IMAGE_TOKENS
from orchestrator.scripted import (
    Conversation,
    Match,
    MovableClock,
    Script,
    ScriptedModelServer,
    TextBlock,
    Turn,
)
from orchestrator.scripted.billing import CHARS_PER_TOKEN, LOOKBACK_BLOCKS

MODEL = "claude-sonnet-5"  # minimum cacheable prefix: 1,024 tokens
EPHEMERAL: dict[str, Any] = {"type": "ephemeral"}
BIG = "x" * (CHARS_PER_TOKEN * 1200)
"""A system text of about 1,200 tokens: cacheable on its own for MODEL."""

SCRIPT = Script(
    conversations=[
        Conversation(name="any", match=Match(), turns=[Turn(content=[TextBlock(text="ok")])] * 400)
    ]
)


class Api:
    """The server with a movable clock and a sync SDK client."""

    def __init__(self, server: ScriptedModelServer, clock: MovableClock) -> None:
        self.server, self.clock = server, clock
        self.client = anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0)

    def usage(self, **request: Any) -> dict[str, int]:
        request.setdefault("model", MODEL)
        request.setdefault("max_tokens", 10)
        message = self.client.messages.create(**request)
        u = message.usage
        return {
            "input": u.input_tokens,
            "write": u.cache_creation_input_tokens or 0,
            "read": u.cache_read_input_tokens or 0,
        }


@pytest.fixture
def api() -> Iterator[Api]:
    clock = MovableClock()
    with ScriptedModelServer(SCRIPT, clock=clock, context_windows={"small": 3000}).in_thread() as s:
        api = Api(s, clock)
        yield api
        api.client.close()


def _system(text: str = BIG, ttl: str | None = None) -> list[dict[str, Any]]:
    control = {**EPHEMERAL, "ttl": ttl} if ttl else EPHEMERAL
    return [{"type": "text", "text": text, "cache_control": control}]


def _user(text: str, cached: bool = False) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": text}
    if cached:
        block["cache_control"] = EPHEMERAL
    return {"role": "user", "content": [block]}


def _total(usage: dict[str, int]) -> int:
    return usage["input"] + usage["write"] + usage["read"]


def test_a_breakpoint_writes_the_prefix_once_and_later_requests_read_it(api: Api) -> None:
    """Docs: "cache_creation_input_tokens: tokens written to the cache when creating a new
    entry; cache_read_input_tokens: tokens retrieved from the cache"; input_tokens are
    those after the last breakpoint. The three add up to the prompt."""
    request = {"system": _system(), "messages": [_user("question one")]}
    first = api.usage(**request)
    second = api.usage(**request)
    assert first["read"] == 0 and first["write"] > 1000
    assert second == {"input": first["input"], "write": 0, "read": first["write"]}
    assert _total(first) == _total(second)
    counted = api.client.messages.count_tokens(model=MODEL, **request)  # type: ignore[arg-type]
    assert counted.input_tokens == _total(first)


def test_prefix_order_is_tools_then_system_then_messages(api: Api) -> None:
    """Docs: "Prompt caching references the entire prompt - tools, system, and messages (in that
    order) up to and including the block designated with cache_control": changing a tool
    invalidates the cached system prompt behind it; changing a later message does not."""
    tools = [{"name": "Bash", "description": "shell", "input_schema": {"type": "object"}}]
    api.usage(tools=tools, system=_system(), messages=[_user("a")])
    same = api.usage(tools=tools, system=_system(), messages=[_user("a different question")])
    assert same["read"] > 1000
    tools2 = [{**tools[0], "description": "a changed shell"}]
    changed = api.usage(tools=tools2, system=_system(), messages=[_user("a")])
    assert changed["read"] == 0 and changed["write"] > 1000


def test_at_most_four_breakpoints(api: Api) -> None:
    """Docs: "You can define up to 4 cache breakpoints"; a fifth is a 400."""
    system = [{"type": "text", "text": f"part {i}", "cache_control": EPHEMERAL} for i in range(5)]
    with pytest.raises(anthropic.BadRequestError) as caught:
        api.usage(system=system, messages=[_user("q")])
    assert "A maximum of 4 blocks with cache_control may be provided. Found 5." in str(caught.value)
    api.usage(system=system[:4], messages=[_user("q")])  # four are fine


def test_short_prefixes_are_not_cached_and_the_minimum_depends_on_the_model(api: Api) -> None:
    """Docs: "Shorter prompts cannot be cached, even if marked with cache_control ... processed
    without caching" (no error); the minimum is per model (1,024 tokens for Sonnet 5,
    4,096 for Haiku 4.5)."""
    short = api.usage(system=_system("y" * 400), messages=[_user("q")])
    again = api.usage(system=_system("y" * 400), messages=[_user("q")])
    assert short["write"] == again["read"] == 0
    haiku = {"model": "claude-haiku-4-5", "system": _system(), "messages": [_user("q")]}
    assert api.usage(**haiku)["write"] == 0  # ~1,200 tokens < 4,096
    assert api.usage(**haiku)["read"] == 0


def test_entries_live_five_minutes_from_last_use_or_an_hour(api: Api) -> None:
    """Docs: "The cache has a minimum 5-minute lifetime ... refreshed for no additional cost each
    time the cached content is used"; `ttl: "1h"` lives an hour."""
    request = {"system": _system(), "messages": [_user("q")]}
    api.usage(**request)
    api.clock.advance(240)
    assert api.usage(**request)["read"] > 0  # used at 4 min: refreshed
    api.clock.advance(240)
    assert api.usage(**request)["read"] > 0  # 8 min after writing, 4 after the last read
    api.clock.advance(301)
    expired = api.usage(**request)
    assert expired["read"] == 0 and expired["write"] > 0

    hour = {"system": _system(BIG + "h", ttl="1h"), "messages": [_user("q")]}
    api.usage(**hour)
    api.clock.advance(3000)
    assert api.usage(**hour)["read"] > 0
    api.clock.advance(3601)
    assert api.usage(**hour)["read"] == 0


def test_one_hour_breakpoints_come_before_five_minute_ones(api: Api) -> None:
    """Mixing TTLs: "cache entries with longer TTL must appear before shorter TTLs"."""
    system = [
        {"type": "text", "text": BIG, "cache_control": {**EPHEMERAL, "ttl": "5m"}},
        {"type": "text", "text": "more", "cache_control": {**EPHEMERAL, "ttl": "1h"}},
    ]
    with pytest.raises(anthropic.BadRequestError, match="ttl='1h'"):
        api.usage(system=system, messages=[_user("q")])
    system[0]["cache_control"], system[1]["cache_control"] = (
        system[1]["cache_control"],
        system[0]["cache_control"],
    )
    message = api.client.messages.create(
        model=MODEL,
        max_tokens=10,
        system=system,  # type: ignore[arg-type]
        messages=[_user("q")],  # type: ignore[list-item]
    )
    assert message.usage.cache_creation is not None
    assert message.usage.cache_creation.ephemeral_1h_input_tokens > 0


def test_hits_need_a_byte_identical_prefix_and_moving_a_breakpoint_keeps_it(api: Api) -> None:
    """Docs: "Cache hits require 100% identical prompt segments"; the prefix is the content, so
    a conversation whose breakpoint moves forward each turn reads the previous turn's."""
    turn1 = [_user(BIG, cached=True)]
    api.usage(messages=turn1)
    turn2 = [
        _user(BIG),
        {"role": "assistant", "content": "answer"},
        _user("next", cached=True),
    ]
    rolled = api.usage(messages=turn2)
    assert rolled["read"] > 1000 and rolled["input"] == 0
    edited = [_user(BIG[:-1] + "y"), *turn2[1:]]
    assert api.usage(messages=edited)["read"] == 0


def test_the_lookup_goes_back_at_most_twenty_blocks(api: Api) -> None:
    """Docs: "The system automatically checks for cache hits at all previous content block
    boundaries (up to approximately 20 blocks before your explicit breakpoint)"."""

    def conversation(extra: int) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = [{"type": "text", "text": BIG}]
        blocks += [{"type": "text", "text": f"line {i}"} for i in range(extra)]
        blocks[-1]["cache_control"] = EPHEMERAL
        return [{"role": "user", "content": blocks}]

    api.usage(messages=conversation(0))
    assert api.usage(messages=conversation(LOOKBACK_BLOCKS))["read"] > 1000
    api.clock.advance(400)
    api.usage(messages=conversation(0))
    assert api.usage(messages=conversation(LOOKBACK_BLOCKS + 1))["read"] == 0


def test_automatic_caching_puts_the_breakpoint_on_the_last_block(api: Api) -> None:
    """A top-level `cache_control` "automatically applies a cache breakpoint to the last
    cacheable block" and moves forward as the conversation grows."""
    first = [_user(BIG)]
    api.usage(messages=first, extra_body={"cache_control": EPHEMERAL})
    grown = [*first, {"role": "assistant", "content": "a"}, _user("b")]
    assert api.usage(messages=grown, extra_body={"cache_control": EPHEMERAL})["read"] > 1000


def test_a_prompt_over_the_context_window_is_refused_like_the_api(api: Api) -> None:
    """The API's 400: `invalid_request_error`, "prompt is too long: N tokens > M
    maximum"; nothing is cached."""
    with pytest.raises(anthropic.BadRequestError) as caught:
        api.usage(model="small", messages=[_user("z" * CHARS_PER_TOKEN * 3100)])
    body = caught.value.body
    assert isinstance(body, dict)
    assert body["error"]["type"] == "invalid_request_error"
    message = body["error"]["message"]
    assert message.startswith("prompt is too long: ") and message.endswith(" > 3000 maximum")
    assert int(message.split()[4]) > 3000
    assert api.usage(model="small", messages=[_user("fits")])["input"] < 3000


async def test_streamed_answers_report_the_same_usage() -> None:
    """Streaming: the usage (cache fields included) arrives in `message_start`."""
    clock = MovableClock()
    async with ScriptedModelServer(SCRIPT, clock=clock) as server:
        client = anthropic.AsyncAnthropic(base_url=server.base_url, api_key="x", max_retries=0)
        request: dict[str, Any] = {
            "model": MODEL,
            "max_tokens": 10,
            "system": _system(),
            "messages": [_user("q")],
        }
        await client.messages.create(**request)
        async with client.messages.stream(**request) as stream:
            final = await stream.get_final_message()
        await client.close()
    assert final.usage.cache_read_input_tokens and final.usage.cache_read_input_tokens > 1000
    assert final.usage.cache_creation_input_tokens == 0


def test_a_pdf_is_billed_by_its_pages_like_the_broker_estimates_it(api: Api) -> None:
    """A 16 KB PDF of 100 empty pages: 100 page images, not its bytes."""
    writer = PdfWriter()
    for _ in range(100):
        writer.add_blank_page(612, 792)
    out = io.BytesIO()
    writer.write(out)
    data = base64.b64encode(out.getvalue()).decode()
    source = {"type": "base64", "media_type": "application/pdf", "data": data}
    content = [{"type": "document", "source": source}, {"type": "text", "text": "?"}]
    billed = api.usage(messages=[{"role": "user", "content": content}])["input"]
    assert 100 * PDF_PAGE_IMAGE_TOKENS <= billed < 100 * PDF_PAGE_IMAGE_TOKENS + 100
