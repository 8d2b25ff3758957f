"""What a `document` content block costs, as the Messages API bills it: a PDF by its
pages, not by its bytes.

Anthropic's PDF support guide ("Estimate your costs"): each page is given to the
model as its extracted text ("typically 1,500-3,000 tokens per page depending on
content density") and as an image of the page, billed by the vision formula
(tokens = width x height / 750; an image at the vision guide's size limit, about
1.15 megapixels, is about 1,600 tokens). So a page costs its image whatever it
holds (`PDF_PAGE_IMAGE_TOKENS`, with the page's framing: issue 32 saw 100 nearly
empty pages billed about 180,000 tokens) plus its text, counted from the text pypdf
extracts at `TEXT_BYTES_PER_TOKEN` UTF-8 bytes a token, or at the top of the
guide's range (`PDF_PAGE_TEXT_TOKENS`) when the text cannot be extracted within
the limits. A 16 KB PDF of 100 empty pages costs 180,000 tokens, as billed, not
the 5,000 its bytes suggest.

Page counts and text come from `pypdf`, bounded in input size. The broker runs it
in a child process that limits its own CPU time and memory (`python -m
orchestrator.documents` reads a PDF on stdin and prints its page count, then its
text size), under a wall-clock timeout, so a hostile PDF costs neither the host's
event loop nor its interpreter lock; a PDF whose pages cannot be counted within the
limits counts as `UNREADABLE_DOCUMENT_TOKENS`, the most one request can be billed.
The scripted model bills documents with the same functions (in its own process), so
tests and benchmarks see the same costs.

Other sources: a `text` source is text (its bytes count as text); a `content`
source is its blocks (images by their pixels); a `url` or `file` source cannot be
read before it is sent and counts as `UNREADABLE_DOCUMENT_TOKENS` (a URL source is
also egress: `broker.forwarding`).

"""

from __future__ import annotations

import base64
import binascii
import io
import json
import logging
import sys
from collections.abc import Iterator
from dataclasses import dataclass

from orchestrator.documents.walk import sourced_blocks

JSONLike = object

PDF_PAGE_IMAGE_TOKENS = 1_800
"""A page's image (an image at the vision guide's size limit, ~1,600 tokens) and its
framing: what the API bills for a page without text."""
PDF_PAGE_TEXT_TOKENS = 3_000
"""A page's text when it cannot be extracted: the top of the guide's 1,500-3,000."""
TEXT_BYTES_PER_TOKEN = 3
"""UTF-8 bytes of extracted text per token (the broker's text estimate: an upper bound)."""
UNREADABLE_DOCUMENT_TOKENS = 1_000_000
"""A document whose pages cannot be counted: the largest context window, the most
input one request can be billed (so a budget smaller than that refuses it)."""
MAX_PDF_BYTES = 32 * 1024 * 1024
"""The API's request size limit: a larger PDF is not read (it counts as unreadable)."""
PARSE_CPU_S = 5
"""CPU seconds the page-counting child may use (RLIMIT_CPU, set by `main`)."""
PARSE_MEMORY_BYTES = 1024**3
"""Address space the page-counting child may use (RLIMIT_AS, set by `main`)."""


@dataclass(frozen=True)
class PdfBlock:
    """One base64 PDF in a request, found by `pdf_blocks`."""

    data: str
    """Its base64 text, as sent."""


@dataclass(frozen=True)
class UnreadableBlock:
    """A document whose pages cannot be counted before it is sent (URL or file source,
    a PDF whose base64 is not text)."""

    kind: str


def document_blocks(value: JSONLike, max_objects: int) -> Iterator[PdfBlock | UnreadableBlock]:
    """Every `document` block at any depth (a tool result, a search result, ...) that
    is billed by pages, walking at most `max_objects` objects."""
    for source in sourced_blocks(value, "document", max_objects, ("base64", "url", "file")):
        kind = str(source.get("type"))
        data = source.get("data")
        if kind == "base64" and isinstance(data, str):
            yield PdfBlock(data)
        else:
            yield UnreadableBlock(kind)


def pdf_bytes(data: str) -> bytes | None:
    """The PDF a base64 text carries; None when it is not base64 or too large."""
    if len(data) > MAX_PDF_BYTES * 4 // 3 + 4:
        return None
    try:
        return base64.b64decode(data, validate=False)
    except (binascii.Error, ValueError):
        return None


PDF_ERRORS = (ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError)
"""What pypdf raises on a malformed file besides its own errors."""


def pdf_facts(raw: bytes) -> Iterator[tuple[str, int | None]]:
    """("pages", N), then ("text_bytes", N): a PDF's page count and the UTF-8 size of
    the text pypdf extracts from it, each None when it cannot be read. Run it where a
    hostile PDF may take its time (the broker: `main`, in a limited child process)."""
    if len(raw) > MAX_PDF_BYTES or not raw.lstrip()[:5].startswith(b"%PDF"):
        yield "pages", None
        return
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(raw), strict=False)
        pages = len(reader.pages)
    except (PyPdfError, *PDF_ERRORS):
        yield "pages", None
        return
    yield "pages", pages
    size = 0
    try:
        for page in reader.pages:
            size += len(page.extract_text().encode("utf-8", "replace"))
    except (PyPdfError, *PDF_ERRORS):
        yield "text_bytes", None
        return
    yield "text_bytes", size


def pdf_tokens(pages: int | None, text_bytes: int | None) -> int:
    """Estimated input tokens of a PDF of `pages` pages holding `text_bytes` of text
    (None: not known; no page count: unreadable, the most a request can cost)."""
    if pages is None:
        return UNREADABLE_DOCUMENT_TOKENS
    pages = max(1, pages)
    if text_bytes is None:
        text = pages * PDF_PAGE_TEXT_TOKENS
    else:
        text = -(-text_bytes // TEXT_BYTES_PER_TOKEN)
    return pages * PDF_PAGE_IMAGE_TOKENS + text


def main() -> None:
    """A PDF on stdin; on stdout one JSON line per fact of `pdf_facts` as it is known
    (`{"pages": N}`, then `{"text_bytes": N}`), within `PARSE_CPU_S` of CPU and
    `PARSE_MEMORY_BYTES` of memory: past them it dies, and its parent uses what it
    printed so far."""
    import resource

    resource.setrlimit(resource.RLIMIT_CPU, (PARSE_CPU_S, PARSE_CPU_S))
    resource.setrlimit(resource.RLIMIT_AS, (PARSE_MEMORY_BYTES, PARSE_MEMORY_BYTES))
    logging.disable(logging.CRITICAL)  # pypdf warns about malformed files: not our output
    raw = sys.stdin.buffer.read(MAX_PDF_BYTES + 1)
    for name, value in pdf_facts(raw):
        sys.stdout.write(json.dumps({name: value}) + "\n")
        sys.stdout.flush()
