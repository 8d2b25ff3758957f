"""An apply review as MCP elicitation, between the real `mcp` SDK server and client
(JSON-RPC over in-memory streams): the client is shown the change set's hash, each
file's summary and callouts and the diff, every name and line inert; its "apply"
value names the hash, so an accepted apply is bound to it; a decision naming any
other change set, a decline or a "do not apply" keep the change set aside, the
reason made inert."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mcp.types as types
import pytest
from mcp import Client
from mcp.server import Server, ServerRequestContext

from orchestrator.apply.changeset import ApplyReview, ContentStore
from orchestrator.mcp_server.elicit import (
    DO_NOT_APPLY,
    ElicitationApprover,
    ElicitChannel,
    apply_choice,
)
from tests.review_fixtures import BIDI_NAME, SCRIPT_LINE, hostile_review

Reply = Callable[[types.ElicitRequestFormParams], types.ElicitResult]


def _server(review: ApplyReview) -> Server[Any]:
    """A server whose one tool asks `review` through warden's elicitation channel."""
    channel = ElicitChannel()
    approver = ElicitationApprover(channel)

    async def call(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        request_id = ctx.request_id if ctx.request_id is not None else "?"
        channel.call_started(request_id, ctx.session)
        try:
            answer = await approver.approve(review)
        finally:
            channel.call_ended(request_id)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=answer.model_dump_json())]
        )

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[types.Tool(name="review", input_schema={"type": "object"})]
        )

    return Server("review-test", on_call_tool=call, on_list_tools=list_tools)


async def _ask(review: ApplyReview, reply: Reply) -> tuple[dict[str, Any], list[Any]]:
    shown: list[types.ElicitRequestFormParams] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        shown.append(params)
        return reply(params)

    async with Client(
        _server(review), mode="legacy", elicitation_callback=elicit,
        client_info=types.Implementation(name="review\x1b[2J-client", version="1"),
    ) as client:  # fmt: skip
        result = await client.call_tool("review", {})
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    answer: dict[str, Any] = json.loads(block.text)
    return answer, shown


async def test_an_accepted_apply_is_bound_to_the_hash_shown(tmp_path: Path) -> None:
    review = hostile_review(ContentStore(tmp_path))
    sha = review.change_set.sha256

    def apply_it(params: types.ElicitRequestFormParams) -> types.ElicitResult:
        choices = params.requested_schema["properties"]["decision"]["enum"]
        return types.ElicitResult(action="accept", content={"decision": choices[0]})

    answer, shown = await _ask(review, apply_it)
    assert answer["behavior"] == "allow" and answer["bound_to"] == sha
    assert answer["decided_by"] == "mcp:review\\x1b[2J-client"
    (params,) = shown
    assert params.requested_schema["properties"]["decision"]["enum"] == [
        apply_choice(sha),
        DO_NOT_APPLY,
    ]
    message = params.message
    assert f"Change set {sha}" in message
    assert "invoice\\u202etxt.exe" in message and BIDI_NAME not in message
    assert f"│+{SCRIPT_LINE}" in message and "\\x1b[2J" in message
    assert "\x1b" not in message and "\u202e" not in message
    assert "NEW EXECUTABLE BIT" in message and "absolute path" in message


@pytest.mark.parametrize(
    ("action", "content", "reason"),
    [
        ("accept", {"decision": apply_choice("0" * 64)}, "did not apply it (accept)"),
        ("accept", {"decision": DO_NOT_APPLY, "reason": "no \x1b[31mthanks"}, "no \\x1b[31mthanks"),
        ("decline", None, "did not apply it (decline)"),
        ("cancel", None, "did not apply it (cancel)"),
    ],
)
async def test_anything_but_this_change_sets_apply_keeps_it_aside(
    tmp_path: Path, action: str, content: dict[str, str] | None, reason: str
) -> None:
    review = hostile_review(ContentStore(tmp_path))
    answer, _ = await _ask(
        review,
        lambda params: types.ElicitResult(action=action, content=content),  # type: ignore[arg-type]
    )
    assert answer["behavior"] == "deny" and answer["bound_to"] == ""
    assert answer["reason"].endswith(reason)
