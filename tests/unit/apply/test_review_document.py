"""An apply review through the webhook, both ends real on 127.0.0.1: warden POSTs the
change set (paths raw and made visible, kinds, hashes, sizes, modes, link targets,
callouts) and its diff as a signed document that fits the published schema; the
documented receiver applies it by echoing the change set's hash, and the yes is
bound to that hash; an answer naming another hash, or a scope other than `once`,
is refused and changes nothing; a no carries its reason."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import jsonschema
from aiohttp import web

from orchestrator.apply.changeset import ContentStore, FileChange
from orchestrator.apply.review_document import ReviewDocuments
from orchestrator.permissions.approval_hub import ApproverHub
from orchestrator.permissions.webhook import WebhookApprover
from orchestrator.permissions.webhook_protocol import ChangeEntry, json_schema
from tests.review_fixtures import ANSI_LINE, BIDI_NAME, SCRIPT_NAME, hostile_review
from tests.unit.permissions.test_webhook import RECEIVER, SECRET, Receiver, post_answer


def approver(url: str) -> WebhookApprover:
    """The webhook channel as `warden run` opens it: writing apply reviews' documents."""
    return WebhookApprover(url, secret=SECRET.encode(), timeout_s=10, documents=ReviewDocuments())


def test_the_document_carries_every_field_of_a_change() -> None:
    assert set(FileChange.model_fields) <= set(ChangeEntry.model_fields)


def test_the_published_review_schema_matches_the_document() -> None:
    published = json.loads((RECEIVER.parent / "schema" / "webhook-review.schema.json").read_text())
    assert published == json_schema("webhook-review")


async def test_the_documented_receiver_applies_a_review_by_its_hash(tmp_path: Path) -> None:
    receiver = Receiver("--review", "allow", "--person", "release-bot")
    review = hostile_review(ContentStore(tmp_path))
    try:
        async with approver(receiver.url) as hook:
            answer = await hook.approve(review)
        await receiver.wait_for("answered")
    finally:
        receiver.stop()
    assert (answer.behavior, answer.decided_by) == ("allow", "webhook:release-bot")
    assert answer.bound_to == review.change_set.sha256
    (line,) = [line for line in receiver.lines if line.startswith("review q_")]
    assert review.change_set.sha256 in line and "invoice\\u202etxt.exe" in line
    assert BIDI_NAME not in line


@asynccontextmanager
async def _recording() -> AsyncIterator[tuple[str, list[bytes]]]:
    bodies: list[bytes] = []

    async def record(request: web.Request) -> web.Response:
        bodies.append(await request.read())
        return web.Response(status=202)

    app = web.Application()
    app.router.add_post("/hook", record)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/hook", bodies
    finally:
        await runner.cleanup()


async def test_the_review_document_and_a_stale_answer(tmp_path: Path) -> None:
    review = hostile_review(ContentStore(tmp_path))
    sha = review.change_set.sha256
    async with _recording() as (url, bodies), approver(url) as hook:
        asking = asyncio.create_task(ApproverHub([hook]).approve(review))
        while not bodies:
            await asyncio.sleep(0.01)
        doc = json.loads(bodies[0])
        jsonschema.validate(doc, json_schema("webhook-review"))
        assert doc["type"] == "warden.apply.review" and doc["input_hash"] == sha
        assert doc["change_set"]["sha256"] == sha and doc["scopes"] == ["once"]
        entries = {c["path"]: c for c in doc["change_set"]["changes"]}
        assert set(entries) == {c.path for c in review.change_set.changes}
        app = entries["src/app.py"]
        assert (app["old_mode"], app["new_mode"], app["new_size"]) == (
            0o644,
            0o755,
            app["new_size"],
        )
        assert any("NEW EXECUTABLE BIT" in note for note in app["notes"])
        assert entries[SCRIPT_NAME]["path_shown"] == SCRIPT_NAME
        assert entries[BIDI_NAME]["path_shown"] == "invoice\\u202etxt.exe"
        assert entries["etc-link"]["link_target"] == "/etc/shadow"
        assert doc["diff"].startswith(f"Change set {sha}\n")
        assert "\\x1b[2J" in doc["diff"] and ANSI_LINE not in doc["diff"]
        assert all(b < 0x80 for b in bodies[0])  # escaped JSON: any name survives

        answer = {
            "type": "warden.approval.answer", "version": 1, "question_id": review.question_id,
            "behavior": "allow", "scope": "once", "person": "mallory",
        }  # fmt: skip
        stale = await post_answer(doc["answer_url"], {**answer, "input_hash": "0" * 64})
        assert stale.status_code == 400 and "change set's sha256" in stale.json()["detail"]
        session = await post_answer(
            doc["answer_url"], {**answer, "input_hash": sha, "scope": "session"}
        )
        assert session.status_code == 400 and "scope `once`" in session.json()["detail"]
        assert not asking.done()
        no = {**answer, "input_hash": sha, "behavior": "deny", "reason": "not the link"}
        assert (await post_answer(doc["answer_url"], {**no, "person": "alice"})).status_code == 200
        answered = await asking
    assert (answered.behavior, answered.reason, answered.bound_to) == ("deny", "not the link", "")
    assert answered.decided_by == "webhook:alice"


def test_a_long_review_sends_its_summary(tmp_path: Path) -> None:
    from orchestrator.apply.render import render_change_set
    from orchestrator.apply.review_document import MAX_DIFF_CHARS, diff_text, review_document

    store = ContentStore(tmp_path)
    review = hostile_review(store)
    view = render_change_set(review.change_set, store)
    small = json.loads(review_document(review, view, "http://a", 1.0))
    assert small["diff"] == view.text()
    many = view.model_copy(
        update={"files": view.files * (2 * MAX_DIFF_CHARS // len(view.text()) + 1)}
    )
    cut = diff_text(many)
    assert len(cut) < MAX_DIFF_CHARS and "longer than a review document carries" in cut
