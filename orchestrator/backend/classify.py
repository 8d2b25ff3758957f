"""What a failed docker SDK call means: not found, conflict, transient, a dead engine
or a slow one.

The SDK raises `docker.errors.APIError` (with the HTTP status) when the engine answers
with an error, and lets `requests` exceptions through when it does not answer:
`requests.exceptions.ConnectionError` when the socket cannot be reached or the
connection breaks, `requests.exceptions.ReadTimeout` when the answer's head is late.
A late *body* is a `ConnectionError` wrapping urllib3's `ReadTimeoutError`: that is
how a container wait that outlives its timeout ends, since the engine sends the
wait's head at once and the body at the container's exit.

Import this module only where the SDK is in use: it imports `requests`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from docker.errors import APIError, NotFound
from requests.exceptions import ConnectionError as RequestsConnectionError
from requests.exceptions import ReadTimeout
from urllib3.exceptions import ReadTimeoutError

from orchestrator.backend.connect import ENGINE_FIX
from orchestrator.errors import EngineSlowError, EngineUnavailableError

PERMANENT_5XX = ("no such", "not running", "already in progress", "is dead")
"""Words in a 5xx message that make it final, not worth a retry."""
EXPLANATION_CHARS = 300
"""Most of an engine message shown; a longer one keeps its start (what failed) and
its end (the runtime's errno, e.g. `: no such file or directory: unknown`)."""


def status_code(exc: BaseException) -> int | None:
    """The HTTP status the engine answered with; None when it did not answer."""
    if isinstance(exc, NotFound):
        return 404  # also when the SDK raised it without a response (ImageNotFound)
    if isinstance(exc, APIError):
        return exc.status_code
    return None


def explain(exc: BaseException) -> str:
    """The engine's own message (first line, bounded), else the error's text."""
    text = _message(exc).strip()
    if not text:
        return type(exc).__name__
    line = text.splitlines()[0]
    if len(line) <= EXPLANATION_CHARS:
        return line
    tail = EXPLANATION_CHARS // 3
    return f"{line[: EXPLANATION_CHARS - tail - 5]} ... {line[-tail:]}"


def _message(exc: BaseException) -> str:
    return str((exc.explanation if isinstance(exc, APIError) else None) or exc)


def is_read_timeout(exc: BaseException) -> bool:
    """The engine took the request but did not answer (its head or its body) in time."""
    if isinstance(exc, ReadTimeout):
        return True
    return isinstance(exc, RequestsConnectionError) and any(
        isinstance(arg, ReadTimeoutError) for arg in exc.args
    )


def is_connection_error(exc: BaseException) -> bool:
    """The engine could not be reached, or the connection broke before an answer."""
    return isinstance(exc, RequestsConnectionError) and not is_read_timeout(exc)


def is_transient(exc: BaseException) -> bool:
    """Worth retrying an idempotent call: the engine is unreachable, late, or failed (5xx)."""
    if is_connection_error(exc) or is_read_timeout(exc):
        return True  # an overloaded engine answers late; idempotent calls may ask again
    code = status_code(exc)
    if code is None or code < 500:
        return False
    text = _message(exc).lower()  # all of it: a marker may sit where `explain` cuts
    return not any(marker in text for marker in PERMANENT_5XX)


def unavailable(exc: BaseException, operation: str | None = None) -> EngineUnavailableError | None:
    """The error to raise when `exc` means the engine is dead (cannot connect) or slow
    (connected, no answer in time); None for any other error. `operation` names the
    call and its timeout, e.g. "create (ENGINE_TIMEOUT_S = 60 s)"."""
    what = f"{operation}: " if operation else ""
    if is_connection_error(exc):
        return EngineUnavailableError(
            f"the Docker engine is not answering ({what}{explain(exc)}); {ENGINE_FIX}"
        )
    if is_read_timeout(exc):
        return EngineSlowError(
            f"the Docker engine is up but too slow: {what or 'a call '}got no answer in time, "
            f"even after retries ({explain(exc)}). It is overloaded: run fewer subagents at "
            "once (--max-concurrent), or retry later; `warden doctor` checks the engine"
        )
    return None


@contextlib.contextmanager
def engine_errors(operation: str | None = None) -> Iterator[None]:
    """A dead engine becomes one EngineUnavailableError that names the fix; a slow one
    an EngineSlowError that names the operation and its timeout."""
    try:
        yield
    except Exception as exc:
        error = unavailable(exc, operation)
        if error is not None:
            raise error from exc
        raise


@contextlib.contextmanager
def tolerate_gone() -> Iterator[None]:
    """404 (already removed) and 409 (not running / removal in progress) are fine."""
    try:
        yield
    except Exception as exc:
        code = status_code(exc)
        if code in (404, 409):
            return
        if code is not None and code >= 500 and not is_transient(exc):
            return  # engines before 20.10 answer "not running" with a 500
        raise
