"""Reading a request body from the container: capped, timed, parsed, validated.

Owns what a body must be before any handler sees it: at most `wire.MAX_BODY_BYTES`,
arrived within `BODY_TIMEOUT_S`, JSON no deeper than `wire.MAX_JSON_DEPTH`, and the
wire model the endpoint expects. Every refusal is a `RequestRejected`, which the
server answers in Anthropic's error shape."""

from __future__ import annotations

import asyncio
import json
from typing import TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError

from orchestrator.broker.listener import BODY_TIMEOUT_S
from orchestrator.jsontypes import JSONValue
from sandbox_tools import wire

M = TypeVar("M", bound=BaseModel)


class RequestRejected(Exception):
    """A request from the container is refused with this status and message."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message


async def read_json(request: web.Request) -> JSONValue:
    """The parsed body (capped and timed as `read_sized_json` says)."""
    return (await read_sized_json(request))[0]


async def read_sized_json(request: web.Request) -> tuple[JSONValue, int]:
    """(parsed body, its size in bytes); the size is capped and timed."""
    if request.content_length is not None and request.content_length > wire.MAX_BODY_BYTES:
        raise web.HTTPRequestEntityTooLarge(
            max_size=wire.MAX_BODY_BYTES, actual_size=request.content_length
        )
    try:
        async with asyncio.timeout(BODY_TIMEOUT_S):  # no task per request, as wait_for makes
            raw = await request.read()
    except TimeoutError:
        raise RequestRejected(
            408, "timeout_error", f"the request body did not arrive within {BODY_TIMEOUT_S:g} s"
        ) from None
    too_deep = RequestRejected(
        400,
        "invalid_request_error",
        f"body is nested deeper than {wire.MAX_JSON_DEPTH} levels of arrays and objects",
    )
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RequestRejected(400, "invalid_request_error", f"body is not JSON: {exc}") from None
    except RecursionError:  # deeper than the parser's own stack allows
        raise too_deep from None
    if json_depth(body) > wire.MAX_JSON_DEPTH:
        raise too_deep
    return body, len(raw)


async def parse(request: web.Request, model: type[M]) -> M:
    """The body read and validated as `model`."""
    return validate(model, await read_json(request))


def validate(model: type[M], body: object) -> M:
    """`body` as `model`; a 400 naming the first five problems if it is not one."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        errors = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()[:5]
        )
        raise RequestRejected(
            400, "invalid_request_error", f"invalid {model.__name__}: {errors}"
        ) from None


def json_depth(value: JSONValue) -> int:
    """How deeply arrays and objects nest in `value` (a scalar is 0); iterative, so
    any depth the parser accepted is measured without recursion."""
    deepest = 0
    stack: list[tuple[JSONValue, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: list[JSONValue] = list(node.values())
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, depth + 1)
        stack.extend((child, depth + 1) for child in children)
    return deepest
