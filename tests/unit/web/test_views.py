"""What the page reads from the store: the task tree with what each task's events
say (tools used, what it does now, denials, questions, tokens and the share read
from the prompt cache), a task's events and transcript, and the audit with its
filters; every container string made visible (bidi, controls) and bounded."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import TaskNotFoundError
from orchestrator.jsontypes import JSONObject, JSONValue
from orchestrator.store import AuditRecord, Store, TaskRecord
from orchestrator.web import views
from tests.json_shapes import arr, obj, string

RUN, OTHER = "run_1", "run_2"


def _event(store: Store, task: str, kind: str, **data: JSONValue) -> None:
    store.append_event(RUN, task, kind, {"kind": kind, "task_id": task, "data": data})


def _audit(store: Store, tool: str, final: str, by: str, **extra: object) -> None:
    store.record_audit(
        AuditRecord(
            run_id=RUN, task_id="sa_child", agent_type="bash", tool_name=tool,
            input_hash="h", tool_input={"command": "x\u202e"}, decision="ask",
            final=final, decided_by=by, source="mode", **extra,  # type: ignore[arg-type]
        )
    )  # fmt: skip


def _by_id(tasks: JSONValue) -> dict[str, JSONObject]:
    """The page's task rows by task id."""
    return {string(obj(t)["task_id"]): obj(t) for t in arr(tasks)}


@pytest.fixture
def store(tmp_path: Path) -> Store:
    store = Store.open(tmp_path / "warden.db")
    for run in (RUN, OTHER):
        store.create_run(run, prompt="p", workspace="/w", model="m", pid=1)
    store.create_task(TaskRecord(task_id="sa_lead", run_id=RUN, agent_type="general-purpose",
                                 description="lead", prompt="p"))  # fmt: skip
    store.create_task(TaskRecord(task_id="sa_child", run_id=RUN, parent_id="sa_lead", depth=2,
                                 agent_type="bash", description="evil\u202e\x1b[2J", prompt="p"))  # fmt: skip
    store.create_task(TaskRecord(task_id="sa_other", run_id=OTHER, agent_type="bash", prompt="p"))
    return store


def test_the_tree_folds_in_what_the_events_say(store: Store) -> None:
    tree = views.TaskTree(RUN)
    _event(store, "sa_child", "task_running", event="tool_started", tool_name="Bash", detail="ls")
    _event(store, "sa_child", "approval_requested", tool_name="Bash")
    _event(store, "sa_child", "permission_denied", tool_name="Bash")
    first = _by_id(tree.refresh(store)["tasks"])
    assert first["sa_child"]["current"] == "Bash: ls"
    # Only the events after the last refresh are read; the counts go on from there.
    _event(store, "sa_child", "task_running", event="tool_finished", tool_name="Bash")
    _event(store, "sa_child", "task_running", event="tool_started", tool_name="Read", detail="a")
    usage: JSONObject = {"input_tokens": 10, "cache_read_input_tokens": 30, "output_tokens": 5}
    _event(store, "sa_child", "task_completed", status="completed", usage=usage)
    store.update_task("sa_child", tokens=45)
    _audit(store, "Bash", "deny", "web:alice")
    snap = tree.refresh(store)
    rows = _by_id(snap["tasks"])
    child = rows["sa_child"]
    assert child["tools"] == {"Bash": 1, "Read": 1} and child["current"] == ""
    assert (child["denials"], child["asked"], child["tokens"]) == (1, 1, 45)
    assert child["cache_share"] == 0.75 and child["parent_id"] == "sa_lead"
    assert child["description"] == "evil\\u202e\\x1b[2J"
    assert set(rows) == {"sa_lead", "sa_child"} and snap["audit_count"] == 1


def test_events_transcript_and_audit_of_a_task(store: Store) -> None:
    _event(store, "sa_child", "task_running", event="model_text", detail="hi \u202e there")
    events = views.task_events(store, RUN, "sa_child")
    assert events["earlier"] == 0 and "\\u202e" in str(events["events"])
    store.checkpoint_transcript(
        "sa_child",
        [
            {"role": "user", "content": "do it \x07"},
            {"role": "assistant", "content": [{"type": "tool_use", "name": "Bash", "input": {"command": "ls"}}]},
            {"role": "user", "content": [{"type": "tool_result", "content": "<b>x</b>"}]},
        ],
        1,
    )  # fmt: skip
    messages = views.transcript(store, RUN, "sa_child")["messages"]
    assert [obj(m)["parts"] for m in arr(messages)] == [
        ["do it \\x07"],
        ['[tool call Bash] {"command": "ls"}'],
        ["[tool result] <b>x</b>"],
    ]
    with pytest.raises(TaskNotFoundError):  # another run's task, asked for under this run
        views.task_events(store, RUN, "sa_other")
    with pytest.raises(TaskNotFoundError):
        views.transcript(store, RUN, "sa_other")

    _audit(store, "Bash", "allow", "terminal:bob")
    _audit(store, "Read", "deny", "web:alice", reason="not that file")
    everything = views.audit(store, RUN, {})
    assert (everything["total"], everything["matching"], everything["tools"]) == (
        2,
        2,
        ["Bash", "Read"],
    )
    decided_by = [obj(r)["decided_by"] for r in arr(everything["records"])]
    assert decided_by == ["web:alice", "terminal:bob"]
    assert views.audit(store, RUN, {"final": "deny"})["matching"] == 1
    assert views.audit(store, RUN, {"tool": "Bash", "final": "deny"})["matching"] == 0
    assert views.audit(store, RUN, {"text": "THAT FILE"})["matching"] == 1
    assert "\\u202e" in str(everything["records"])
    assert views.audit(store, OTHER, {})["total"] == 0
