"""`warden mcp`'s small pieces: an elicitation reply becomes an approval answer only
as the person meant it (anything but an accepted allow denies, the reason is made
inert), the HTTP secret refuses a request without the exact bearer token before the
MCP layer sees it, and a relayed event line cannot carry control characters."""

from __future__ import annotations

from typing import Any

import mcp.types as types
import pytest

from orchestrator.mcp_server.elicit import ALLOW, ALLOW_SESSION, DENY, answer_from
from orchestrator.mcp_server.server import RequireSecret, describe
from orchestrator.results.models import Event


def reply(action: str, **content: Any) -> types.ElicitResult:
    return types.ElicitResult(action=action, content=content or None)  # type: ignore[arg-type]


def test_an_accepted_allow_allows_once_or_for_the_session() -> None:
    once = answer_from(reply("accept", decision=ALLOW), "claude-code")
    session = answer_from(reply("accept", decision=ALLOW_SESSION), "claude-code")
    assert (once.behavior, once.scope, once.decided_by) == ("allow", "once", "mcp:claude-code")
    assert (session.behavior, session.scope) == ("allow", "session")


@pytest.mark.parametrize(
    "answer",
    [
        reply("accept", decision=DENY),
        reply("accept", decision="ALLOW"),  # not one of the offered values
        reply("accept"),
        reply("decline", decision=ALLOW),
        reply("cancel"),
    ],
)
def test_anything_else_denies(answer: types.ElicitResult) -> None:
    assert answer_from(answer, "client").behavior == "deny"


def test_a_deny_reason_reaches_the_subagent_inert() -> None:
    answer = answer_from(reply("accept", decision=DENY, reason="no\x1b[2J thanks"), "c")
    assert answer.reason == "no\\x1b[2J thanks"


async def _call(app: RequireSecret, headers: list[tuple[bytes, bytes]]) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app({"type": "http", "headers": headers}, receive, send)  # type: ignore[arg-type]
    return sent


async def test_the_secret_is_required_exactly() -> None:
    reached: list[bool] = []

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        reached.append(True)

    app = RequireSecret(inner, "s3cret-s3cret-s3cret")
    for headers in (
        [],
        [(b"authorization", b"Bearer wrong")],
        [(b"authorization", b"s3cret-s3cret-s3cret")],
    ):
        sent = await _call(app, headers)
        assert sent[0]["status"] == 401 and not reached
    await _call(app, [(b"authorization", b"Bearer s3cret-s3cret-s3cret")])
    assert reached == [True]


def test_an_event_line_is_plain_text() -> None:
    event = Event(
        kind="task_running",
        run_id="run_x",
        task_id="sa_1",
        agent_type="bash",
        data={"event": {"kind": "tool_started", "tool_name": "Bash\x1b]0;pwned\x07"}},
    )
    line = describe(event)
    assert line.startswith("sa_1 (bash) task_running: ")
    assert "\x1b" not in line and "\x07" not in line and "tool_started" in line
