"""The webhook approver's documents and signatures (version 1; docs/webhook.md).

warden POSTs a `QuestionDocument` to the receiver's URL; the receiver (or the person
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
from orchestrator.permissions.approvers import AnswerScope
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


class AnswerDocument(_Document):
    """A person's answer, POSTed (signed) to the question's `answer_url`."""

    type: Literal["warden.approval.answer"] = "warden.approval.answer"
    input_hash: str = Field(max_length=100)
    """The question's `input_hash`: the answer is bound to exactly that input."""
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
