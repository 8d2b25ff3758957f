"""A change set is identified by the hash of everything in it (a yes binds to that),
an altered one is refused, and the content store hands back exactly the bytes it
was given or refuses."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from orchestrator.apply.changeset import (
    APPLY_TOOL,
    ApplyDecision,
    ApplyReview,
    ChangeSet,
    ContentMissingError,
    ContentStore,
    FileChange,
    PathReason,
)

SHA_A = "a" * 64


def change_set(*changes: FileChange) -> ChangeSet:
    return ChangeSet(run_id="r1", task_id="t1", agent="coder", base="abc", changes=changes)


def test_the_hash_covers_every_field_of_every_change() -> None:
    one = change_set(FileChange(path="a.txt", kind="added", new_sha256=SHA_A, new_mode=0o644))
    assert len(one.sha256) == 64
    assert one.sha256 == change_set(*one.changes).sha256
    exec_bit = change_set(FileChange(path="a.txt", kind="added", new_sha256=SHA_A, new_mode=0o755))
    renamed = change_set(FileChange(path="b.txt", kind="added", new_sha256=SHA_A, new_mode=0o644))
    link = change_set(FileChange(path="a.txt", kind="symlink", link_target="/etc/passwd"))
    other_link = change_set(FileChange(path="a.txt", kind="symlink", link_target="/etc/shadow"))
    assert len({one.sha256, exec_bit.sha256, renamed.sha256, link.sha256, other_link.sha256}) == 5


def test_an_altered_change_set_is_refused() -> None:
    one = change_set(FileChange(path="a.txt", kind="added", new_sha256=SHA_A))
    data = one.model_dump(mode="json")
    data["changes"][0]["path"] = "b.txt"
    with pytest.raises(ValidationError, match="altered"):
        ChangeSet.model_validate(data)
    assert ChangeSet.model_validate(one.model_dump(mode="json")) == one


def test_changes_are_one_per_path_in_order() -> None:
    a = FileChange(path="a", kind="removed")
    b = FileChange(path="b", kind="removed")
    with pytest.raises(ValidationError, match="sorted"):
        change_set(b, a)
    with pytest.raises(ValidationError, match="one per path"):
        change_set(a, a)


def test_the_hash_of_names_that_are_not_utf8() -> None:
    odd = os.fsdecode(b"caf\xe9.txt")  # a name a sandbox may write: not UTF-8
    one = change_set(FileChange(path=odd, kind="removed"))
    assert ChangeSet.model_validate(one.model_dump(mode="json")).sha256 == one.sha256


def test_content_store_round_trip_and_tamper(tmp_path: Path) -> None:
    store = ContentStore(tmp_path / "content")
    assert (tmp_path / "content").stat().st_mode & 0o777 == 0o700
    sha = store.put(b"hello\n")
    assert store.read(sha) == b"hello\n"
    (tmp_path / "content" / sha[:2] / sha).write_bytes(b"evil\n")
    with pytest.raises(ContentMissingError, match="altered"):
        store.read(sha)
    with pytest.raises(ContentMissingError, match="not in the store"):
        store.read("b" * 64)
    with pytest.raises(ContentMissingError, match="not a content hash"):
        store.read("../../etc/passwd")


def test_content_store_keeps_nothing_past_its_limit(tmp_path: Path) -> None:
    store = ContentStore(tmp_path / "content")
    src = tmp_path / "big"
    src.write_bytes(b"x" * 5000)
    fd = os.open(src, os.O_RDONLY)
    try:
        sha, size, stored = store.put_fd(fd, limit=4096)
    finally:
        os.close(fd)
    assert (size, stored) == (5000, False)
    assert not store.has(sha)
    fd = os.open(src, os.O_RDONLY)
    try:
        sha, size, stored = store.put_fd(fd, limit=5000)
    finally:
        os.close(fd)
    assert stored and store.read(sha) == b"x" * 5000


def test_an_apply_review_is_bound_to_the_change_set(tmp_path: Path) -> None:
    one = change_set(FileChange(path="a.txt", kind="added", new_sha256=SHA_A))
    review = ApplyReview.of(one, ContentStore(tmp_path), task_id="t1", agent_type="coder")
    assert review.tool_name == APPLY_TOOL
    assert review.input_hash == one.sha256
    assert review.tool_input["sha256"] == one.sha256
    assert "content" not in review.model_dump()
    with pytest.raises(ValidationError, match="bound"):
        ApplyReview(
            task_id="t1",
            agent_type="coder",
            tool_name=APPLY_TOOL,
            tool_input={},
            input_hash="0" * 64,
            asked_by="x",
            change_set=one,
            content=ContentStore(tmp_path),
        )


def test_the_parent_is_told_what_happened() -> None:
    decision = ApplyDecision(
        task_id="t1",
        change_set_sha256=SHA_A,
        outcome="rejected_by_policy",
        reasons=(PathReason(path=".git/config", reason="a protected path", rule=".git"),),
        decided_by="policy",
    )
    text = decision.for_parent()
    assert "rejected by policy" in text and ".git/config: a protected path" in text
