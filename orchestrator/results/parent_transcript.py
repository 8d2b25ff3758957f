"""The parent agent's own conversation, kept so `warden logs RUN` can show it.

It wraps the parent's model client rather than the loop: after every model call the
conversation sent plus the answer received is written to
`STATE/runs/RUN/parent_transcript.json` (atomically, off the event loop), so what is
stored is exactly what the model saw and said, whatever the loop does with it.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

TRANSCRIPT_NAME = "parent_transcript.json"
MAX_PARENT_TRANSCRIPT_CHARS = 32_000_000
"""Largest parent transcript kept; beyond it the file keeps the last version that fit
and says so (the run goes on)."""

ModelCallHook = Callable[[dict[str, Any], Any, float, float], Awaitable[None]]
"""Called after each model call with the request's keyword arguments, the response,
and when the call started and ended (Unix time)."""


def transcript_path(state_dir: Path, run_id: str) -> Path:
    return state_dir / "runs" / run_id / TRANSCRIPT_NAME


class _Messages:
    def __init__(self, inner: Any, hooks: list[ModelCallHook]) -> None:
        self._inner = inner
        self._hooks = hooks

    async def create(self, **kwargs: Any) -> Any:
        started = time.time()
        response = await self._inner.create(**kwargs)
        ended = time.time()
        for hook in self._hooks:
            await hook(kwargs, response, started, ended)
        return response

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class ObservedClient:
    """An anthropic client whose `messages.create` calls `hooks` after each answer;
    everything else is the wrapped client's."""

    def __init__(self, inner: Any, hooks: list[ModelCallHook]) -> None:
        self._inner = inner
        self.hooks = hooks
        self.messages = _Messages(inner.messages, hooks)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class ParentTranscript:
    """A model-call hook that saves the parent's conversation after each call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.truncated = False
        self.tokens = 0
        """The parent's input + output tokens over its model calls so far."""

    async def __call__(
        self, request: dict[str, Any], response: Any, started: float, ended: float
    ) -> None:
        usage = getattr(response, "usage", None)
        for field in ("input_tokens", "output_tokens"):
            value = getattr(usage, field, None)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                self.tokens += value
        content = [block.model_dump(mode="json", exclude_none=True) for block in response.content]
        document = {
            "model": request.get("model"),
            "system": request.get("system"),
            "tools": [t.get("name") for t in request.get("tools") or []],
            "messages": [*request.get("messages", []), {"role": "assistant", "content": content}],
            "truncated": False,
            "tokens": self.tokens,
        }
        await asyncio.to_thread(self._write, document)

    def _write(self, document: dict[str, Any]) -> None:
        text = json.dumps(document, default=str)
        if len(text) > MAX_PARENT_TRANSCRIPT_CHARS:
            if self.truncated or not self.path.exists():
                return
            self.truncated = True
            kept = json.loads(self.path.read_text(encoding="utf-8"))
            kept["truncated"] = True
            text = json.dumps(kept)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".parent-")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, self.path)


def load_parent_transcript(state_dir: Path, run_id: str) -> dict[str, Any] | None:
    path = transcript_path(state_dir, run_id)
    if not path.is_file():
        return None
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded
