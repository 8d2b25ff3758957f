"""`PermissionEngine`: rules plus PreToolUse hooks decide every tool call on the host.

Precedence between hooks and rules (following Claude Code, erring safe):
1. a hook that blocks (exit 2 or `deny`) denies, whatever the rules say;
2. a deny rule denies, whatever the hooks say (also for a hook's `updatedInput`,
   which is evaluated against the rules again);
3. a hook `ask` asks (denied in `dontAsk`), even when a rule allows;
4. a hook `allow` skips the prompt only where the mode's default would have asked
   (or denied in `dontAsk`): never past an explicit ask rule, the plan mode, or a
   Bash command the analyser does not understand;
5. otherwise the rules decide. Hook errors never allow; they are returned in
   `Decision.hook_outcomes` for the audit trail.
The engine never talks to a human: `ask` is returned for the broker to route.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from orchestrator.jsontypes import JSONObject
from orchestrator.permissions.evaluate import MODE_SOURCE, Explanation, evaluate
from orchestrator.permissions.hooks import HookSandbox, HookSet, hook_input, run_hooks
from orchestrator.permissions.models import CallContext, Decision, HookOutcome, ToolCall
from orchestrator.permissions.policy import EffectivePolicy


class PermissionEngine:
    """Decides tool calls for one agent from its effective policy and hooks."""

    def __init__(
        self,
        policy: EffectivePolicy,
        hooks: HookSet,
        *,
        workspace_host: Path | None,
        sandbox: HookSandbox | None = None,
    ) -> None:
        self.policy = policy
        self.hooks = hooks
        self.workspace_host = workspace_host
        self.sandbox = sandbox
        """Runs the hooks that ask for a sandbox (the run's; None outside a run)."""

    def skill_loaded(self, name: str) -> None:
        """An allowed `Skill` call loads skill `name`: its `allowed-tools` allow the
        calls after it in the same model response (`turn_ended` takes them back)."""
        self.policy = self.policy.with_skill_loaded(name)

    def turn_ended(self) -> None:
        """The agent's model answered again: as in Claude Code, the tools a skill
        allowed held for the rest of the response that loaded it, and no longer."""
        self.policy = self.policy.without_loaded_skills()

    def _explain(self, call: ToolCall, ctx: CallContext) -> Explanation:
        return evaluate(self.policy, call, workspace_host=self.workspace_host, cwd=ctx.cwd)

    async def _explained(self, call: ToolCall, ctx: CallContext) -> Explanation:
        if self.workspace_host is None:
            return self._explain(call, ctx)
        # Resolving symlinks touches the host filesystem: keep it off the event loop.
        return await asyncio.to_thread(self._explain, call, ctx)

    def rules_alone(self, tool_name: str) -> bool:
        """True when no PreToolUse hook matches this tool: the rules alone decide its
        calls, and `evaluate_rules` gives the same decision as `evaluate`."""
        return not self.hooks.matching("PreToolUse", tool_name)

    def evaluate_rules(self, call: ToolCall, ctx: CallContext) -> Decision:
        """The rules' decision, without hooks (what `evaluate` returns when `rules_alone`).
        Blocking: it may resolve symlinks on the host, so call it from a worker thread;
        the gate does, together with the audit write, in one hop."""
        return self._explain(call, ctx).decision

    async def evaluate(self, call: ToolCall, ctx: CallContext) -> Decision:
        """What the policy says about `call`: rules, mode and PreToolUse hooks; `ask`
        means a person must answer (the gate asks)."""
        explained = await self._explained(call, ctx)
        pre = self.hooks.matching("PreToolUse", call.tool_name)
        if not pre:
            return explained.decision
        outcomes = await run_hooks(
            pre,
            hook_input("PreToolUse", call, ctx),
            tool_name=call.tool_name,
            workspace_host=self.workspace_host,
            sandbox=self.sandbox,
        )
        return await self._combine(call, ctx, explained, outcomes)

    async def _combine(
        self,
        call: ToolCall,
        ctx: CallContext,
        explained: Explanation,
        outcomes: list[HookOutcome],
    ) -> Decision:
        done = tuple(outcomes)
        for o in outcomes:
            if o.decision == "deny":
                reason = o.reason or "blocked by a PreToolUse hook"
                return Decision(
                    behavior="deny", reason=reason, hook=o.hook, source=o.source, hook_outcomes=done
                )
        updated = next((o for o in outcomes if o.updated_input is not None), None)
        updated_input: JSONObject | None = None
        if updated is not None and updated.updated_input is not None:
            updated_input = updated.updated_input
            new_call = call.model_copy(update={"tool_input": updated_input})
            explained = await self._explained(new_call, ctx)
        rules = explained.decision
        by_mode = explained.fallback and (rules.source or "").startswith(MODE_SOURCE + ":")
        if rules.behavior == "deny" and not by_mode:
            return rules.model_copy(update={"hook_outcomes": done, "updated_input": updated_input})
        asked = next((o for o in outcomes if o.decision == "ask"), None)
        if asked is not None:
            if self.policy.mode == "dontAsk":
                return Decision(
                    behavior="deny",
                    reason=f"a hook asks ({asked.reason or 'no reason given'}); "
                    "the dontAsk mode never asks",
                    hook=asked.hook,
                    source=asked.source,
                    hook_outcomes=done,
                    updated_input=updated_input,
                )
            return Decision(
                behavior="ask",
                reason=asked.reason or "a PreToolUse hook asks for approval",
                hook=asked.hook,
                source=asked.source,
                hook_outcomes=done,
                updated_input=updated_input,
            )
        allowed = next((o for o in outcomes if o.decision == "allow"), None)
        if allowed is not None and rules.behavior != "allow" and by_mode:
            return Decision(
                behavior="allow",
                reason=allowed.reason or "allowed by a PreToolUse hook",
                hook=allowed.hook,
                source=allowed.source,
                hook_outcomes=done,
                updated_input=updated_input,
            )
        return rules.model_copy(update={"hook_outcomes": done, "updated_input": updated_input})

    async def post_tool_use(
        self, call: ToolCall, response: JSONObject, ctx: CallContext
    ) -> list[HookOutcome]:
        """Run PostToolUse hooks; an outcome with decision `deny` carries feedback for the model."""
        post = self.hooks.matching("PostToolUse", call.tool_name)
        if not post:
            return []
        return await run_hooks(
            post,
            hook_input("PostToolUse", call, ctx, response),
            tool_name=call.tool_name,
            workspace_host=self.workspace_host,
            sandbox=self.sandbox,
        )
