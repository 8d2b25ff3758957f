"""The subagent's agent loop: model call, permission, tool, checkpoint, repeat.

The conversation starts fresh from the spec (`history` + the task prompt).
Every tool call is put to the broker first; a denial reaches the model as an
`is_error` tool result. After every turn the whole transcript is checkpointed.
The loop ends when the model stops asking for tools, after `max_turns` model
calls, or when the broker refuses a model call; its last word is a
`ResultRequest`.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from sandbox_tools import watchdog, wire
from sandbox_tools.broker import MODEL_CALL_TIMEOUT_S, BrokerClient, model_client
from sandbox_tools.conversation import append_user_text
from sandbox_tools.errors import BrokerRequestError, BrokerUnavailableError, ToolError
from sandbox_tools.tools import ToolContext, ToolOutput, describe, parse_input, run_tool
from sandbox_tools.tools.bash import kill_running
from sandbox_tools.tools.inputs import tool_params

if TYPE_CHECKING:
    import anthropic

log = logging.getLogger("sandbox_tools")

EXIT_OK = 0
EXIT_BUG = 1
EXIT_BROKER = 2
"""The broker is unreachable, or refused the spec or the result."""


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    note = f"\n[truncated to {limit} characters]"
    return text[: limit - len(note)] + note


def final_text(content: list[dict[str, Any]]) -> str:
    """Concatenated text blocks of one assistant message."""
    return "".join(b["text"] for b in content if b.get("type") == "text" and "text" in b)


def _tool_result(tool_use_id: str, output: ToolOutput) -> dict[str, Any]:
    return {
        "type": "tool_result",
        "tool_use_id": tool_use_id,
        "content": output.text,
        "is_error": output.is_error,
    }


class AgentLoop:
    """One subagent's conversation, run to its end."""

    def __init__(
        self,
        spec: wire.TaskSpec,
        broker: BrokerClient,
        client: anthropic.Anthropic,
        ctx: ToolContext,
    ) -> None:
        self.spec = spec
        self.broker = broker
        self.client = client
        self.ctx = ctx
        # The host repaired the history; a resume may end with tool results, so
        # the prompt joins that user message rather than following it.
        self.messages = append_user_text(list(spec.history), spec.prompt)
        self.turn = 0
        unknown = [t for t in spec.tools if t not in wire.TOOL_NAMES + wire.DELEGATION_TOOL_NAMES]
        if unknown:
            log.warning("ignoring tools this runner does not know: %s", ", ".join(unknown))

    def run(self) -> wire.ResultRequest:
        import anthropic

        spec = self.spec
        extra: dict[str, Any] = {}
        if tools := tool_params(spec.tools):
            extra["tools"] = tools
        last: list[dict[str, Any]] = []
        while self.turn < spec.max_turns:
            try:
                response = self.client.messages.create(
                    model=spec.model,
                    max_tokens=spec.max_tokens,
                    system=spec.system_prompt,
                    messages=self.messages,  # type: ignore[arg-type]  # plain dicts, as sent
                    **extra,
                )
            except anthropic.APITimeoutError:
                self.checkpoint()
                return self._failed(
                    last, f"the model call did not answer within {MODEL_CALL_TIMEOUT_S:g} s"
                )
            except anthropic.APIConnectionError as e:
                raise BrokerUnavailableError(
                    f"model call failed, the broker does not answer: {e}"
                ) from e
            except anthropic.APIError as e:
                self.checkpoint()
                return self._failed(last, f"the model call was refused: {_api_error_message(e)}")
            self.turn += 1
            last = [block.to_dict() for block in response.content]
            self.messages.append({"role": "assistant", "content": last})
            tool_uses = [b for b in last if b.get("type") == "tool_use"]
            if response.stop_reason == "tool_use" and tool_uses:
                results = [self.call_tool(b) for b in tool_uses]
                self.messages.append({"role": "user", "content": results})
            self.checkpoint()
            self.event(
                wire.EventRequest(
                    kind="turn_finished", detail=f"turn {self.turn}: {response.stop_reason}"
                )
            )
            if response.stop_reason != "tool_use" or not tool_uses:
                return wire.ResultRequest(
                    status="completed", text=_clip(final_text(last), wire.MAX_RESULT_CHARS)
                )
        return self._failed(
            last,
            f"stopped after {spec.max_turns} model calls (max_turns) before the agent finished",
        )

    def _failed(self, last: list[dict[str, Any]], error: str) -> wire.ResultRequest:
        return wire.ResultRequest(
            status="failed",
            text=_clip(final_text(last), wire.MAX_RESULT_CHARS),
            error=_clip(error, wire.MAX_EVENT_DETAIL_CHARS),
        )

    def call_tool(self, block: dict[str, Any]) -> dict[str, Any]:
        """Ask, run, report: one tool_use block in, one tool_result block out."""
        tool_use_id = str(block.get("id", ""))
        name = str(block.get("name", ""))
        raw = block.get("input")
        raw_input: dict[str, Any] = raw if isinstance(raw, dict) else {}
        if name not in self.spec.tools:
            allowed = ", ".join(self.spec.tools) or "none"
            return _tool_result(
                tool_use_id,
                ToolOutput(
                    f"Error: the tool {name!r} is not available to this agent "
                    f"(available: {allowed}); it was not run.",
                    is_error=True,
                ),
            )
        size = len(json.dumps(raw_input).encode())
        if size > wire.MAX_TOOL_INPUT_BYTES:
            return _tool_result(
                tool_use_id,
                ToolOutput(
                    f"Error: the {name} input is {size} bytes, more than the "
                    f"{wire.MAX_TOOL_INPUT_BYTES} bytes allowed; it was not run. Split the "
                    "work into smaller calls.",
                    is_error=True,
                ),
            )
        try:
            decision = self.broker.permission(
                wire.PermissionRequest(
                    tool_use_id=tool_use_id, tool_name=name, tool_input=raw_input
                )
            )
        except ValidationError as e:  # e.g. a tool_use id longer than the wire allows
            return _tool_result(
                tool_use_id,
                ToolOutput(
                    f"Error: this {name} call cannot be put to the permission check "
                    f"({e.error_count()} invalid fields); it was not run.",
                    is_error=True,
                ),
            )
        except BrokerRequestError as e:
            return _tool_result(
                tool_use_id,
                ToolOutput(
                    f"Error: the permission check for this {name} call failed ({e.message}); "
                    "it was not run.",
                    is_error=True,
                ),
            )
        if decision.behavior == "deny":
            reason = decision.reason or "no reason was given"
            return _tool_result(
                tool_use_id,
                ToolOutput(
                    f"Permission denied: the {name} call was blocked by policy and was not run. "
                    f"Reason: {reason}",
                    is_error=True,
                ),
            )
        tool_input = decision.updated_input if decision.updated_input is not None else raw_input
        self.event(
            wire.EventRequest(
                kind="tool_started",
                tool_name=name,
                tool_use_id=tool_use_id,
                detail=describe(name, tool_input),
            )
        )
        if name in wire.DELEGATION_TOOL_NAMES:
            output = self.delegate(tool_use_id, tool_input)
        else:
            output = run_tool(name, tool_input, self.ctx)
        self.event(
            wire.EventRequest(
                kind="tool_finished",
                tool_name=name,
                tool_use_id=tool_use_id,
                detail=_clip(output.summary, wire.MAX_EVENT_DETAIL_CHARS),
                is_error=output.is_error,
            )
        )
        return _tool_result(tool_use_id, output)

    def delegate(self, tool_use_id: str, tool_input: dict[str, Any]) -> ToolOutput:
        """A nested `Task`, carried out by the host; waits as long as the subtask runs."""
        try:
            task = parse_input("Task", tool_input)
            answer = self.broker.delegate(
                wire.DelegateRequest(
                    tool_use_id=tool_use_id, input=task.model_dump(exclude_none=True)
                )
            )
        except ToolError as e:
            return ToolOutput(f"Error: {e}", is_error=True, summary=str(e)[:160])
        except BrokerRequestError as e:
            return ToolOutput(
                f"Error: the host could not run the task: {e.message}",
                is_error=True,
                summary="delegation refused",
            )
        return ToolOutput(
            answer.text, is_error=answer.is_error, summary="failed" if answer.is_error else "done"
        )

    def checkpoint(self) -> None:
        """Send the whole transcript; a refusal is logged, the loop goes on."""
        try:
            self.broker.transcript(
                wire.TranscriptCheckpoint(messages=self.messages, turn=self.turn)
            )
        except BrokerRequestError as e:
            log.warning("transcript checkpoint after turn %d was refused: %s", self.turn, e)

    def event(self, request: wire.EventRequest) -> None:
        """Progress is best effort: a refused event is logged, never fatal."""
        try:
            self.broker.event(request)
        except BrokerRequestError as e:
            log.warning("event %s was refused: %s", request.kind, e)


def _api_error_message(e: anthropic.APIError) -> str:
    body = e.body
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            status = getattr(e, "status_code", None)
            return f"{error['message']} (HTTP {status})" if status else error["message"]
    return e.message


def run(
    socket_path: str = wire.BROKER_SOCKET,
    workspace: str | Path = wire.WORKSPACE,
    watch_broker: bool = False,
) -> int:
    """Fetch the spec, run the loop, post the result; the process exit code.

    `watch_broker` (the container entry point sets it) ends the whole process, tools
    included, as soon as the broker goes away (`watchdog`).

    0 whenever a result was posted (even a failed one); 2 when the broker is
    unreachable; 1 on a bug (after trying to post a failed result).
    """
    if not Path(socket_path).exists():
        # Checked up front: httpcore2 leaks the socket object when connect() fails.
        print(
            f"warden runner: the broker socket {socket_path} does not exist; "
            "it must be mounted into the container (or passed with --socket)",
            file=sys.stderr,
        )
        return EXIT_BROKER
    broker = BrokerClient(socket_path)
    try:
        spec = broker.spec()
        if watch_broker:  # from here on, the runner dies with its broker
            watchdog.start(socket_path, kill_running)
        ctx = ToolContext(root=Path(workspace).resolve(), bash_timeout_s=spec.bash_timeout_s)
        client = model_client(socket_path, spec.model_max_retries, spec.model_retry_total_s)
        try:
            result = AgentLoop(spec, broker, client, ctx).run()
        finally:
            client.close()
        broker.result(result)
        return EXIT_OK
    except (BrokerUnavailableError, BrokerRequestError) as e:
        print(f"warden runner: {e}", file=sys.stderr)
        return EXIT_BROKER
    except Exception as e:
        log.exception("the runner crashed")
        try:
            broker.result(
                wire.ResultRequest(
                    status="failed",
                    error=_clip(f"the runner crashed: {type(e).__name__}: {e}", 500),
                )
            )
        except Exception:
            log.warning("could not report the crash to the broker")
        return EXIT_BUG
    finally:
        broker.close()
