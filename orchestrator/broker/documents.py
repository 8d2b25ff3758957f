"""The documents of a model request, estimated as the API bills them, before it is sent.

A base64 PDF costs its pages (`orchestrator.documents`), whatever its bytes. Its
pages are counted by pypdf in a child process (`python -I -m orchestrator.documents`,
which limits its own CPU time and memory before it reads) with a wall-clock timeout, so a PDF built to be slow
or large to parse costs neither the event loop nor the broker's interpreter lock;
past any limit it counts as unreadable (the most one request can be billed). Counts
are kept by the PDF's SHA-256 (`PageCounts`), since the runner sends the whole
conversation, and with it the same PDF, on every turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import sys
from collections import OrderedDict
from dataclasses import dataclass, field

from orchestrator.documents import (
    UNREADABLE_DOCUMENT_TOKENS,
    PdfBlock,
    document_blocks,
    pdf_bytes,
    pdf_tokens,
)
from orchestrator.jsontypes import JSONValue

log = logging.getLogger(__name__)

PARSE_TIMEOUT_S = 10.0
"""Wall-clock time one PDF's page count may take (the child is killed after it)."""
MAX_PDFS_COUNTED = 20
"""PDFs counted in one request; any more count as unreadable."""
REQUEST_PARSE_BUDGET_S = 20.0
"""Wall-clock time the PDFs of one request may take to count in all; those not
counted by then count as unreadable."""
MAX_COUNTS_KEPT = 256
"""Page counts remembered (by SHA-256), newest kept."""


@dataclass(frozen=True)
class DocumentCost:
    """The documents of one request: estimated tokens, and the base64 characters they
    carry (left out of the byte-based text estimate)."""

    tokens: int = 0
    chars: int = 0


@dataclass(frozen=True)
class PdfFacts:
    """What the page counter learnt of one PDF (None: not within the limits)."""

    pages: int | None
    text_bytes: int | None = None

    @property
    def tokens(self) -> int:
        return pdf_tokens(self.pages, self.text_bytes)


def _count(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


async def count_pages(raw: bytes) -> PdfFacts:
    """`raw`'s page count and text size from a limited child process: what it said
    before it ended or the timeout passed (nothing at all: unreadable)."""
    try:
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-I", "-m", "orchestrator.documents",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
    except OSError as exc:
        log.warning("could not start the PDF page counter: %s", exc)
        return PdfFacts(None)
    assert child.stdin is not None and child.stdout is not None
    facts: dict[str, int | None] = {}
    try:
        async with asyncio.timeout(PARSE_TIMEOUT_S):
            with contextlib.suppress(ConnectionError):
                child.stdin.write(raw)
                await child.stdin.drain()
                child.stdin.close()
            while line := await child.stdout.readline():
                with contextlib.suppress(ValueError, AttributeError):
                    facts.update({k: _count(v) for k, v in json.loads(line).items()})
    except TimeoutError:
        pass
    finally:
        with contextlib.suppress(ProcessLookupError):
            child.kill()
        await child.wait()
    return PdfFacts(facts.get("pages"), facts.get("text_bytes"))


@dataclass
class PageCounts:
    """Page counts by the PDF's SHA-256, counted once each (`count_pages`)."""

    kept: OrderedDict[str, PdfFacts] = field(default_factory=OrderedDict)
    _one_at_a_time: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)
    """One counting child per subagent at a time, whatever it sends in parallel."""

    async def facts(self, raw: bytes) -> PdfFacts:
        digest = hashlib.sha256(raw).hexdigest()
        if digest in self.kept:
            self.kept.move_to_end(digest)
            return self.kept[digest]
        facts = await count_pages(raw)
        self.kept[digest] = facts
        while len(self.kept) > MAX_COUNTS_KEPT:
            self.kept.popitem(last=False)
        return facts

    async def cost(self, body: JSONValue, max_objects: int) -> DocumentCost:
        """What the documents of `body` cost (see the module doc)."""
        tokens = chars = counted = 0
        deadline = asyncio.get_running_loop().time() + REQUEST_PARSE_BUDGET_S
        for block in list(document_blocks(body, max_objects)):
            if not isinstance(block, PdfBlock):
                tokens += UNREADABLE_DOCUMENT_TOKENS
                continue
            chars += len(block.data)
            raw = pdf_bytes(block.data)
            counted += 1
            late = asyncio.get_running_loop().time() > deadline
            if raw is None or counted > MAX_PDFS_COUNTED or late:
                tokens += UNREADABLE_DOCUMENT_TOKENS
                continue
            async with self._one_at_a_time:
                tokens += (await self.facts(raw)).tokens
        return DocumentCost(tokens, chars)
