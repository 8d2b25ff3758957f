"""What a `document` content block costs, as the Messages API bills it (`pdf`): a PDF
by its pages, not by its bytes. `python -m orchestrator.documents` is the page
counter the broker runs in a limited child process (`pdf.main`).

May import: nothing of warden (the broker and the scripted model both bill with it).
"""

from orchestrator.documents.pdf import (
    PDF_PAGE_IMAGE_TOKENS,
    PDF_PAGE_TEXT_TOKENS,
    TEXT_BYTES_PER_TOKEN,
    UNREADABLE_DOCUMENT_TOKENS,
    PdfBlock,
    UnreadableBlock,
    document_blocks,
    pdf_bytes,
    pdf_facts,
    pdf_tokens,
)
from orchestrator.documents.walk import sourced_blocks

__all__ = [
    "PDF_PAGE_IMAGE_TOKENS",
    "PDF_PAGE_TEXT_TOKENS",
    "TEXT_BYTES_PER_TOKEN",
    "UNREADABLE_DOCUMENT_TOKENS",
    "PdfBlock",
    "UnreadableBlock",
    "document_blocks",
    "pdf_bytes",
    "pdf_facts",
    "pdf_tokens",
    "sourced_blocks",
]
