"""Prompt caching and the context window, billed the way the Messages API documents
them, so tests and benchmarks see what a run really costs.

The rules (Anthropic, "Prompt caching" and "Context windows",
https://platform.claude.com/docs/en/build-with-claude/prompt-caching and
.../context-windows; each one is pinned by a test in
tests/unit/scripted/test_billing.py):

- A prompt is one prefix in the order tools -> system -> messages; a block carrying
  `cache_control` (a breakpoint) marks the end of a prefix to cache. A top-level
  `cache_control` (automatic caching) puts one on the last block.
- At most `MAX_BREAKPOINTS` breakpoints; more is a 400.
- `ttl` is "5m" (the default) or "1h"; a 1-hour breakpoint may not come after a
  5-minute one. An entry lives for its TTL from its last use (a read refreshes it).
- A prefix shorter than the model family's minimum (`MIN_CACHEABLE_TOKENS`) is
  not cached, silently: the tokens are billed as plain input.
- A hit needs a byte-identical prefix (here: every block's JSON, `cache_control`
  left out, so moving a breakpoint does not change the prefix). The lookup starts
  at each breakpoint and goes back at most `LOOKBACK_BLOCKS` blocks to an earlier
  cached prefix.
- usage: `cache_read_input_tokens` is the longest cached prefix read,
  `cache_creation_input_tokens` what was written after it up to the last
  cacheable breakpoint (split by TTL in `cache_creation`), `input_tokens` the
  rest after the last breakpoint.
- A prompt longer than the model's context window is refused with 400
  `invalid_request_error` "prompt is too long: N tokens > M maximum".

Tokens are the scripted model's estimate, `CHARS_PER_TOKEN` characters of each
block's JSON per token, counted on the whole prefix so far; a base64 PDF document
is billed by its pages instead (`orchestrator.documents`, as the broker estimates
it: the API renders each page as text and an image). A URL or file document cannot
be read here and counts by its JSON only.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from orchestrator.documents import PdfBlock, document_blocks, pdf_bytes, pdf_facts, pdf_tokens
from orchestrator.jsontypes import JSONObject, JSONValue

CHARS_PER_TOKEN = 4
"""Token estimate: this many characters of JSON count as one token."""

MAX_BREAKPOINTS = 4
"""Blocks with `cache_control` one request may carry."""

LOOKBACK_BLOCKS = 20
"""How many blocks before a breakpoint the cache lookup checks for an earlier hit."""

TTL_SECONDS: dict[str, float] = {"5m": 300.0, "1h": 3600.0}
"""Cache lifetimes by `cache_control.ttl` (refreshed on every read)."""

DEFAULT_TTL = "5m"

MAX_CACHE_ENTRIES = 100_000
"""Past this many entries, expired ones are dropped before the next request."""

MIN_CACHEABLE_TOKENS: tuple[tuple[str, int], ...] = (
    ("claude-opus-5", 512),
    ("claude-fable-5", 512),
    ("claude-mythos-5", 512),
    ("claude-opus-4-7", 2048),
    ("claude-opus-4-6", 4096),
    ("claude-opus-4-5", 4096),
    ("claude-haiku-4-5", 4096),
    ("claude-sonnet-4-6", 2048),
    ("claude-3-5-haiku", 2048),
    ("claude-3-haiku", 2048),
    ("claude-haiku-3", 2048),
)
"""Shortest cacheable prefix by model-name prefix (first match); other models
(Sonnet 5, Opus 4.8, Sonnet 4.5, Opus 4.1, Opus 4, Sonnet 4, Sonnet 3.7, ...) use
`DEFAULT_MIN_CACHEABLE_TOKENS`."""

DEFAULT_MIN_CACHEABLE_TOKENS = 1024

DEFAULT_CONTEXT_WINDOW_TOKENS = 200_000
"""The models' standard context window (input tokens a request may hold)."""

Role = Literal["tools", "system", "user", "assistant"]


class BillingRefused(ValueError):
    """The request breaks a caching or context-window rule: a 400
    `invalid_request_error` with this message."""


class MovableClock:
    """A clock tests move by hand: `clock.advance(301)` expires a 5-minute entry."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def min_cacheable_tokens(model: str) -> int:
    for prefix, tokens in MIN_CACHEABLE_TOKENS:
        if model.startswith(prefix):
            return tokens
    return DEFAULT_MIN_CACHEABLE_TOKENS


@dataclass(frozen=True)
class Block:
    """One block of the prompt prefix."""

    digest: str
    """Hash of the whole prefix up to and including this block."""
    tokens: int
    """Tokens of the whole prefix up to and including this block."""
    ttl: str | None
    """Its breakpoint's TTL, or None when it carries no `cache_control`."""


def _without_cache_control(block: JSONObject) -> JSONObject:
    return {k: v for k, v in block.items() if k != "cache_control"}


def _ttl(block: JSONObject) -> str | None:
    control = block.get("cache_control")
    if control is None:
        return None
    if not isinstance(control, dict) or control.get("type") != "ephemeral":
        raise BillingRefused("cache_control.type: Input should be 'ephemeral'")
    ttl = control.get("ttl", DEFAULT_TTL)
    if ttl not in TTL_SECONDS:
        raise BillingRefused("cache_control.ttl: Input should be '5m' or '1h'")
    return str(ttl)


def _parts(body: JSONObject) -> list[tuple[Role, JSONObject]]:
    """The request's blocks in prefix order, each with where it is."""
    parts: list[tuple[Role, JSONObject]] = []
    tools = body.get("tools")
    if isinstance(tools, list):
        parts += [("tools", t) for t in tools if isinstance(t, dict)]
    system = body.get("system")
    if isinstance(system, str) and system:
        parts.append(("system", {"type": "text", "text": system}))
    elif isinstance(system, list):
        parts += [("system", b) for b in system if isinstance(b, dict)]
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict):
            continue
        role: Role = "assistant" if message.get("role") == "assistant" else "user"
        content = message.get("content")
        if isinstance(content, str):
            parts.append((role, {"type": "text", "text": content}))
        elif isinstance(content, list):
            parts += [(role, b) for b in content if isinstance(b, dict)]
    return parts


MAX_DOCUMENT_OBJECTS = 200_000
"""JSON objects of one block searched for documents."""
MAX_PDFS_KEPT = 1024
_pdf_tokens: dict[str, int] = {}
"""PDF tokens by the PDF's SHA-256 (a conversation sends its PDFs on every turn)."""


def _documents(block: JSONObject) -> tuple[int, int]:
    """(tokens of the PDFs in `block`, the base64 characters they carry)."""
    tokens = chars = 0
    for document in document_blocks(block, MAX_DOCUMENT_OBJECTS):
        if not isinstance(document, PdfBlock):
            continue
        chars += len(document.data)
        raw = pdf_bytes(document.data)
        if raw is None:
            tokens += pdf_tokens(None, None)
            continue
        digest = hashlib.sha256(raw).hexdigest()
        if digest not in _pdf_tokens:
            if len(_pdf_tokens) >= MAX_PDFS_KEPT:
                _pdf_tokens.clear()
            facts = dict(pdf_facts(raw))
            _pdf_tokens[digest] = pdf_tokens(facts.get("pages"), facts.get("text_bytes"))
        tokens += _pdf_tokens[digest]
    return tokens, chars


def prefix_blocks(body: JSONObject) -> list[Block]:
    """The request as a chain of prefix blocks (hash and tokens so far, breakpoint)."""
    model = body.get("model")
    digest = hashlib.sha256(f"model:{model}".encode()).hexdigest()
    chars = document_tokens = 0
    blocks: list[Block] = []
    previous_role: str | None = None
    auto = body.get("cache_control")
    parts = _parts(body)
    for index, (role, block) in enumerate(parts):
        text = json.dumps(_without_cache_control(block), ensure_ascii=False)
        # A new message starts a new turn: its role is part of the prefix.
        marker = f"\n{role}:" if role != previous_role else "\n"
        previous_role = role
        digest = hashlib.sha256((digest + marker + text).encode()).hexdigest()
        pdf_tokens_, pdf_chars = _documents(block)
        chars += len(text) - pdf_chars
        document_tokens += pdf_tokens_
        ttl = _ttl(block)
        if ttl is None and index == len(parts) - 1 and auto is not None:
            ttl = _ttl({"cache_control": auto})
        blocks.append(Block(digest, chars // CHARS_PER_TOKEN + document_tokens, ttl))
    return blocks


def count_input_tokens(body: JSONObject) -> int:
    """The request's input tokens (tools, system and messages), at least 1."""
    blocks = prefix_blocks(body)
    return max(1, blocks[-1].tokens) if blocks else 1


@dataclass
class Bill:
    """The usage of one request's input."""

    input_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int
    creation_by_ttl: dict[str, int] = field(default_factory=dict)

    def usage(self, output_tokens: int) -> dict[str, JSONValue]:
        return {
            "input_tokens": self.input_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "cache_creation": {
                "ephemeral_5m_input_tokens": self.creation_by_ttl.get("5m", 0),
                "ephemeral_1h_input_tokens": self.creation_by_ttl.get("1h", 0),
            },
            "output_tokens": output_tokens,
        }


@dataclass(frozen=True)
class Prompt:
    """A checked request: its prefix blocks, breakpoints and sizes."""

    blocks: list[Block]
    breakpoints: list[int]
    """Indexes of the blocks that carry `cache_control`."""
    minimum: int
    """The model's shortest cacheable prefix."""
    total: int
    """All its input tokens."""


@dataclass
class _Entry:
    expires: float
    ttl: str


class PromptCache:
    """The server's prompt cache: prefixes written at breakpoints, read on a hit."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        context_windows: Mapping[str, int] | None = None,
        default_context_window: int = DEFAULT_CONTEXT_WINDOW_TOKENS,
    ) -> None:
        self.clock = clock
        self.context_windows = dict(context_windows or {})
        self.default_context_window = default_context_window
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()

    def context_window(self, model: str) -> int:
        return self.context_windows.get(model, self.default_context_window)

    def check(self, body: JSONObject) -> Prompt:
        """The request's prompt, checked against the window and the caching rules;
        raises BillingRefused for a request the API refuses."""
        model = str(body.get("model"))
        blocks = prefix_blocks(body)
        total = blocks[-1].tokens if blocks else 0
        window = self.context_window(model)
        if total > window:
            raise BillingRefused(f"prompt is too long: {total} tokens > {window} maximum")
        breakpoints = [i for i, b in enumerate(blocks) if b.ttl is not None]
        if len(breakpoints) > MAX_BREAKPOINTS:
            raise BillingRefused(
                f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
                f"Found {len(breakpoints)}."
            )
        ttls = [blocks[i].ttl for i in breakpoints]
        if "5m" in ttls and "1h" in ttls[ttls.index("5m") :]:
            raise BillingRefused(
                "cache_control: a ttl='1h' cache_control block must not come after a "
                "ttl='5m' cache_control block"
            )
        return Prompt(blocks, breakpoints, min_cacheable_tokens(model), total)

    def bill(self, prompt: Prompt) -> Bill:
        """Read and write the cache for one answered request; its input usage."""
        with self._lock:
            return self._bill(prompt)

    def _live(self, digest: str, now: float) -> _Entry | None:
        entry = self._entries.get(digest)
        if entry is not None and entry.expires <= now:
            del self._entries[digest]
            return None
        return entry

    def _bill(self, prompt: Prompt) -> Bill:
        blocks, breakpoints, minimum = prompt.blocks, prompt.breakpoints, prompt.minimum
        now = self.clock()
        if len(self._entries) > MAX_CACHE_ENTRIES:
            self._entries = {k: e for k, e in self._entries.items() if e.expires > now}
        read_end = -1
        for point in breakpoints:
            for index in range(point, max(-1, point - LOOKBACK_BLOCKS - 1), -1):
                entry = self._live(blocks[index].digest, now)
                if entry is not None:
                    # A read refreshes it, for the longer of its TTL and the breakpoint's.
                    asked = blocks[point].ttl or DEFAULT_TTL
                    if TTL_SECONDS[asked] > TTL_SECONDS[entry.ttl]:
                        entry.ttl = asked
                    entry.expires = now + TTL_SECONDS[entry.ttl]
                    read_end = max(read_end, index)
                    break
        read = blocks[read_end].tokens if read_end >= 0 else 0
        written = read
        by_ttl: dict[str, int] = {}
        for point in breakpoints:
            block = blocks[point]
            if point <= read_end or block.tokens < minimum or block.ttl is None:
                continue
            self._entries[block.digest] = _Entry(now + TTL_SECONDS[block.ttl], block.ttl)
            by_ttl[block.ttl] = by_ttl.get(block.ttl, 0) + block.tokens - written
            written = block.tokens
        return Bill(
            input_tokens=prompt.total - written,
            cache_creation_input_tokens=written - read,
            cache_read_input_tokens=read,
            creation_by_ttl=by_ttl,
        )
