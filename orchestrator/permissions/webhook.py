"""The webhook approver: each question is POSTed, signed, to a receiver you run (a chat
bot, a ticket queue, a pager); the answer comes back, signed the same way, on an
answer URL warden serves (loopback by default). Documents and signatures are in
`webhook_protocol`; the receiving side is shown in docs/webhook.md.

- Delivery is retried with jittered backoff (tenacity) on connection errors, 408,
  429 and 5xx, until the question's deadline; a redelivered question carries the
  same `question_id`, so a receiver drops duplicates by it.
- The first valid answer wins; a repeated or late answer changes nothing (200,
  `duplicate`), one that contradicts it is refused (409) and changes nothing either.
- A question that is not a tool call's (an apply review) is POSTed as the document
  its `QuestionDocuments` writes (`apply.review_document`: the change set and its
  diff); its answer is allow or deny (scope `once`) and must echo the question's
  `input_hash` (the change set's sha256); a yes is bound to that hash.
- No answer by the deadline (`timeout_s`, default five minutes) is a deny saying so.
  A receiver that cannot be reached (or refuses the question) by then makes this
  channel fail: alone, the question is denied with that reason; beside the terminal
  or the page, the person there can still answer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web
from pydantic import ValidationError

from orchestrator.errors import WardenError
from orchestrator.permissions.approvers import ApprovalAnswer, ApprovalQuestion
from orchestrator.permissions.webhook_protocol import (
    QUESTION_ID_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    AnswerDocument,
    QuestionDocument,
    WithdrawnDocument,
    chain_of,
    signature_problem,
    signed_headers,
)

if TYPE_CHECKING:
    import httpx2

log = logging.getLogger(__name__)

MAX_ANSWER_BYTES = 64 * 1024
"""Largest answer body the answer URL reads."""
REQUEST_TIMEOUT_S = 10.0
"""One delivery attempt's connect and read time."""
RETRY_FIRST_S = 0.5
"""First pause between delivery attempts; it doubles (with jitter) up to RETRY_MAX_S."""
RETRY_MAX_S = 30.0
"""Longest pause between delivery attempts."""
WITHDRAW_ATTEMPTS = 3
"""Attempts to tell the receiver a question was answered elsewhere."""
REMEMBERED_ANSWERS = 10_000
"""Answered question ids kept, so a duplicate answer is recognised as one."""
MAX_ERROR_BODY_CHARS = 200
"""Longest part of a receiver's error body quoted in a reason."""
RETRYABLE_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
ANSWER_PATH = "/v1/answers/{question_id}"


class WebhookDeliveryError(WardenError, ConnectionError):
    """The receiver could not be reached, or refused the question."""


class _Retryable(Exception):
    """One delivery attempt failed in a way worth another try."""


@dataclass
class _Waiting:
    question: ApprovalQuestion
    answer: asyncio.Future[ApprovalAnswer]
    expires_at: float
    own_document: bool = False
    """Sent as its `QuestionDocuments` wrote it (an apply review): answered allow or
    deny only, and a yes is bound to its `input_hash`."""


class QuestionDocuments(Protocol):
    """Writes the document of a question that is not a tool call's (an apply review:
    `apply.review_document.ReviewDocuments`); `permissions` cannot know such questions."""

    async def document(
        self, q: ApprovalQuestion, answer_url: str, expires_at: float
    ) -> bytes | None:
        """The body to POST for `q`, or None: `q` is a tool call's question."""
        ...


@dataclass
class _Answered:
    """What became of answered questions (bounded), for duplicate answers."""

    by_id: dict[str, tuple[str, str, str]] = field(default_factory=dict)

    def add(self, question_id: str, behavior: str, scope: str, decided_by: str) -> None:
        if len(self.by_id) >= REMEMBERED_ANSWERS:
            self.by_id.pop(next(iter(self.by_id)))
        self.by_id[question_id] = (behavior, scope, decided_by)


class WebhookApprover:
    """An approval channel that asks a webhook receiver. Use as an async context
    manager: it serves the answer URL while it is open."""

    def __init__(
        self,
        url: str,
        *,
        secret: bytes,
        timeout_s: float,
        listen: str = "127.0.0.1:0",
        callback_url: str | None = None,
        client: httpx2.AsyncClient | None = None,
        documents: QuestionDocuments | None = None,
    ) -> None:
        if not secret:
            raise WardenError("a webhook approver needs a shared secret: set WARDEN_WEBHOOK_SECRET")
        self.url = url
        self.name = f"webhook {url}"
        self._secret = secret
        self._timeout_s = timeout_s
        self._listen = listen
        self._callback_base = callback_url.rstrip("/") if callback_url else None
        self._client = client
        self._own_client = client is None
        self._documents = documents
        self._runner: web.AppRunner | None = None
        self._waiting: dict[str, _Waiting] = {}
        self._answered = _Answered()
        self.answer_base = ""
        """The answer URL's base (scheme, host, port), once open."""

    async def __aenter__(self) -> WebhookApprover:
        import httpx2

        if self._client is None:
            self._client = httpx2.AsyncClient(timeout=httpx2.Timeout(REQUEST_TIMEOUT_S))
        app = web.Application(client_max_size=MAX_ANSWER_BYTES)
        app.router.add_post(ANSWER_PATH, self._take_answer)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        host, _, port = self._listen.rpartition(":")
        site = web.TCPSite(self._runner, host or "127.0.0.1", int(port or 0))
        await site.start()
        bound_host, bound_port = self._runner.addresses[0][:2]
        self.answer_base = self._callback_base or f"http://{_url_host(bound_host)}:{bound_port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._own_client and self._client is not None:
            await self._client.aclose()

    async def approve(self, q: ApprovalQuestion) -> ApprovalAnswer:
        loop = asyncio.get_running_loop()
        started = time.time()
        expires_at = started + self._timeout_s
        waiting = _Waiting(q, loop.create_future(), expires_at)
        answer_url = self._answer_url(q.question_id)
        own = None  # a writer's failure (a review that cannot be shown) fails this channel
        if self._documents is not None:
            own = await self._documents.document(q, answer_url, expires_at)
        waiting.own_document = own is not None
        body = own if own is not None else _question_document(q, answer_url, expires_at)
        self._waiting[q.question_id] = waiting
        tried: list[str] = []  # each failed attempt's reason, as it happens
        delivery = asyncio.ensure_future(
            self._post(body, q.question_id, stop_at=expires_at, failures=tried)
        )
        try:
            either: set[asyncio.Future[Any]] = {waiting.answer, delivery}
            await asyncio.wait(
                either,
                timeout=self._timeout_s,
                return_when=asyncio.FIRST_COMPLETED,
            )
            failure = delivery.exception() if delivery.done() else None
            if not waiting.answer.done() and not isinstance(failure, WebhookDeliveryError):
                # Delivered, or retried without an acknowledgement (the receiver may
                # still have it): an answer is taken until the deadline.
                await asyncio.wait({waiting.answer}, timeout=max(0.0, expires_at - time.time()))
            if waiting.answer.done():
                return waiting.answer.result()
            if isinstance(failure, WebhookDeliveryError):
                raise failure
            if not delivery.done() or failure is not None:
                # At the deadline a retry may be waiting or under way: the reason is
                # still the last failure seen (the receiver down, refusing, …).
                why = failure or (
                    f"{tried[-1]}; still retrying at the deadline" if tried
                    else "the first attempt had not finished"
                )  # fmt: skip
                raise WebhookDeliveryError(
                    f"could not deliver the question to the webhook receiver {self.url} "
                    f"in {time.time() - started:.0f} s of trying ({why})"
                )
            answer = ApprovalAnswer(
                behavior="deny",
                reason=f"no answer from the webhook receiver {self.url} within "
                f"{self._timeout_s:g} s, so it is denied",
                channel="timeout",
            )
            self._answered.add(q.question_id, "deny", "once", answer.decided_by)
            return answer
        finally:
            delivery.cancel()
            self._waiting.pop(q.question_id, None)

    async def _post(
        self,
        body: bytes,
        question_id: str,
        *,
        stop_at: float | None = None,
        attempts: int | None = None,
        failures: list[str] | None = None,
    ) -> None:
        """POST `body` until the receiver takes it (2xx), retrying what may pass;
        each retried failure's reason is added to `failures`."""
        from tenacity import (
            AsyncRetrying,
            retry_if_exception_type,
            stop_after_attempt,
            stop_before_delay,
            wait_random_exponential,
        )

        assert self._client is not None
        stop = (
            stop_after_attempt(attempts)
            if attempts is not None
            else stop_before_delay(max(0.0, (stop_at or time.time()) - time.time()))
        )
        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type(_Retryable),
            wait=wait_random_exponential(multiplier=RETRY_FIRST_S, max=RETRY_MAX_S),
            stop=stop,
            # Given explicitly: tenacity's own choice looks for trio, which the CLI
            # refuses to import (`cli.ASYNCIO_ONLY`).
            sleep=asyncio.sleep,
            reraise=True,
        ):
            with attempt:
                try:
                    await self._post_once(body, question_id)
                except _Retryable as exc:
                    if failures is not None:
                        failures.append(str(exc))
                    raise

    async def _post_once(self, body: bytes, question_id: str) -> None:
        import httpx2

        assert self._client is not None
        headers = signed_headers(self._secret, body, time.time())
        headers[QUESTION_ID_HEADER] = question_id
        try:
            response = await self._client.post(self.url, content=body, headers=headers)
        except httpx2.TransportError as exc:
            raise _Retryable(f"last attempt: {type(exc).__name__}: {exc}") from exc
        if response.is_success:
            return
        problem = f"HTTP {response.status_code}: {response.text[:MAX_ERROR_BODY_CHARS]}"
        if response.status_code in RETRYABLE_STATUS:
            raise _Retryable(f"last attempt: {problem}")
        raise WebhookDeliveryError(
            f"the webhook receiver {self.url} refused the question ({problem}); "
            "check its URL and that it shares WARDEN_WEBHOOK_SECRET"
        )

    def withdraw(self, question_id: str, answer: ApprovalAnswer) -> asyncio.Future[None]:
        """Tell the receiver the question was answered elsewhere (best effort)."""
        self._answered.add(question_id, answer.behavior, answer.scope, answer.decided_by)
        doc = WithdrawnDocument(
            question_id=question_id, behavior=answer.behavior, decided_by=answer.decided_by
        )
        body = doc.model_dump_json().encode()

        async def tell() -> None:
            try:
                await self._post(body, question_id, attempts=WITHDRAW_ATTEMPTS)
            except Exception as exc:
                log.info("could not tell %s that %s was answered: %s", self.url, question_id, exc)

        return asyncio.ensure_future(tell())

    def _answer_url(self, question_id: str) -> str:
        return self.answer_base + ANSWER_PATH.format(question_id=question_id)

    async def _take_answer(self, request: web.Request) -> web.Response:
        body = await request.read()
        problem = signature_problem(
            self._secret,
            request.headers.get(TIMESTAMP_HEADER),
            request.headers.get(SIGNATURE_HEADER),
            body,
            time.time(),
        )
        if problem:
            return _reply(401, "bad_signature", problem)
        try:
            doc = AnswerDocument.model_validate_json(body)
        except ValidationError as exc:
            return _reply(400, "invalid", f"not a version 1 answer document: {exc}"[:1000])
        if doc.question_id != request.match_info["question_id"]:
            return _reply(400, "invalid", "question_id differs from the answer URL's")
        done = self._answered.by_id.get(doc.question_id)
        if done is not None:
            if done[:2] == (doc.behavior, doc.scope):
                return _reply(200, "duplicate", f"already answered by {done[2]}")
            return _reply(409, "already_answered", f"already answered by {done[2]}: {done[0]}")
        waiting = self._waiting.get(doc.question_id)
        if waiting is None or waiting.answer.done():
            return _reply(404, "unknown", "no question with this id is waiting")
        q = waiting.question
        review = waiting.own_document
        if doc.input_hash != q.input_hash:
            what = "the change set's sha256 (a stale review?)" if review else "the question's"
            return _reply(400, "invalid", f"input_hash is not {what}")
        if review and doc.scope != "once":
            return _reply(400, "invalid", "a review is answered allow or deny, scope `once`")
        if doc.scope == "always" and not q.always_rule:
            return _reply(400, "invalid", "`always` is not offered for this question")
        answer = ApprovalAnswer(
            behavior=doc.behavior,
            scope=doc.scope if doc.behavior == "allow" else "once",
            reason=doc.reason,
            channel="webhook",
            person=doc.person,
            bound_to=q.input_hash if review and doc.behavior == "allow" else "",
        )
        self._answered.add(doc.question_id, doc.behavior, doc.scope, answer.decided_by)
        waiting.answer.set_result(answer)
        return _reply(200, "accepted", f"answered by {answer.decided_by}")


def _reply(status: int, outcome: str, detail: str) -> web.Response:
    return web.Response(
        status=status,
        text=json.dumps({"status": outcome, "detail": detail}),
        content_type="application/json",
    )


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _question_document(q: ApprovalQuestion, answer_url: str, expires_at: float) -> bytes:
    chain = chain_of(q)
    doc = QuestionDocument(
        question_id=q.question_id,
        run_id=q.run_id,
        task_id=q.task_id,
        agent_type=q.agent_type,
        description=q.description,
        chain=chain,
        tool_name=q.tool_name,
        tool_input=q.tool_input,
        input_hash=q.input_hash,
        asked_by=q.asked_by,
        reason=q.reason,
        scopes=["once", "session", "always"] if q.always_rule else ["once", "session"],
        always_rule=q.always_rule,
        answer_url=answer_url,
        expires_at=round(expires_at, 3),
    )
    return doc.model_dump_json().encode()
