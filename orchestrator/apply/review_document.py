"""An apply review as a webhook document (`permissions.webhook_protocol.ReviewDocument`):
the change set (paths, kinds, hashes, sizes, modes, link targets), each path's
callouts, and the diff as warden's terminal shows it, with the hash an answer must
echo. Written here, where an apply review is known, and handed to the webhook
approver (`ReviewDocuments`, its `QuestionDocuments`): `permissions` sits below
`apply` and never imports it.

The body is JSON with every non-ASCII character escaped (`ensure_ascii`): a path
that is not UTF-8 holds lone surrogates, which UTF-8 cannot carry, and an escaped
body is the same bytes for every receiver, which its signature covers.
"""

from __future__ import annotations

import asyncio
import json

from orchestrator.apply.changeset import ApplyReview
from orchestrator.apply.render import ChangeSetView, render_change_set
from orchestrator.permissions.approvers import ApprovalQuestion
from orchestrator.permissions.webhook_protocol import (
    ChangeEntry,
    ChangeSetEntry,
    ReviewDocument,
    chain_of,
)

MAX_DIFF_CHARS = 256 * 1024
"""Longest diff text a review document carries; a longer review sends its summary,
saying so (the change set's entries are always all there)."""

_CARRIED = set(ChangeEntry.model_fields) - {"path_shown", "notes"}
"""What the document carries of each `FileChange` (a test holds it to all of them)."""


def review_document(
    q: ApplyReview, view: ChangeSetView, answer_url: str, expires_at: float
) -> bytes:
    """The signed body for one apply review (`view` is its rendering)."""
    changes = []
    for change, rendered in zip(q.change_set.changes, view.files, strict=True):
        ascii_form = [f"name in ASCII: {rendered.path_ascii}"] if rendered.path_ascii else []
        changes.append(
            ChangeEntry(
                **change.model_dump(include=_CARRIED),
                path_shown=rendered.path,
                notes=[*ascii_form, *rendered.notes],
            )
        )
    doc = ReviewDocument(
        question_id=q.question_id,
        run_id=q.run_id,
        task_id=q.task_id,
        agent_type=q.agent_type,
        description=q.description,
        chain=chain_of(q),
        change_set=ChangeSetEntry(
            sha256=q.change_set.sha256,
            task_id=q.change_set.task_id,
            agent=q.change_set.agent,
            base=q.change_set.base,
            changes=changes,
        ),
        input_hash=q.change_set.sha256,
        diff=diff_text(view),
        answer_url=answer_url,
        expires_at=round(expires_at, 3),
    )
    return json.dumps(doc.model_dump(mode="json"), ensure_ascii=True).encode("ascii")


class ReviewDocuments:
    """The webhook approver's writer of apply review documents
    (`permissions.webhook.QuestionDocuments`)."""

    async def document(
        self, q: ApprovalQuestion, answer_url: str, expires_at: float
    ) -> bytes | None:
        """The review document for an apply review (None for any other question).
        Raises RenderError when the change set cannot be shown: not offered here."""
        if not isinstance(q, ApplyReview):
            return None
        view = await asyncio.to_thread(render_change_set, q.change_set, q.content)
        return review_document(q, view, answer_url, expires_at)


def diff_text(view: ChangeSetView) -> str:
    """The document's `diff`: the review's text, or its summary when that is too long."""
    text = view.text()
    if len(text) <= MAX_DIFF_CHARS:
        return text
    return view.summary_text() + (
        f"\n[the diff ({len(text)} characters) is longer than a review document carries "
        f"({MAX_DIFF_CHARS}); the run's terminal or web page shows it]\n"
    )
