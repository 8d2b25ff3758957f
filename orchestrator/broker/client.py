"""The orchestrator's one model client, built in the background.

`import anthropic` costs about a second of CPU here (thousands of modules, most of
them pydantic models). A run does not wait for it before it starts: its model client
is a `PendingClient`, which imports the SDK (and `upstream`, built on it) in a
background thread and builds the client there. Meanwhile the run loads its policy,
opens its store and starts its first sandboxes (their container starts run in the
engine, beside the import); the first model call awaits the client.

Nothing here imports the SDK at module level: `orchestrator.broker` and everything
that starts sandboxes import this module, never `upstream`, `streaming` or `retry`.

A process that ends while these threads still run waits for them first (`atexit`):
the interpreter's teardown stops a daemon thread where it next takes the interpreter
lock, and one stopped inside pydantic-core's compiled code (the SDK's import builds
its models there) aborts the whole process (SIGABRT, "FATAL: exception not
rethrown"). It did so in about one in ten `warden run`s that failed in their first
second (a missing --workspace), which then ended with 134 instead of their error's
exit code.
"""

from __future__ import annotations

import asyncio
import atexit
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING

from orchestrator import background_import
from orchestrator.broker.model_calls import Attempt
from orchestrator.errors import WardenError
from orchestrator.jsontypes import JSONValue

if TYPE_CHECKING:
    import anthropic
    from anthropic.types import Message, MessageParam, TextBlockParam, ToolParam

_started = threading.Lock()
_imported: Future[None] | None = None
_started_threads = threading.Lock()
_threads: list[threading.Thread] = []
"""The import thread and the client builders: joined before the interpreter's teardown."""
JOIN_AT_EXIT_S = 30.0
"""Longest wait at exit for each of them (the import takes about a second)."""


class ModelClientClosed(WardenError, RuntimeError):
    """The run ended before its model client was built; nothing may call it now."""


def import_in_background() -> Future[None]:
    """Start importing the model SDK in a background thread (once per process);
    the future is done when it is imported (or holds why it could not be)."""
    global _imported
    with _started:
        if _imported is None:
            _imported = Future()
            ended = background_import()  # counted now: the collector waits for it
            _start(
                threading.Thread(
                    target=_import_sdk,
                    args=(_imported, ended),
                    name="warden-model-sdk",
                    daemon=True,
                )
            )
        return _imported


def _start(thread: threading.Thread) -> None:
    with _started_threads:
        _threads[:] = [t for t in _threads if t.is_alive()]
        _threads.append(thread)
    thread.start()


@atexit.register
def _join_at_exit() -> None:
    with _started_threads:
        running = list(_threads)
    for thread in running:
        thread.join(JOIN_AT_EXIT_S)


def _import_sdk(done: Future[None], ended: Callable[[], None]) -> None:
    try:
        import anthropic  # noqa: F401  # the bulk, first: it needs nothing of warden's

        import orchestrator.broker.upstream  # noqa: F401
    except Exception as exc:
        done.set_exception(exc)
    else:
        done.set_result(None)
    finally:
        ended()


class PendingClient:
    """The run's `anthropic.AsyncAnthropic`, built in a background thread once the SDK
    is imported (`import_in_background`). `built()` awaits it; `messages.create`
    awaits it and calls the SDK's, so the parent's loop can use it as the client."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        max_retries: int,
        retry_total_s: float,
    ) -> None:
        self.max_retries = max_retries
        self._args = (base_url, api_key, retry_total_s)
        self._client: Future[anthropic.AsyncAnthropic] = Future()
        self._lock = threading.Lock()
        self._closed = False
        _start(threading.Thread(target=self._build, name="warden-model-client", daemon=True))

    def _build(self) -> None:
        try:
            import_in_background().result()
            from orchestrator.broker.upstream import model_client

            base_url, api_key, retry_total_s = self._args
            with self._lock:  # either close() sees the client, or it is never built
                if self._closed:
                    raise ModelClientClosed("the run ended before its model client was built")
                client = model_client(
                    base_url, api_key, max_retries=self.max_retries, retry_total_s=retry_total_s
                )
                self._client.set_result(client)
        except Exception as exc:
            self._client.set_exception(exc)

    async def built(self) -> anthropic.AsyncAnthropic:
        """The client, once the SDK is imported; raises what stopped its import."""
        if self._client.done():
            return self._client.result()
        return await asyncio.wrap_future(self._client)

    @property
    def messages(self) -> PendingMessages:
        return PendingMessages(self)

    async def close(self) -> None:
        """Close the client if it was built; if not, it never will be."""
        with self._lock:
            self._closed = True
            built = self._client.done() and self._client.exception() is None
        if built:
            await self._client.result().close()


class PendingMessages:
    """`messages.create` of a `PendingClient`: the SDK's, once the client is built."""

    def __init__(self, pending: PendingClient) -> None:
        self._pending = pending

    async def create(
        self,
        *,
        model: str,
        max_tokens: int,
        system: list[TextBlockParam],
        messages: list[MessageParam],
        tools: list[ToolParam],
    ) -> Message:
        client = await self._pending.built()
        return await client.messages.create(
            model=model, max_tokens=max_tokens, system=system, messages=messages, tools=tools
        )


@dataclass(frozen=True)
class Upstream:
    """Where model calls go. Shared by every broker of one orchestrator."""

    client: anthropic.AsyncAnthropic | PendingClient
    """The SDK client, or the run's, still being built (`sdk` awaits it)."""
    on_attempt: Callable[[dict[str, JSONValue], Attempt], None] | None = None
    """Called with (request body, attempt) for each HTTP attempt after a call ends
    (tracing)."""
    stream: bool = True
    """Ask the API with `stream: true` (`streaming`); False sends plain requests."""

    async def sdk(self) -> anthropic.AsyncAnthropic:
        """The SDK client, once it is built (its SDK, and `upstream`, imported)."""
        if isinstance(self.client, PendingClient):
            return await self.client.built()
        return self.client
