"""A subagent's model-call budget (turns and tokens), checked BEFORE a request is
forwarded, so the money is never spent first and counted afterwards.

Input tokens are estimated from the request's size: `BYTES_PER_TOKEN_ESTIMATE`
bytes per token for everything but images and documents. Images are estimated by
the API's formula from their dimensions (`image_tokens`: a tiny, highly
compressible image costs as many tokens as its pixel area says, whatever its
bytes), and PDF documents by their pages (`broker.documents`: a 16 KB PDF of 100
pages costs 100 pages of text and images), each as the API bills it. Tokenizers average about four bytes per token on English text
and code and more on JSON punctuation, so dividing the JSON body's bytes by
three over-counts; an estimate that is too high only refuses early, one that is
too low would let a request through that the budget cannot pay for. A request
passes when its estimate plus at least `MIN_OUTPUT_TOKENS` fits in what is left;
its `max_tokens` is then clamped to what is left after the estimate.

After the call, every usage field the API reports is counted: input, output,
cache creation and cache read tokens (all billed), plus server tool requests.
A successful answer without usage is charged its estimate plus `max_tokens`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.broker.documents import DocumentCost
from orchestrator.broker.image_tokens import images_in
from orchestrator.jsontypes import JSONValue

BYTES_PER_TOKEN_ESTIMATE = 3
"""Request bytes per estimated input token (conservative: see the module doc)."""
MIN_OUTPUT_TOKENS = 16
"""A request is refused when less than this is left for the answer."""
USAGE_TOKEN_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)
"""Token counts in the API's `usage` object; all are billed, all are counted."""


class BudgetRefused(Exception):
    """The request does not fit the budget; the message says why and what was used."""


@dataclass(frozen=True)
class Admission:
    """A request the budget lets through, with the `max_tokens` to forward."""

    estimated_input: int
    max_tokens: int
    clamped: bool


MAX_OBJECTS_WALKED = 200_000
"""JSON objects walked to find images (the forwarding check refuses a request with more)."""


def estimate_input_tokens(
    body: JSONValue, body_bytes: int, documents: DocumentCost | None = None
) -> int:
    """Input tokens of a request of `body_bytes` bytes: its images by their dimensions,
    its `documents` as counted (`broker.documents.PageCounts.cost`), the rest (base64
    image and PDF data left out) at `BYTES_PER_TOKEN_ESTIMATE` bytes each."""
    image_tokens, image_chars = images_in(body, MAX_OBJECTS_WALKED)
    documents = documents or DocumentCost()
    text_bytes = max(0, body_bytes - image_chars - documents.chars)
    return -(-text_bytes // BYTES_PER_TOKEN_ESTIMATE) + image_tokens + documents.tokens


def usage_tokens(usage: JSONValue) -> int:
    """Billed tokens in one `usage` object (missing or malformed fields count 0)."""
    if not isinstance(usage, dict):
        return 0
    total = 0
    for name in USAGE_TOKEN_FIELDS:
        value = usage.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            total += value
    return total


def server_tool_requests(usage: JSONValue) -> int:
    """Server tool uses reported in `usage.server_tool_use` (web search/fetch requests)."""
    counts = usage.get("server_tool_use") if isinstance(usage, dict) else None
    if not isinstance(counts, dict):
        return 0
    return sum(
        v for v in counts.values() if isinstance(v, int) and not isinstance(v, bool) and v > 0
    )


@dataclass
class Budget:
    """Model-call budget of one subagent, enforced by its broker."""

    max_turns: int
    max_total_tokens: int | None = None
    """Tokens (every usage field) the subagent may spend; None = no limit."""
    turns_used: int = 0
    tokens_used: int = 0
    usage: dict[str, int] = field(default_factory=lambda: dict.fromkeys(USAGE_TOKEN_FIELDS, 0))
    """`tokens_used` field by field: uncached input, cache writes, cache reads and
    output are billed at different rates, so reports keep them apart."""
    server_tool_requests: int = 0
    exhausted: str | None = None
    """Why the last request was refused for tokens; the task's error when it fails."""

    @property
    def remaining(self) -> int | None:
        if self.max_total_tokens is None:
            return None
        return max(0, self.max_total_tokens - self.tokens_used)

    def admit(self, estimate: int, max_tokens: int) -> Admission:
        """Check one request (`estimate`: its `estimate_input_tokens`) before it is
        forwarded; raises BudgetRefused."""
        if self.turns_used >= self.max_turns:
            raise BudgetRefused(
                f"max_turns ({self.max_turns}) reached: the broker refuses further model "
                "calls for this subagent; finish with what you have"
            )
        remaining = self.remaining
        if remaining is None:
            return Admission(estimate, max_tokens, clamped=False)
        room = remaining - estimate
        if room < MIN_OUTPUT_TOKENS:
            self.exhausted = (
                f"token budget exhausted ({self.tokens_used} of {self.max_total_tokens} used): "
                f"this request needs about {estimate} input tokens (text at "
                f"{BYTES_PER_TOKEN_ESTIMATE} bytes a token, images by their size in pixels, "
                f"PDF documents by their pages) plus at least {MIN_OUTPUT_TOKENS} for the answer; "
                "the broker did not send it"
            )
            raise BudgetRefused(self.exhausted)
        if max_tokens > room:
            return Admission(estimate, room, clamped=True)
        return Admission(estimate, max_tokens, clamped=False)

    def record(self, usage: JSONValue, admission: Admission) -> int:
        """Count one answered call; returns the tokens charged for it."""
        self.turns_used += 1
        charged = usage_tokens(usage)
        if isinstance(usage, dict):
            for name in USAGE_TOKEN_FIELDS:
                value = usage.get(name)
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    self.usage[name] += value
        else:
            charged = admission.estimated_input + admission.max_tokens
            self.usage["input_tokens"] += admission.estimated_input
            self.usage["output_tokens"] += admission.max_tokens
        self.tokens_used += charged
        self.server_tool_requests += server_tool_requests(usage)
        return charged

    def refusal(self) -> str | None:
        """Why no further call can pass at all (turns used up, or no tokens left)."""
        if self.turns_used >= self.max_turns:
            return f"max_turns ({self.max_turns}) reached"
        remaining = self.remaining
        if remaining is not None and remaining < MIN_OUTPUT_TOKENS:
            return f"token budget exhausted ({self.tokens_used} of {self.max_total_tokens} used)"
        return None
