"""The runner's stdlib wire documents and the host's pydantic wire models agree:
the same field names on both sides, what the runner's encoders build (at and past
every size limit) is accepted by the host's strict models, and what the host
serves (spec, permission and task answers, errors) decodes in the runner; the
runner's copy of a permission answer's words is the host's one definition."""

from __future__ import annotations

from typing import Any, get_args, get_type_hints

import pytest
from pydantic import BaseModel

from orchestrator import behavior
from orchestrator.broker import wire_models
from sandbox_tools import wire, wire_answers

SENT_BY_THE_RUNNER: list[tuple[Any, type[BaseModel]]] = [
    (wire.PermissionRequest, wire_models.PermissionRequest),
    (wire.EventRequest, wire_models.EventRequest),
    (wire.EventBatch, wire_models.EventBatch),
    (wire.TranscriptCheckpoint, wire_models.TranscriptCheckpoint),
    (wire.ResultRequest, wire_models.ResultRequest),
    (wire.DelegateRequest, wire_models.DelegateRequest),
]


@pytest.mark.parametrize(("sent", "model"), SENT_BY_THE_RUNNER, ids=lambda x: x.__name__)
def test_runner_documents_and_host_models_name_the_same_fields(
    sent: Any, model: type[BaseModel]
) -> None:
    assert set(get_type_hints(sent)) == set(model.model_fields)
    required = {n for n, f in model.model_fields.items() if f.is_required()}
    assert required <= sent.__required_keys__  # the runner always sends what the host needs


def test_the_runners_answer_words_are_the_hosts() -> None:
    # The contract may not import the host, so it spells allow/deny out again; this
    # holds the copy to `orchestrator.behavior`, so the two cannot drift.
    assert get_args(wire_answers.FinalBehavior) == get_args(behavior.FinalBehavior)
    assert wire_models.PermissionResponse.model_fields["behavior"].annotation == (
        behavior.FinalBehavior
    )


def test_encoded_documents_are_accepted_by_the_host() -> None:
    long = "x" * (wire.MAX_RESULT_CHARS + 10)
    accepted = [
        (wire_models.PermissionRequest, wire.permission_request("toolu_1", "Bash", {"c": 1})),
        (wire_models.DelegateRequest, wire.delegate_request("toolu_2", {"prompt": "p"})),
        (wire_models.TranscriptCheckpoint, wire.transcript_checkpoint([{"role": "user"}], 3)),
        (wire_models.ResultRequest, wire.result_request("completed", "done")),
        # over-long text is clipped (with a note) by the encoder, not refused by the host
        (wire_models.ResultRequest, wire.result_request("failed", long, long)),
        (wire_models.EventRequest, wire.event_request("log", detail=long)),
        (
            wire_models.EventRequest,
            wire.event_request("tool_finished", "B" * 500, "t" * 500, "exit 1", is_error=True),
        ),
        (
            wire_models.EventBatch,
            wire.event_batch(
                [wire.event_request("turn_finished", detail="turn 1")] * wire.MAX_EVENTS_PER_BATCH
            ),
        ),
    ]
    for model, doc in accepted:
        parsed = model.model_validate(doc)
        assert set(parsed.model_dump()) == set(doc)
    clipped = wire_models.ResultRequest.model_validate(wire.result_request("failed", long, long))
    assert clipped.text.endswith(f"[truncated to {wire.MAX_RESULT_CHARS} characters]")


def test_the_host_refuses_what_the_runner_never_sends() -> None:
    with pytest.raises(ValueError):
        wire_models.EventBatch.model_validate(
            wire.event_batch([wire.event_request("log")] * (wire.MAX_EVENTS_PER_BATCH + 1))
        )
    with pytest.raises(ValueError):
        wire_models.PermissionRequest.model_validate(
            {**wire.permission_request("t", "Bash", {}), "extra": 1}
        )


def test_the_spec_the_host_serves_decodes_in_the_runner() -> None:
    spec = wire_models.TaskSpec(
        task_id="sa_1",
        trace_id="tr",
        agent_type="bash",
        model="m",
        system_prompt="s",
        prompt="p",
        tools=["Bash", "Task"],
        max_turns=4,
        history=[{"role": "user", "content": "earlier"}],
        bash_timeout_s=7,
    )
    decoded = wire_answers.TaskSpec.from_json(spec.model_dump(mode="json"))
    for name in wire_answers.TaskSpec._fields:
        assert name in wire_models.TaskSpec.model_fields
        assert getattr(decoded, name) == getattr(spec, name) or (
            list(getattr(decoded, name)) == getattr(spec, name)
        )
    # The runner's defaults are the host's.
    minimal = spec.model_dump(mode="json", exclude={"history", "max_tokens", "bash_timeout_s"})
    runner_side = wire_answers.TaskSpec.from_json(minimal)
    host_side = wire_models.TaskSpec.model_validate(minimal)
    assert (runner_side.max_tokens, runner_side.bash_timeout_s, runner_side.history) == (
        host_side.max_tokens,
        host_side.bash_timeout_s,
        tuple(host_side.history),
    )


def test_answers_the_host_serves_decode_in_the_runner() -> None:
    allow = wire_models.PermissionResponse(behavior="allow", updated_input={"command": "ls"})
    assert wire_answers.PermissionResponse.from_json(allow.model_dump(mode="json")) == (
        wire_answers.PermissionResponse(behavior="allow", updated_input={"command": "ls"})
    )
    deny = wire_models.PermissionResponse(behavior="deny", reason="no")
    assert wire_answers.PermissionResponse.from_json(deny.model_dump(mode="json")).reason == "no"
    answer = wire_models.DelegateResponse(text="child said hi", is_error=True)
    assert wire_answers.DelegateResponse.from_json(answer.model_dump()) == wire_answers.DelegateResponse(
        "child said hi", True
    )
    body = wire.error_body("rate_limit_error", "slow down")
    assert wire_models.ErrorBody.model_validate(body).error.message == "slow down"
    assert wire.error_message(body) == "slow down"
    assert wire.error_message({"type": "message"}) is None


@pytest.mark.parametrize(
    "doc",
    [
        [],
        {"behavior": "maybe"},
        {"behavior": "allow", "updated_input": "rm -rf /"},
        {"behavior": True},
    ],
)
def test_malformed_answers_are_refused_by_the_runner(doc: object) -> None:
    with pytest.raises(wire_answers.WireFormatError):
        wire_answers.PermissionResponse.from_json(doc)
