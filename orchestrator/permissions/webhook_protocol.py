"""The webhook approver's documents and signatures (version 1; docs/webhook.md).

warden POSTs a `QuestionDocument` (a tool call) or a `ReviewDocument` (a subagent's
change set, with its diff, before it is applied) to the receiver's URL; the receiver (or the person
it asks) POSTs an `AnswerDocument` to the question's `answer_url`; when another
channel answers first, warden POSTs a `WithdrawnDocument`. Every body, both ways, is
signed: `Warden-Signature: sha256=HEX`, HEX = HMAC-SHA256(secret, TIMESTAMP + "." +
BODY), with `Warden-Timestamp: TIMESTAMP` (Unix seconds). A signature older or newer
than `MAX_SKEW_S` is refused, so a captured request cannot be replayed later, and an
answer changes nothing once its question is answered (idempotent by question id).
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.behavior import FinalBehavior
from orchestrator.jsontypes import JSONObject
from orchestrator.permissions.approvers import AnswerScope, ApprovalQuestion
from orchestrator.schema_docs import documented

VERSION = 1
"""The documents' version; a change that breaks receivers bumps it."""
SIGNATURE_HEADER = "Warden-Signature"
TIMESTAMP_HEADER = "Warden-Timestamp"
QUESTION_ID_HEADER = "Warden-Question-Id"
"""Also in the body; lets a receiver drop a redelivered question before parsing it."""
SIGNATURE_PREFIX = "sha256="
MAX_SKEW_S = 300
"""A signature whose timestamp is further than this from now is refused (replays)."""
MAX_PERSON_CHARS = 100
"""Longest name an answer may give for the person who answered."""
MAX_REASON_CHARS = 2000
"""Longest deny reason an answer may carry (the model reads it)."""


class _Document(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=documented)

    version: Literal[1] = 1
    """The protocol version (1)."""
    question_id: str = Field(max_length=100)
    """The question (`q_` and 16 hex digits); the idempotency key."""


class ChainLink(BaseModel):
    """One task of the asking chain, root side first, the asker last."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=documented)

    task_id: str
    agent_type: str
    description: str
    """Written by a model: untrusted text."""


def chain_of(q: ApprovalQuestion) -> list[ChainLink]:
    """The asking chain of `q` as documents carry it (a missing type or description
    is sent empty)."""
    return [
        ChainLink(
            task_id=task_id,
            agent_type=q.chain_agents[i] if i < len(q.chain_agents) else "",
            description=q.chain_descriptions[i] if i < len(q.chain_descriptions) else "",
        )
        for i, task_id in enumerate(q.chain)
    ]


class QuestionDocument(_Document):
    """A question for a person, POSTed to the webhook URL. Every string except the
    ids, `answer_url` and the rule may hold text from a container: show it as text."""

    type: Literal["warden.approval.question"] = "warden.approval.question"
    run_id: str
    task_id: str
    """The asking subagent."""
    agent_type: str
    description: str
    """The asking task's description (untrusted)."""
    chain: list[ChainLink]
    """The asking task's ancestors, root side first, ending with the asker."""
    tool_name: str
    tool_input: JSONObject
    """The exact input the call would run with (untrusted)."""
    input_hash: str
    """sha256 of the tool name and input; an answer must repeat it."""
    asked_by: str
    """The rule, hook or mode that asked."""
    reason: str
    """Why it asked."""
    scopes: list[AnswerScope]
    """The allow scopes this question accepts (`always` only when `always_rule` is set)."""
    always_rule: str = ""
    """The exact allow rule an `always` answer writes to the workspace settings."""
    answer_url: str
    """Where to POST the signed `AnswerDocument`."""
    expires_at: float
    """Unix time after which the question is denied and answers are refused."""


ChangeKindName = Literal["added", "modified", "removed", "mode_changed", "symlink", "submodule"]
EntryTypeName = Literal["file", "symlink", "submodule", "dir"]
"""What a path holds on one side ("dir": an empty directory, only as the old side)."""


class ChangeEntry(BaseModel):
    """One path of a change set. `path`, `link_target` and `old_link_target` are
    exactly what the subagent wrote (show them as text, never as markup);
    `path_shown` is the path made visible (control, bidi and invisible characters
    escaped), as warden's own diff shows it."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=documented)

    path: str
    """POSIX path relative to the workspace root (raw; a name that is not UTF-8
    arrives with lone surrogate escapes, `\\udcXX`)."""
    path_shown: str
    """The path made visible: what a person should read."""
    kind: ChangeKindName
    old_type: EntryTypeName | None = None
    """What the path held before (null: nothing)."""
    new_type: EntryTypeName | None = None
    """What it holds after (null: removed)."""
    old_sha256: str | None = None
    new_sha256: str | None = None
    """sha256 of the content a yes writes."""
    old_mode: int | None = None
    """Permission bits before (decimal here; `0o755` is 493)."""
    new_mode: int | None = None
    binary: bool = False
    old_size: int | None = None
    new_size: int | None = None
    old_link_target: str | None = None
    link_target: str | None = None
    """A symbolic link's target (raw text, never followed)."""
    old_commit: str | None = None
    new_commit: str | None = None
    hard_link: bool = False
    """The new file had more than one hard link in the subagent's copy (policy refuses it)."""
    stored: bool = True
    """False: the content was over the size cap and is not kept (it cannot be applied)."""
    notes: list[str] = []
    """What a reviewer must not miss: a new executable or set-id bit, a link that
    leaves the tree, a name that imitates another (warden's words, already inert)."""


class ChangeSetEntry(BaseModel):
    """The change set a review offers; its `sha256` covers every field of every change
    (and the content they name)."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=documented)

    sha256: str
    """The change set's hash: an answer echoes it as `input_hash`."""
    task_id: str
    agent: str
    base: str
    """The commit (or snapshot id) the subagent's working copy started from."""
    changes: list[ChangeEntry]


class ReviewDocument(_Document):
    """A subagent's change set, offered before it reaches the shared workspace; POSTed
    to the webhook URL. Answer it like a question (an `AnswerDocument`, scope `once`):
    `allow` applies exactly this change set, `deny` keeps it aside; the answer's
    `input_hash` must be `change_set.sha256`, else it is refused."""

    type: Literal["warden.apply.review"] = "warden.apply.review"
    run_id: str
    task_id: str
    """The subagent whose changes these are."""
    agent_type: str
    description: str
    """Its task description (untrusted)."""
    chain: list[ChainLink]
    change_set: ChangeSetEntry
    input_hash: str
    """`change_set.sha256`, under the name every answer echoes."""
    diff: str
    """The review as warden shows it on a terminal: a header naming the hash, then each
    file's summary, callouts and unified diff, every name and line made inert; long
    diffs are cut with the cut stated (the hashes bind the whole content)."""
    scopes: list[Literal["once"]] = ["once"]
    """A review is answered once: allow (apply) or deny."""
    answer_url: str
    expires_at: float


class AnswerDocument(_Document):
    """A person's answer, POSTed (signed) to the question's `answer_url`."""

    type: Literal["warden.approval.answer"] = "warden.approval.answer"
    input_hash: str = Field(max_length=100)
    """The question's `input_hash`: the answer is bound to exactly that input (for a
    review, the change set's sha256)."""
    behavior: FinalBehavior
    scope: AnswerScope = "once"
    """For an allow: this call only, this exact input for the rest of the run, or
    write the question's `always_rule`."""
    reason: str = Field(default="", max_length=MAX_REASON_CHARS)
    """For a deny: what the subagent's model is told."""
    person: str = Field(default="", max_length=MAX_PERSON_CHARS)
    """Who answered; the audit records `webhook:PERSON`."""


class WithdrawnDocument(_Document):
    """Sent to the webhook URL when another channel answered first (or time ran out)."""

    type: Literal["warden.approval.withdrawn"] = "warden.approval.withdrawn"
    behavior: FinalBehavior
    decided_by: str
    """Who answered: `terminal:alice`, `web:bob`, `timeout`, ..."""


DOCUMENTS: dict[str, type[BaseModel]] = {
    "webhook-question": QuestionDocument,
    "webhook-answer": AnswerDocument,
    "webhook-withdrawn": WithdrawnDocument,
    "webhook-review": ReviewDocument,
}
"""The webhook's documents by the name `warden schema` prints them under."""


def json_schema(name: str) -> JSONObject:
    """The JSON Schema (2020-12) of one webhook document."""
    schema: JSONObject = DOCUMENTS[name].model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema


def sign(secret: bytes, timestamp: str, body: bytes) -> str:
    """The `Warden-Signature` value of `body` sent at `timestamp`."""
    mac = hmac.new(secret, timestamp.encode("ascii") + b"." + body, hashlib.sha256)
    return SIGNATURE_PREFIX + mac.hexdigest()


def signed_headers(secret: bytes, body: bytes, now: float) -> dict[str, str]:
    """Content type, timestamp and signature headers for `body`."""
    timestamp = str(int(now))
    return {
        "Content-Type": "application/json",
        TIMESTAMP_HEADER: timestamp,
        SIGNATURE_HEADER: sign(secret, timestamp, body),
    }


def signature_problem(
    secret: bytes, timestamp: str | None, signature: str | None, body: bytes, now: float
) -> str | None:
    """Why a signed request is refused (None: it is good)."""
    if not timestamp or not signature:
        return f"missing {TIMESTAMP_HEADER} or {SIGNATURE_HEADER} header"
    try:
        sent = int(timestamp)
    except ValueError:
        return f"{TIMESTAMP_HEADER} is not Unix seconds"
    if abs(now - sent) > MAX_SKEW_S:
        return f"{TIMESTAMP_HEADER} is more than {MAX_SKEW_S} s from warden's clock"
    if not hmac.compare_digest(sign(secret, timestamp, body), signature.strip()):
        return "the signature does not match (wrong secret, or the body was changed)"
    return None
