"""The webhook approver against the documented receiver (docs/webhook_receiver.py), both
on 127.0.0.1: questions go out signed and answers come back signed; a bad signature,
a duplicate or contradicting answer changes nothing; silence and a receiver that is
down deny, saying why; a redelivered question is answered once."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from orchestrator.jsontypes import JSONObject, input_hash
from orchestrator.permissions.approval_hub import ApproverHub
from orchestrator.permissions.approvers import ApprovalAnswer, ApprovalQuestion
from orchestrator.permissions.webhook import WebhookApprover
from orchestrator.permissions.webhook_protocol import sign, signed_headers

RECEIVER = Path(__file__).resolve().parents[3] / "docs" / "webhook_receiver.py"
SECRET = "s3cret-shared-with-the-receiver"


def question(command: str = "make test", **extra: str) -> ApprovalQuestion:
    tool_input: JSONObject = {"command": command}
    return ApprovalQuestion(
        task_id="sa_child",
        agent_type="bash",
        description="run the tests",
        chain=("sa_lead", "sa_child"),
        chain_agents=("general-purpose", "bash"),
        chain_descriptions=("lead", "run the tests"),
        run_id="run_1",
        tool_name="Bash",
        tool_input=tool_input,
        input_hash=input_hash("Bash", tool_input),
        asked_by="mode: default",
        **extra,
    )


class Receiver:
    """docs/webhook_receiver.py in a subprocess; what it prints is collected."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(RECEIVER), "--port", "0", *args],
            env={"WARDEN_WEBHOOK_SECRET": SECRET, "PATH": "/usr/bin:/bin"},
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        first = self.process.stdout.readline()
        self.url = first.removeprefix("listening on ").strip()
        assert self.url.startswith("http://127.0.0.1:"), first
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._collect, daemon=True)
        self._reader.start()

    def _collect(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    async def wait_for(self, text: str, count: int = 1) -> None:
        deadline = time.monotonic() + 10
        while sum(text in line for line in self.lines) < count:
            assert time.monotonic() < deadline, (text, self.lines)
            await asyncio.sleep(0.02)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
        self._reader.join(timeout=10)
        assert self.process.stdout is not None
        self.process.stdout.close()


@pytest.fixture
def receivers() -> Iterator[list[Receiver]]:
    started: list[Receiver] = []
    yield started
    for receiver in started:
        receiver.stop()


def approver(url: str, timeout_s: float = 10) -> WebhookApprover:
    return WebhookApprover(url, secret=SECRET.encode(), timeout_s=timeout_s)


async def post_answer(url: str, doc: dict[str, object], secret: str = SECRET) -> httpx2.Response:
    body = json.dumps(doc).encode()
    async with httpx2.AsyncClient() as client:
        return await client.post(
            url, content=body, headers=signed_headers(secret.encode(), body, time.time())
        )


async def test_a_signed_question_gets_a_signed_answer(receivers: list[Receiver]) -> None:
    receivers.append(receiver := Receiver("--allow", "make test", "--person", "alice"))
    async with approver(receiver.url) as hook:
        answer = await hook.approve(question("make test"))
        denied = await hook.approve(question("rm -rf /"))
    assert (answer.behavior, answer.decided_by) == ("allow", "webhook:alice")
    assert (denied.behavior, denied.decided_by) == ("deny", "webhook:alice")
    assert denied.reason == "alice allows only: make test"
    # The receiver checked warden's signature before it answered (it refuses others).
    await receiver.wait_for("answered", 2)
    assert not any("bad signature" in line for line in receiver.lines)
    assert sum(line.startswith("answered q_") and "-> 200" in line for line in receiver.lines) == 2


async def test_the_question_document_carries_what_a_person_needs(
    receivers: list[Receiver],
) -> None:
    """What the receiver is sent, checked by a second, recording receiver."""
    seen: list[tuple[dict[str, str], bytes]] = []
    from aiohttp import web

    async def record(request: web.Request) -> web.Response:
        seen.append((dict(request.headers), await request.read()))
        return web.Response(status=202)

    app = web.Application()
    app.router.add_post("/hook", record)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        q = question("make deploy", always_rule="Bash(make deploy)", always_file="/w/x.json")
        async with approver(f"http://127.0.0.1:{port}/hook", timeout_s=0.5) as hook:
            answer = await hook.approve(q)
    finally:
        await runner.cleanup()
    headers, body = seen[0]
    assert headers["Warden-Signature"] == sign(SECRET.encode(), headers["Warden-Timestamp"], body)
    assert headers["Warden-Question-Id"] == q.question_id
    doc = json.loads(body)
    assert doc["type"] == "warden.approval.question" and doc["version"] == 1
    assert doc["tool_input"] == {"command": "make deploy"} and doc["input_hash"] == q.input_hash
    assert doc["chain"] == [
        {"task_id": "sa_lead", "agent_type": "general-purpose", "description": "lead"},
        {"task_id": "sa_child", "agent_type": "bash", "description": "run the tests"},
    ]
    assert doc["scopes"] == ["once", "session", "always"]
    assert doc["always_rule"] == "Bash(make deploy)"
    assert doc["answer_url"].endswith(f"/v1/answers/{q.question_id}")
    # Nobody answered within the timeout: a deny that says so.
    assert (answer.behavior, answer.decided_by) == ("deny", "timeout")
    assert f"no answer from the webhook receiver http://127.0.0.1:{port}/hook within 0.5 s" in (
        answer.reason
    )


async def test_bad_signatures_are_refused_and_a_duplicate_answer_changes_nothing(
    receivers: list[Receiver],
) -> None:
    receivers.append(receiver := Receiver("--silent"))
    q = question("make test")
    async with approver(receiver.url) as hook:
        asking = asyncio.create_task(hook.approve(q))
        await receiver.wait_for(f"question {q.question_id} (new)")
        url = f"{hook.answer_base}/v1/answers/{q.question_id}"
        allow = {
            "type": "warden.approval.answer",
            "version": 1,
            "question_id": q.question_id,
            "input_hash": q.input_hash,
            "behavior": "allow",
            "person": "mallory",
        }
        forged = await post_answer(url, allow, secret="not-the-secret")
        assert forged.status_code == 401 and "signature does not match" in forged.text
        body = json.dumps(allow).encode()
        stale = signed_headers(SECRET.encode(), body, time.time() - 3600)
        async with httpx2.AsyncClient() as client:
            replayed = await client.post(url, content=body, headers=stale)
        assert replayed.status_code == 401 and "from warden's clock" in replayed.text
        other_input = await post_answer(url, {**allow, "input_hash": "0" * 64})
        assert other_input.status_code == 400
        assert not asking.done()

        deny = {**allow, "behavior": "deny", "reason": "not today", "person": "bob"}
        first = await post_answer(url, deny)
        again = await post_answer(url, deny)
        contradicting = await post_answer(url, {**allow, "person": "eve"})
        answer = await asking
    assert first.status_code == 200 and first.json()["status"] == "accepted"
    assert again.status_code == 200 and again.json()["status"] == "duplicate"
    assert contradicting.status_code == 409
    assert (answer.behavior, answer.reason, answer.decided_by) == (
        "deny",
        "not today",
        "webhook:bob",
    )


async def test_a_receiver_briefly_down_gets_the_question_again_and_answers_it_once(
    receivers: list[Receiver],
) -> None:
    receivers.append(receiver := Receiver("--fail-first", "2", "--allow", "make test"))
    q = question("make test")
    async with approver(receiver.url) as hook:
        answer = await hook.approve(q)
    assert answer.behavior == "allow"
    await receiver.wait_for("answered")
    assert [line for line in receiver.lines if q.question_id in line] == [
        f'question {q.question_id} (new): Bash {{"command": "make test"}}',
        f'answered {q.question_id}: allow -> 200 {{"status": "accepted", '
        '"detail": "answered by webhook:webhook-bot"}',
    ]


async def test_a_receiver_that_is_down_denies_after_the_timeout_saying_why() -> None:
    # A port bound but never listened on: every connection to it is refused, and no
    # other process can take it meanwhile (a freed port could be, and answer).
    with socket.socket() as down:
        down.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{down.getsockname()[1]}/"
        started = time.monotonic()
        async with approver(url, timeout_s=1.5) as hook:
            answer = await ApproverHub([hook]).approve(question())
    assert time.monotonic() - started >= 1.4  # denied at the deadline, not before
    assert (answer.behavior, answer.decided_by) == ("deny", "no approver")
    assert f"could not deliver the question to the webhook receiver {url}" in answer.reason
    assert "ConnectError" in answer.reason


async def test_a_denial_at_the_deadline_names_the_last_failure_while_a_retry_is_under_way() -> (
    None
):
    """The first attempt is cut off (the receiver closes without answering), the retry
    hangs: at the deadline the delivery has not ended, and the reason is still what
    went wrong, not only that an attempt was under way (a loaded machine's case)."""
    hung: list[socket.socket] = []
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()

        def serve() -> None:
            first, _ = server.accept()
            first.close()  # no response: the client's attempt fails, and is retried
            with contextlib.suppress(OSError):
                held, _ = server.accept()  # read nothing, answer nothing
                hung.append(held)

        threading.Thread(target=serve, daemon=True).start()
        url = f"http://127.0.0.1:{server.getsockname()[1]}/"
        async with approver(url, timeout_s=2) as hook:
            answer = await ApproverHub([hook]).approve(question())
        for held in hung:
            held.close()
    assert (answer.behavior, answer.decided_by) == ("deny", "no approver")
    assert f"could not deliver the question to the webhook receiver {url}" in answer.reason
    # The cut-off attempt's error (ReadError or RemoteProtocolError, by timing).
    assert re.search(r"last attempt: \w+Error: .*; still retrying at the deadline", answer.reason)


async def test_the_receiver_hears_when_another_channel_answered(
    receivers: list[Receiver],
) -> None:
    receivers.append(receiver := Receiver("--silent"))

    class Terminal:
        name = "terminal"

        async def approve(self, q: ApprovalQuestion) -> ApprovalAnswer:
            await receiver.wait_for(f"question {q.question_id} (new)")
            return ApprovalAnswer(behavior="allow", channel="terminal", person="alice")

    q = question()
    async with approver(receiver.url) as hook:
        hub = ApproverHub([hook, Terminal()])
        assert (await hub.approve(q)).decided_by == "terminal:alice"
        await hub.aclose()
        late = await post_answer(
            f"{hook.answer_base}/v1/answers/{q.question_id}",
            {"question_id": q.question_id, "input_hash": q.input_hash, "behavior": "deny"},
        )
    await receiver.wait_for(f"withdrawn {q.question_id}: allow by terminal:alice")
    assert late.status_code == 409 and "terminal:alice" in late.text


def test_approvers_and_the_webhook_settings_come_from_the_environment() -> None:
    from orchestrator.config import Settings
    from orchestrator.errors import ConfigError

    settings = Settings.from_env(
        {
            "WARDEN_APPROVERS": "terminal, webhook:https://hooks.internal/warden",
            "WARDEN_WEBHOOK_SECRET": SECRET,
            "WARDEN_WEBHOOK_TIMEOUT_S": "45",
        }
    )
    assert settings.approvers == ("terminal", "webhook:https://hooks.internal/warden")
    assert settings.webhook_timeout_s == 45 and settings.webhook_listen == "127.0.0.1:0"
    assert settings.webhook_secret is not None and SECRET not in repr(settings)
    with pytest.raises(ConfigError, match="the webhook URL must start with http"):
        Settings.from_env({"WARDEN_APPROVERS": "webhook:hooks.internal"})


@pytest.mark.parametrize("name", ["webhook-question", "webhook-answer", "webhook-withdrawn"])
def test_the_published_webhook_schemas_match_the_documents(name: str) -> None:
    from orchestrator.permissions.webhook_protocol import json_schema

    published = json.loads((RECEIVER.parent / "schema" / f"{name}.schema.json").read_text())
    assert published == json_schema(name)


async def test_what_warden_sends_and_the_example_answers_fit_the_published_schemas(
    receivers: list[Receiver],
) -> None:
    """The documents on the wire, both ways, validated against docs/schema."""
    import jsonschema
    from aiohttp import web

    def schema(name: str) -> dict[str, object]:
        loaded: dict[str, object] = json.loads(
            (RECEIVER.parent / "schema" / f"{name}.schema.json").read_text()
        )
        return loaded

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
        q = question()
        async with approver(f"http://127.0.0.1:{runner.addresses[0][1]}/hook") as hook:
            asking = asyncio.create_task(ApproverHub([hook]).approve(q))
            while not bodies:
                await asyncio.sleep(0.01)
            answer = {
                "type": "warden.approval.answer",
                "version": 1,
                "question_id": q.question_id,
                "input_hash": q.input_hash,
                "behavior": "allow",
                "scope": "session",
                "person": "alice",
            }
            jsonschema.validate(answer, schema("webhook-answer"))
            url = json.loads(bodies[0])["answer_url"]
            assert (await post_answer(url, answer)).status_code == 200
            assert (await asking).scope == "session"
    finally:
        await runner.cleanup()
    jsonschema.validate(json.loads(bodies[0]), schema("webhook-question"))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**answer, "behaviour": "allow"}, schema("webhook-answer"))


def test_a_short_shared_secret_is_refused_with_the_fix() -> None:
    """A guessable secret lets anyone forge answers: one under 16 characters is refused,
    as WARDEN_MCP_TOKEN's is."""
    from orchestrator.config import MIN_SECRET_CHARS, Settings
    from orchestrator.errors import ConfigError

    with pytest.raises(ConfigError, match="shorter than 16 characters") as caught:
        Settings.from_env({"WARDEN_WEBHOOK_SECRET": "x" * (MIN_SECRET_CHARS - 1)})
    assert "secrets.token_urlsafe" in str(caught.value)
    long_enough = Settings.from_env({"WARDEN_WEBHOOK_SECRET": "x" * MIN_SECRET_CHARS})
    assert long_enough.webhook_secret is not None
