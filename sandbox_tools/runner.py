"""The subagent's agent loop: model call, permission, tool, checkpoint, repeat.

The conversation starts fresh from the spec (`history` + the task prompt).
Each model call is one Messages API request to the broker, which calls the API
with the real SDK (and retries there); an error answer ends the loop with a
failed result that quotes it. Every tool call is put to the broker first; a
denial reaches the model as an `is_error` tool result. Progress events and the
transcript checkpoint after every turn go through the `Outbox` in the
background, in order, and are flushed before the result; a tool's progress is
held briefly and carried by the next permission request. The loop ends when the
model stops asking for tools, after `max_turns` model calls, or when the broker
refuses a model call; its last word is a `ResultRequest`.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox_tools import environment, watchdog, wire, wire_answers
from sandbox_tools.broker import MODEL_CALL_TIMEOUT_S, BrokerClient
from sandbox_tools.caching import cached_messages, cached_tools, system_blocks
from sandbox_tools.context import ContextWindow, estimate_tokens
from sandbox_tools.conversation import append_user_text, with_listing
from sandbox_tools.errors import (
    BrokerRequestError,
    BrokerTimeoutError,
    BrokerUnavailableError,
    ToolError,
)
from sandbox_tools.jsontypes import JSONObject, JSONValue
from sandbox_tools.outbox import Outbox
from sandbox_tools.tools import (
    ToolContext,
    ToolOutput,
    describe,
    kill_running_tools,
    parse_input,
    run_tool,
)
from sandbox_tools.tools.inputs import TaskInput, dump, input_fields, tool_params

if TYPE_CHECKING:
    from sandbox_tools.tools.mcp import McpTools

log = logging.getLogger("sandbox_tools")

EXIT_OK = 0
EXIT_BUG = 1
EXIT_BROKER = 2
"""The broker is unreachable, or refused the spec or the result."""

OUTBOX_FLUSH_ON_CRASH_S = 30.0
"""How long a failing runner waits for its queued events and checkpoints to go."""

PROGRESS_HOLD_S = 0.05
"""A tool's `tool_started` and `tool_finished` are held up to this long for the next
permission request to carry (`Outbox.take_events`), so a tool call costs the host one
request, its permission, and no progress send races it; what no request takes within
the hold goes on its own. A tool is shown as started or finished at most this much
late; a sandbox killed outright loses at most the progress held then (see `Outbox`)."""


def final_text(content: list[JSONObject]) -> str:
    """Concatenated text blocks of one assistant message."""
    texts = (b.get("text") if b.get("type") == "text" else None for b in content)
    return "".join(text for text in texts if isinstance(text, str))


def _tool_result(tool_use_id: str, output: ToolOutput) -> JSONObject:
    return {
        "type": "tool_result",
        "tool_use_id": tool_use_id,
        "content": output.text,
        "is_error": output.is_error,
    }


class MalformedReplyError(ValueError):
    """A model reply that is not a Messages API response."""


def _reply_parts(reply: JSONObject) -> tuple[list[JSONObject], str | None]:
    """(content blocks, stop_reason) of a Messages API response."""
    content = reply.get("content")
    stop_reason = reply.get("stop_reason")
    if not isinstance(content, list):
        raise MalformedReplyError("its content is not a list of blocks")
    blocks = [b for b in content if isinstance(b, dict)]
    if len(blocks) != len(content):
        raise MalformedReplyError("its content is not a list of blocks")
    if stop_reason is not None and not isinstance(stop_reason, str):
        raise MalformedReplyError("its stop_reason is not a string")
    return blocks, stop_reason


class AgentLoop:
    """One subagent's conversation, run to its end."""

    def __init__(
        self, spec: wire_answers.TaskSpec, broker: BrokerClient, outbox: Outbox, ctx: ToolContext
    ) -> None:
        if not spec.skills and "Skill" in spec.tools:  # nothing to load: not offered
            spec = spec._replace(tools=[t for t in spec.tools if t != "Skill"])
        self.spec = spec
        self.after_results: list[JSONObject] = []
        """Blocks a tool adds after this turn's tool results (a loaded skill's text)."""
        self.broker = broker
        self.outbox = outbox
        self.ctx = ctx
        # The host repaired the history; a resume may end with tool results, so
        # the prompt joins that user message rather than following it.
        if not spec.history and (spec.context_before or spec.context_after):
            prompt_block: JSONObject = {"type": "text", "text": spec.prompt}
            first = [*spec.context_before, prompt_block, *spec.context_after]
            self.messages: list[JSONObject] = [{"role": "user", "content": list[JSONValue](first)}]
        else:
            self.messages = append_user_text(list(spec.history), spec.prompt)
        if not spec.history:  # a resumed conversation keeps the listing it began with
            self.messages = with_listing(self.messages, spec.skill_listing)
        self.system_prompt = environment.system_prompt(
            spec.system_prompt, str(ctx.root), environment=spec.environment,
            git_status=spec.git_status,
        )  # fmt: skip
        """The spec's system prompt with the environment details and git snapshot."""
        self.context = ContextWindow(spec.context_window_tokens, spec.max_tokens)
        """What of `messages` is sent (`context`): they stay whole for the transcript."""
        self.turn = 0
        self.mcp: McpTools | None = None
        """The subagent's MCP servers (started by `start_mcp`), when the spec names any."""
        known = (*wire.TOOL_NAMES, *wire.DELEGATION_TOOL_NAMES, *wire.MCP_RESOURCE_TOOL_NAMES)
        unknown = [t for t in spec.tools if t not in known]
        if unknown:
            log.warning("ignoring tools this runner does not know: %s", ", ".join(unknown))

    def _request(self, messages: list[JSONObject] | None = None) -> JSONObject:
        """This turn's request (the context window's view of the conversation, or
        `messages`), with prompt-caching breakpoints (`caching`) so it reads everything
        the previous turn sent from the cache; same order, same JSON."""
        if messages is None:
            self.context.compact(self.messages, self._size, self._summarize)
            messages = self.context.view(self.messages)
        request: JSONObject = {
            "model": self.spec.model,
            "max_tokens": self.spec.max_tokens,
            "system": list[JSONValue](system_blocks(self.system_prompt)),
            "messages": list[JSONValue](cached_messages(messages)),
        }
        tools = list(self.spec.tool_definitions) or tool_params(self.spec.tools)
        if self.mcp is not None and not self.spec.tool_definitions:
            tools.extend(self.mcp.definitions)
        if tools:
            request["tools"] = list[JSONValue](cached_tools(tools))
        if self.spec.effort is not None:
            request["output_config"] = {"effort": self.spec.effort}
        return request

    def _size(self, messages: list[JSONObject]) -> int:
        return estimate_tokens(self._request(messages))

    def _summarize(self, messages: list[JSONObject]) -> str:
        """One model call for a summary of the oldest turns (`context`); a failure
        leaves a note instead, and the loop goes on."""
        self.outbox.event(wire.event_request("log", detail="context: summarising the oldest turns"))
        try:
            content, _ = _reply_parts(self.broker.messages(self._request(messages)))
        except (BrokerRequestError, BrokerTimeoutError, MalformedReplyError) as e:
            return f"(No summary could be written ({e}); the earlier turns are omitted.)"
        return final_text(content).strip() or "(The summary came back empty.)"

    def start_mcp(self) -> None:
        """Start the spec's MCP servers inside this sandbox (`tools.mcp`); what failed
        is reported to the host as a log event, and the loop goes on without it."""
        if not self.spec.mcp_servers:
            return
        from sandbox_tools.tools.mcp import McpTools

        self.mcp = McpTools(self.spec, self.ctx.root)
        for warning in self.mcp.start():
            log.warning("%s", warning)
            self.outbox.event(wire.event_request("log", detail=warning, is_error=True))
        if self.mcp.names:
            self.outbox.event(wire.event_request(
                "log", detail=f"MCP tools offered: {', '.join(self.mcp.names)}"))  # fmt: skip

    def close(self) -> None:
        """Stop the MCP servers (the sandbox's end would stop them too)."""
        if self.mcp is not None:
            self.mcp.close()

    def run(self) -> wire.ResultRequest:
        try:
            self.start_mcp()
            return self._run()
        finally:
            self.close()

    def _run(self) -> wire.ResultRequest:
        spec = self.spec
        last: list[JSONObject] = []
        while self.turn < spec.max_turns:
            try:
                reply = self.broker.messages(self._request())
                content, stop_reason = _reply_parts(reply)
            except BrokerTimeoutError:
                self.checkpoint()
                return self._failed(
                    last, f"the model call did not answer within {MODEL_CALL_TIMEOUT_S:g} s"
                )
            except BrokerRequestError as e:
                self.checkpoint()
                return self._failed(
                    last, f"the model call was refused: {e.message} (HTTP {e.status})"
                )
            except MalformedReplyError as e:
                self.checkpoint()
                return self._failed(last, f"the model call returned a malformed answer: {e}")
            self.turn += 1
            last = content
            # A tool_use whose input is not an object (the model's JSON did not parse)
            # goes back as `{}` (the API refuses it otherwise); call_tool answers it.
            echo: list[JSONValue] = [
                {**b, "input": {}}
                if b.get("type") == "tool_use" and not isinstance(b.get("input"), dict)
                else b
                for b in last
            ]
            self.messages.append({"role": "assistant", "content": echo})
            tool_uses = [b for b in last if b.get("type") == "tool_use"]
            if stop_reason == "tool_use" and tool_uses:
                results = [self.call_tool(b) for b in tool_uses]
                results += self.after_results
                self.after_results = []
                self.messages.append({"role": "user", "content": list[JSONValue](results)})
            self.checkpoint()
            self.outbox.event(
                wire.event_request("turn_finished", detail=f"turn {self.turn}: {stop_reason}")
            )
            if stop_reason != "tool_use" or not tool_uses:
                return wire.result_request("completed", final_text(last))
        return self._failed(
            last,
            f"stopped after {spec.max_turns} model calls (max_turns) before the agent finished",
        )

    def _failed(self, last: list[JSONObject], error: str) -> wire.ResultRequest:
        return wire.result_request("failed", final_text(last), error)

    def call_tool(self, block: JSONObject) -> JSONObject:
        """Ask, run, report: one tool_use block in, one tool_result block out."""
        tool_use_id = str(block.get("id", ""))
        name = str(block.get("name", ""))
        raw = block.get("input")
        if not isinstance(raw, dict):
            return _tool_result(
                tool_use_id,
                ToolOutput(
                    f"Error: the input of this {name[: wire.MAX_TOOL_NAME_CHARS]} call was not "
                    f"a JSON object (it was {type(raw).__name__}: {json.dumps(raw)[:200]}); it "
                    "was not run. Call the tool again with its input as an object of named "
                    "fields.",
                    is_error=True,
                ),
            )
        raw_input: JSONObject = raw
        mcp = self.mcp if self.mcp is not None and self.mcp.offers(name) else None
        if name in wire.MCP_RESOURCE_TOOL_NAMES and mcp is None:
            return _tool_result(tool_use_id, ToolOutput(
                f"Error: {name} is not available: none of this agent's MCP servers offers "
                "resources; it was not run.", is_error=True))  # fmt: skip
        if name not in self.spec.tools and mcp is None:
            allowed = ", ".join([*self.spec.tools, *(self.mcp.names if self.mcp else ())])
            allowed = allowed or "none"
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
        if len(tool_use_id) > wire.MAX_TOOL_USE_ID_CHARS or len(name) > wire.MAX_TOOL_NAME_CHARS:
            return _tool_result(
                tool_use_id,
                ToolOutput(
                    f"Error: this {name[: wire.MAX_TOOL_NAME_CHARS]} call cannot be put to the "
                    "permission check (its id or name is longer than the wire allows); "
                    "it was not run.",
                    is_error=True,
                ),
            )
        # The previous calls' held progress rides along: the host records it first.
        progress = self.outbox.take_events()
        try:
            decision = self.broker.permission(
                wire.permission_request(tool_use_id, name, raw_input, progress)
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
        self.outbox.event(
            wire.event_request("tool_started", name, tool_use_id, describe(name, tool_input)),
            hold_s=PROGRESS_HOLD_S,
        )
        if name in wire.DELEGATION_TOOL_NAMES:
            output = self.delegate(tool_use_id, tool_input)
        elif name == "WebFetch":
            output = self.web_fetch(tool_input)
        elif name == "WebSearch":
            output = self.web_search(tool_input)
        elif name == "Skill":
            output = self.skill(tool_input)
        elif mcp is not None:
            output = mcp.call(name, tool_input)
        else:
            output = run_tool(name, tool_input, self.ctx)
        self.outbox.event(
            wire.event_request(
                "tool_finished", name, tool_use_id, output.summary, is_error=output.is_error
            ),
            hold_s=PROGRESS_HOLD_S,
        )
        return _tool_result(tool_use_id, output)

    def delegate(self, tool_use_id: str, tool_input: JSONObject) -> ToolOutput:
        """A nested `Task`, carried out by the host; waits as long as the subtask runs."""
        known = {f.key for f in input_fields(TaskInput)}
        ignored = [key for key in tool_input if key not in known]
        if ignored:  # Claude Code runs such a call without them; so does warden
            note = f"Task input fields ignored (not part of the Task tool): {', '.join(ignored)}"
            self.outbox.event(wire.event_request("log", "Task", tool_use_id, note))
        try:
            task = parse_input("Task", {k: v for k, v in tool_input.items() if k in known})
            answer = self.broker.delegate(wire.delegate_request(tool_use_id, dump(task)))
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

    def web_fetch(self, tool_input: JSONObject) -> ToolOutput:
        """Fetch through the sandbox's egress, then one model call for the prompt
        (`tools.webfetch`); the page never enters this conversation whole."""
        from sandbox_tools.tools import webfetch

        try:
            inp = parse_input("WebFetch", tool_input)
            page = webfetch.fetch(inp.url)  # type: ignore[attr-defined]
            reply = self.broker.messages(
                webfetch.prompt_request(self.spec.model, page, inp.prompt)  # type: ignore[attr-defined]
            )
            content, _ = _reply_parts(reply)
        except ToolError as e:
            return ToolOutput(f"Error: {e}", is_error=True, summary=str(e)[:160])
        except (BrokerRequestError, BrokerTimeoutError, MalformedReplyError) as e:
            return ToolOutput(
                f"Error: the page was fetched but the model call on it failed: {e}",
                is_error=True,
                summary="model call failed",
            )
        cut = " (cut to the size limit)" if page.cut else ""
        head = f"[{page.url}: HTTP {page.status} {page.reason}, {page.size} bytes{cut}]"
        return ToolOutput(f"{head}\n{final_text(content).strip()}", summary=f"HTTP {page.status}")

    def skill(self, tool_input: JSONObject) -> ToolOutput:
        """Load a skill of the spec (`tools.skills`); its text follows the results."""
        from sandbox_tools.tools import skills

        try:
            inp = parse_input("Skill", tool_input)
        except ToolError as e:
            return ToolOutput(f"Error: {e}", is_error=True, summary=str(e)[:160])
        output, block = skills.load_skill(inp, self.spec.skills)  # type: ignore[arg-type]
        if block is not None:
            self.after_results.append(block)
        return output

    def web_search(self, tool_input: JSONObject) -> ToolOutput:
        """One model call with the web search server tool, decided by the broker's
        forwarding gate (`tools.websearch`)."""
        from sandbox_tools.tools import websearch

        try:
            inp = parse_input("WebSearch", tool_input)
            allowed = [str(d) for d in inp.allowed_domains or []]  # type: ignore[attr-defined]
            blocked = [str(d) for d in inp.blocked_domains or []]  # type: ignore[attr-defined]
            query = str(inp.query)  # type: ignore[attr-defined]
            reply = self.broker.messages(websearch.search_request(self.spec.model, query, allowed))
            content, _ = _reply_parts(reply)
        except ToolError as e:
            return ToolOutput(f"Error: {e}", is_error=True, summary=str(e)[:160])
        except (BrokerRequestError, BrokerTimeoutError, MalformedReplyError) as e:
            return ToolOutput(
                f"Error: the web search was not run: {e}", is_error=True, summary="refused"
            )
        return ToolOutput(websearch.answer(query, content, blocked), summary="searched")

    def checkpoint(self) -> None:
        """Queue the whole transcript (sent in the background, after the events
        before it); a refusal is logged, the loop goes on."""
        self.outbox.checkpoint(wire.transcript_checkpoint(self.messages, self.turn))


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
        print(
            f"warden runner: the broker socket {socket_path} does not exist; "
            "it must be mounted into the container (or passed with --socket)",
            file=sys.stderr,
        )
        return EXIT_BROKER
    broker = BrokerClient(socket_path)
    outbox: Outbox | None = None
    try:
        spec = broker.spec()
        if watch_broker:  # from here on, the runner dies with its broker
            watchdog.start(socket_path, kill_running_tools)
        ctx = ToolContext(root=Path(workspace).resolve(), bash_timeout_s=spec.bash_timeout_s)
        sender = BrokerClient(socket_path)  # the outbox's own connection and thread
        outbox = Outbox(sender.events, sender.transcript, sender.close)
        result = AgentLoop(spec, broker, outbox, ctx).run()
        outbox.close()  # everything before the result is delivered first
        broker.result(result)
        return EXIT_OK
    except (BrokerUnavailableError, BrokerRequestError) as e:
        print(f"warden runner: {e}", file=sys.stderr)
        return EXIT_BROKER
    except Exception as e:
        log.exception("the runner crashed")
        try:
            if outbox is not None:
                outbox.close(OUTBOX_FLUSH_ON_CRASH_S)
            broker.result(
                wire.result_request(
                    "failed", error=wire.clip(f"the runner crashed: {type(e).__name__}: {e}", 500)
                )
            )
        except Exception:
            log.warning("could not report the crash to the broker")
        return EXIT_BUG
    finally:
        if outbox is not None:
            outbox.close(OUTBOX_FLUSH_ON_CRASH_S)
        broker.close()
