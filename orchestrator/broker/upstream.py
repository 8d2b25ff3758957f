"""The model endpoint: where a checked, budgeted request finally goes, with the
real API key (which exists only here, on the host).

This is the one place that talks to the model API; moving the anthropic SDK
from the runner to the broker (typed requests, the SDK's retries) replaces
`forward_messages` and nothing around it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from sandbox_tools import wire

log = logging.getLogger(__name__)

UPSTREAM_TIMEOUT_S = 600.0
"""Longest a single upstream model call may take."""
DEFAULT_ANTHROPIC_VERSION = "2023-06-01"
MAX_VERSION_HEADER_CHARS = 40
"""`anthropic-version` is passed upstream (bounded); `anthropic-beta` only as policy
allows (see `forwarding`); every other header, any key included, is dropped."""
RETURNED_HEADERS = (
    "retry-after",
    "request-id",
    "x-should-retry",
    "anthropic-ratelimit-requests-reset",
)
"""Upstream response headers passed back, so the in-container SDK retries correctly."""


@dataclass(frozen=True)
class Upstream:
    """Where model calls go. Shared by every broker of one orchestrator."""

    base_url: str
    api_key: str | None
    client: Any  # httpx2.AsyncClient; Any keeps the import lazy


@dataclass
class UpstreamFailures:
    """Consecutive failed upstream model calls of one subagent (reset by a success).

    Recorded on the host, so how a subagent's model call failed is told from what
    the API answered, not from what the sandbox reports."""

    count: int = 0
    status: int | None = None
    """The last failure's HTTP status; None when the endpoint did not answer."""
    payload: Any = None

    def observe(self, status: int | None, payload: Any) -> None:
        if status is not None and status < 400:
            self.count, self.status, self.payload = 0, None, None
            return
        self.count += 1
        self.status = status
        self.payload = payload


async def forward_messages(
    upstream: Upstream,
    body: dict[str, Any],
    betas: list[str],
    version: str | None,
    failures: UpstreamFailures | None = None,
) -> tuple[int, Any, dict[str, str]]:
    """POST one Messages API request upstream: (status, JSON payload, headers to return).
    An unreachable endpoint is a 502 in Anthropic's error shape, never an exception.
    Failed answers are counted in `failures`."""
    failures = failures if failures is not None else UpstreamFailures()
    headers = {
        "content-type": "application/json",
        "anthropic-version": (version or DEFAULT_ANTHROPIC_VERSION)[:MAX_VERSION_HEADER_CHARS],
    }
    if betas:
        headers["anthropic-beta"] = ",".join(betas)
    if upstream.api_key:
        headers["x-api-key"] = upstream.api_key
    url = upstream.base_url.rstrip("/") + "/v1/messages"
    try:
        response = await upstream.client.post(
            url, json=body, headers=headers, timeout=UPSTREAM_TIMEOUT_S
        )
    except Exception as exc:  # httpx2 transport errors: the model endpoint is unreachable
        log.warning("model endpoint %s unreachable: %s", url, exc)
        failures.observe(None, f"{type(exc).__name__}: {exc}")
        return (
            502,
            wire.error_body(
                "api_error", f"the model endpoint did not answer: {type(exc).__name__}"
            ),
            {},
        )
    returned = {k: response.headers[k] for k in RETURNED_HEADERS if k in response.headers}
    try:
        payload = response.json()
    except ValueError:
        payload = None
    if response.status_code == 200 and not _is_message(payload):
        status, payload, extra = _not_a_message(url, response)
        failures.observe(status, payload)
        return status, payload, extra
    if payload is None:
        payload = wire.error_body(
            "api_error", f"upstream answered {response.status_code} without JSON"
        )
    failures.observe(response.status_code, payload)
    return response.status_code, payload, returned


def _is_message(payload: Any) -> bool:
    return isinstance(payload, dict) and isinstance(payload.get("content"), list)


def _not_a_message(url: str, response: Any) -> tuple[int, Any, dict[str, str]]:
    """A 200 that is not a Messages API answer (an HTML page, a proxy's login form):
    a 502 the in-container SDK reports as an error and does not retry."""
    kind = response.headers.get("content-type", "no content type")[:100]
    message = (
        f"the model endpoint {url} answered 200 with {kind} that is not a Messages API "
        "response; check that ANTHROPIC_BASE_URL points at an Anthropic-compatible API"
    )
    log.warning("%s", message)
    return 502, wire.error_body("api_error", message), {"x-should-retry": "false"}
