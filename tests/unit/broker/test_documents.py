"""PDF documents are estimated as the API bills them, by their pages: a 16 KB PDF of
100 pages counts 100 page images (plus its text), counted by pypdf in a limited child
process; a PDF that cannot be read, and a URL or file document, count as the most a
request can cost; and a request whose documents do not fit the token budget is
refused before it is sent."""

from __future__ import annotations

import base64
import io
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pypdf import PdfWriter

from orchestrator.broker import Budget
from orchestrator.broker.documents import PageCounts, count_pages
from orchestrator.documents import (
    PDF_PAGE_IMAGE_TOKENS,
    PDF_PAGE_TEXT_TOKENS,
    UNREADABLE_DOCUMENT_TOKENS,
    pdf_tokens,
)
from orchestrator.jsontypes import JSONObject
from tests.unit.broker.test_server import FakeModel, broker_client, budget_broker, messages_body

EMPTY_PAGES = 100


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="wd-") as d:  # short: a Unix socket path
        yield Path(d)


def blank_pdf(pages: int) -> bytes:
    writer = PdfWriter()
    for _ in range(pages):
        writer.add_blank_page(612, 792)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def document(raw: bytes) -> dict[str, Any]:
    data = base64.b64encode(raw).decode()
    source = {"type": "base64", "media_type": "application/pdf", "data": data}
    return {"type": "document", "source": source}


def test_pages_cost_their_image_and_their_text() -> None:
    assert pdf_tokens(100, 0) == 100 * PDF_PAGE_IMAGE_TOKENS
    assert pdf_tokens(2, 3000) == 2 * PDF_PAGE_IMAGE_TOKENS + 1000
    assert pdf_tokens(2, None) == 2 * (PDF_PAGE_IMAGE_TOKENS + PDF_PAGE_TEXT_TOKENS)
    assert pdf_tokens(None, None) == UNREADABLE_DOCUMENT_TOKENS


async def test_a_small_pdf_of_many_pages_costs_its_pages() -> None:
    raw = blank_pdf(EMPTY_PAGES)
    assert len(raw) < 16 * 1024
    facts = await count_pages(raw)
    assert (facts.pages, facts.text_bytes) == (EMPTY_PAGES, 0)
    assert facts.tokens == EMPTY_PAGES * PDF_PAGE_IMAGE_TOKENS


async def test_unreadable_and_unseen_documents_count_as_the_most() -> None:
    assert (await count_pages(b"%PDF-1.7 not really")).tokens == UNREADABLE_DOCUMENT_TOKENS
    url: JSONObject = {"type": "document", "source": {"type": "url", "url": "https://x.test/a.pdf"}}
    cost = await PageCounts().cost([url, document(b"plain text")], 1000)
    assert cost.tokens == 2 * UNREADABLE_DOCUMENT_TOKENS


async def test_counts_are_kept_by_content() -> None:
    counts = PageCounts()
    body: JSONObject = {"messages": [{"role": "user", "content": [document(blank_pdf(3))]}]}
    first = await counts.cost(body, 1000)
    assert first.tokens == 3 * PDF_PAGE_IMAGE_TOKENS and first.chars > 0
    assert len(counts.kept) == 1
    assert await counts.cost(body, 1000) == first
    assert len(counts.kept) == 1


async def test_a_request_whose_pdf_does_not_fit_the_budget_is_never_sent(
    socket_dir: Path,
) -> None:
    model = FakeModel()
    budget = Budget(max_turns=10, max_total_tokens=20_000)
    broker, upstream_client = budget_broker(socket_dir, model, budget)
    content = [document(blank_pdf(EMPTY_PAGES)), {"type": "text", "text": "summarise"}]
    async with broker:
        client = broker_client(broker)
        refused = await client.post(
            "/v1/messages", json=messages_body(messages=[{"role": "user", "content": content}])
        )
        assert refused.status_code == 403
        message = refused.json()["error"]["message"]
        assert "token budget exhausted" in message and "PDF documents by their pages" in message
        assert model.requests == [] and budget.tokens_used == 0
        small = [document(blank_pdf(2)), {"type": "text", "text": "summarise"}]
        ok = await client.post(
            "/v1/messages", json=messages_body(messages=[{"role": "user", "content": small}])
        )
        assert ok.status_code == 200 and len(model.requests) == 1
        await client.aclose()
    await upstream_client.aclose()


async def test_a_count_past_its_time_counts_as_unreadable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The child is killed at the timeout; what it had not said counts as the most."""
    from orchestrator.broker import documents

    monkeypatch.setattr(documents, "PARSE_TIMEOUT_S", 0.0)
    facts = await count_pages(blank_pdf(3))
    assert facts.pages is None and facts.tokens == UNREADABLE_DOCUMENT_TOKENS
