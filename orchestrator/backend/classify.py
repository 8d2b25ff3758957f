"""What a failed engine call means, whichever transport made it.

`DockerBackend` runs on the docker SDK (`requests` under it, `docker.errors.APIError`)
or on the thin `engine_http` client (its own errors, with a `status_code`). These
predicates recognise both without importing the SDK: its exception classes are only
looked at when `requests` is already imported, since otherwise no SDK call can have
raised them.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from orchestrator.backend import engine_http
from orchestrator.backend.connect import ENGINE_FIX
from orchestrator.errors import EngineSlowError, EngineUnavailableError

PERMANENT_5XX = ("no such", "not running", "already in progress", "is dead")
"""Words in a 5xx message that make it final, not worth a retry."""
EXPLANATION_CHARS = 300


def _requests_exceptions() -> Any:
    requests = sys.modules.get("requests")
    return getattr(requests, "exceptions", None)


def status_code(exc: BaseException) -> int | None:
    """The HTTP status the engine answered with, if the error carries one."""
    code = getattr(exc, "status_code", None)
    if not isinstance(code, int):
        code = getattr(getattr(exc, "response", None), "status_code", None)
    if not isinstance(code, int):
        # The SDK's NotFound (and ImageNotFound) mean 404 even when built without a response.
        sdk_errors = getattr(sys.modules.get("docker"), "errors", None)
        if sdk_errors is not None and isinstance(exc, sdk_errors.NotFound):
            return 404
    return code if isinstance(code, int) else None


def explain(exc: BaseException) -> str:
    """The engine's own message (first line, bounded), else the error's text."""
    text = str(getattr(exc, "explanation", None) or exc).strip()
    return text.splitlines()[0][:EXPLANATION_CHARS] if text else type(exc).__name__


def is_read_timeout(exc: BaseException) -> bool:
    if isinstance(exc, engine_http.EngineReadTimeout):
        return True
    sdk = _requests_exceptions()
    if sdk is not None and isinstance(exc, sdk.ReadTimeout):
        return True
    # requests wraps urllib3's read timeout of a streamed call in a ConnectionError.
    return "Read timed out" in str(exc)


def is_connection_error(exc: BaseException) -> bool:
    if isinstance(exc, engine_http.EngineConnectionError):
        return True
    sdk = _requests_exceptions()
    return sdk is not None and isinstance(exc, sdk.ConnectionError) and not is_read_timeout(exc)


def is_transient(exc: BaseException) -> bool:
    """Worth retrying an idempotent call: the engine is unreachable, late, or failed (5xx)."""
    if is_connection_error(exc) or is_read_timeout(exc):
        return True  # an overloaded engine answers late; idempotent calls may ask again
    code = status_code(exc)
    if code is None or code < 500:
        return False
    return not any(marker in explain(exc).lower() for marker in PERMANENT_5XX)


def unavailable(exc: BaseException, operation: str | None = None) -> EngineUnavailableError | None:
    """The error to raise when `exc` means the engine is dead (cannot connect) or slow
    (connected, no answer in time); None for any other error. `operation` names the
    call and its timeout, e.g. "create (CREATE_TIMEOUT_S = 60 s)"."""
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
