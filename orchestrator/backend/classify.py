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
from orchestrator.engine import ENGINE_FIX
from orchestrator.errors import EngineUnavailableError

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


@contextlib.contextmanager
def engine_errors() -> Iterator[None]:
    """A dead engine becomes one EngineUnavailableError that names the fix."""
    try:
        yield
    except Exception as exc:
        if is_connection_error(exc):
            raise EngineUnavailableError(
                f"the Docker engine does not answer ({explain(exc)}); {ENGINE_FIX}"
            ) from exc
        if is_read_timeout(exc):
            raise EngineUnavailableError(
                f"the Docker engine is too slow to answer ({explain(exc)}); it may be "
                "overloaded: retry later, or check it with `warden doctor`"
            ) from exc
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
