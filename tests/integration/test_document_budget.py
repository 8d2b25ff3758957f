"""Budgets count documents, tried from inside a real sandbox: a subagent posts a
16 KB base64 PDF of 100 pages to its broker under a 20,000-token budget. By its
bytes it fits; by its pages (what the API bills, about 180,000 tokens) it does not,
so the broker refuses it before it is sent, saying so, and the scripted model
endpoint (which bills PDFs by their pages too) never sees it. A two-page PDF in
the same budget is forwarded and billed by its pages."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from pypdf import PdfWriter

from orchestrator.config import Settings
from orchestrator.documents import PDF_PAGE_IMAGE_TOKENS
from orchestrator.runtime.caps import TaskManagerConfig
from orchestrator.runtime.tasks import TaskInput, TaskStatus
from tests.integration.harness import convo, requests_of, scripted_run, text, tool

pytestmark = pytest.mark.integration

BUDGET = 20_000
PROBE = r"""
import base64, json, socket, sys

def request(body):
    data = json.dumps(body).encode()
    head = ("POST /v1/messages HTTP/1.1\r\nHost: warden-broker\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n")
    s = socket.socket(socket.AF_UNIX)
    s.connect("/run/warden/broker.sock")
    s.settimeout(120)
    s.sendall(head.encode() + data)
    raw = b""
    while chunk := s.recv(65536):
        raw += chunk
    header, _, payload = raw.partition(b"\r\n\r\n")
    body = json.loads(payload)
    status = int(header.split()[1])
    return [status, body["error"]["message"][:400] if status != 200 else body["usage"]]

out = {}
for name in ("many", "few"):
    pdf = open(f"/workspace/{name}.pdf", "rb").read()
    doc = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
           "data": base64.b64encode(pdf).decode()}}
    call = {"messages": [{"role": "user", "content": [doc, {"type": "text", "text": f"READ-{name}"}]}],
            "max_tokens": 50}
    out[name] = [len(json.dumps(call))] + request(call)
print(json.dumps(out))
"""


def blank_pdf(pages: int) -> bytes:
    writer = PdfWriter()
    for _ in range(pages):
        writer.add_blank_page(612, 792)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


async def test_a_small_pdf_of_many_pages_is_refused_by_its_pages(
    settings: Settings, workspace: Path
) -> None:
    files = {"many.pdf": blank_pdf(100), "few.pdf": blank_pdf(2), "probe.py": PROBE.encode()}
    for name, data in files.items():
        (workspace / name).write_bytes(data)
        os.chown(workspace / name, 1000, 1000)
    assert len(files["many.pdf"]) <= 16 * 1024
    script = [
        convo(
            "reader",
            {"prompt_contains": "READER"},
            [tool("Bash", command="python3 /workspace/probe.py")],
            [text("{last_tool_result}")],
        ),
        convo("read", {"prompt_contains": "READ-"}, [text("read")]),
    ]
    config = TaskManagerConfig(max_total_tokens=BUDGET)
    async with scripted_run(settings, workspace, script, config=config) as (run, server):
        result = await run.manager.run_task(
            TaskInput(description="reader", prompt="READER", subagent_type="bash")
        )
    assert result.status is TaskStatus.COMPLETED, result.error
    out = json.loads(next(ln for ln in result.text.splitlines() if ln.startswith("{")))
    size, status, message = out["many"]
    assert size < BUDGET * 3  # by its bytes it would fit...
    assert status == 403, message  # ...by its pages it does not: refused, never sent
    assert "token budget exhausted" in message and "PDF documents by their pages" in message
    reached = [json.dumps(r.body) for r in requests_of(server, "read")]
    assert len(reached) == 1 and "READ-few" in reached[0]
    _, status, usage = out["few"]
    assert status == 200
    assert usage["input_tokens"] >= 2 * PDF_PAGE_IMAGE_TOKENS  # billed by its pages
