"""An apply review on the page's side, without a browser: it is rendered once when
it arrives and its diff is served on its own (locally and to `warden ui` through
the run's socket); an answer must name the change set's hash (a stale or missing
one is refused and changes nothing), only yes or no are answers, and a yes is
bound to the hash. A review whose content is missing is not offered at all."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from orchestrator.apply import render
from orchestrator.apply.changeset import ApplyReview, ContentStore
from orchestrator.apply.render import RenderError
from orchestrator.web.approver import (
    AlreadyAnsweredError,
    AnswerRequest,
    StaleChangeSetError,
    UnknownQuestionError,
    WebApprover,
)
from orchestrator.web.link import RemoteQuestions, RunLink
from tests.json_shapes import arr, obj
from tests.review_fixtures import SCRIPT_NAME, hostile_review

RUN = "run_review"


async def _asked(approver: WebApprover, review: ApplyReview) -> asyncio.Task[object]:
    task: asyncio.Task[object] = asyncio.create_task(approver.approve(review))
    for _ in range(1000):
        if approver.pending():
            return task
        await asyncio.sleep(0.01)  # the rendering runs in a worker thread
    raise AssertionError("the review never reached the page")


async def test_the_answer_must_name_the_hash_on_offer(tmp_path: Path) -> None:
    review = hostile_review(ContentStore(tmp_path))
    sha, qid = review.change_set.sha256, review.question_id
    approver = WebApprover()
    task = await _asked(approver, review)
    (first,) = arr(approver.state(RUN)["open"])
    shown = obj(first)
    assert shown["kind"] == "apply_review" and shown["sha256"] == sha
    assert f"Change set {sha}" in str(shown["text"])
    for stale in ("", "0" * 64):
        with pytest.raises(StaleChangeSetError, match="another change set"):
            approver.answer(qid, AnswerRequest(choice="once", user="m", change_set=stale))
    for scope in ("session", "always"):
        with pytest.raises(ValueError, match=r"yes .* or no"):
            approver.answer(qid, AnswerRequest(choice=scope, user="m", change_set=sha))
    assert not task.done()
    answer = approver.answer(qid, AnswerRequest(choice="once", user="alice", change_set=sha))
    assert await task == answer and answer.bound_to == sha and answer.decided_by == "web:alice"
    with pytest.raises(AlreadyAnsweredError, match="web:alice"):
        approver.review_view(qid)


async def test_the_diff_is_served_locally_and_through_the_runs_socket(tmp_path: Path) -> None:
    review = hostile_review(ContentStore(tmp_path / "store"))
    (tmp_path / "runs" / RUN).mkdir(parents=True)
    approver = WebApprover()
    link = RunLink(approver, tmp_path, RUN)
    await link.start()
    try:
        task = await _asked(approver, review)
        local = approver.review_view(review.question_id)
        remote = await RemoteQuestions(tmp_path).review(RUN, review.question_id)
        assert remote == json.loads(json.dumps(local))
        assert remote["sha256"] == review.change_set.sha256
        assert SCRIPT_NAME in [obj(f)["path"] for f in arr(remote["files"])]
        with pytest.raises(UnknownQuestionError):
            await RemoteQuestions(tmp_path).review(RUN, "q_unknown")
        request = AnswerRequest(
            choice="deny", user="bob", reason="no", change_set=review.input_hash
        )
        assert await RemoteQuestions(tmp_path).answer(RUN, review.question_id, request) == "web:bob"
        assert (await task).behavior == "deny"  # type: ignore[attr-defined]
    finally:
        await link.close()


async def test_a_review_that_cannot_be_shown_is_not_offered(tmp_path: Path) -> None:
    store = ContentStore(tmp_path)
    review = hostile_review(store)
    for stored in tmp_path.glob("*/*"):
        stored.unlink()
    render._views.clear()  # not the rendering an earlier test kept of the same change set
    approver = WebApprover()
    with pytest.raises(RenderError, match="cannot be reviewed"):
        await asyncio.wait_for(approver.approve(review), 30)
    assert approver.pending() == []
