"""The `PreApply` hook: warden's own hook event, in Claude Code's hook protocol
shape, so a team can run its own check on a whole change set before anyone is
asked. It is configured like a `PreToolUse` hook (`hooks.PreApply` in a settings
file, matcher `Apply` or `*`), gets on stdin what a `PreToolUse` hook gets with
`hook_event_name: "PreApply"`, `tool_name: "Apply"` and the change set (every
path, kind, mode, size, sha256, link target) as `tool_input`, and blocks the
change set with exit code 2 (stderr is the reason) or with
`hookSpecificOutput.permissionDecision: "deny"`. A hook that fails (another exit
code, a timeout, bad JSON) blocks it too: a check that could not run has not
passed. `permissionDecision: "ask"` sends the change set to a person even under
`--apply auto` (with nobody to ask, it waits); `"allow"` skips no review.
Hooks the person has not trusted run in the run's hook sandbox, as `PreToolUse`
hooks do.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from orchestrator.apply.changeset import APPLY_TOOL, ChangeSet, PathReason
from orchestrator.permissions.hooks import HookSandbox, HookSet, hook_input, run_hooks
from orchestrator.permissions.models import CallContext, ToolCall

EVENT: Final = "PreApply"


@dataclass(frozen=True)
class PreApplyVerdict:
    """What the `PreApply` hooks said of one change set."""

    blocks: tuple[PathReason, ...] = ()
    """Why it is rejected (a hook denied it or failed); empty: none blocks it."""
    asks: tuple[PathReason, ...] = ()
    """Why a person must review it (a hook answered "ask"): under `--apply auto`
    too; with nobody to ask it waits."""


async def pre_apply(
    hooks: HookSet,
    change_set: ChangeSet,
    *,
    workspace: Path,
    sandbox: HookSandbox | None,
) -> tuple[PathReason, ...]:
    """The reasons the `PreApply` hooks block `change_set` (empty: none does)."""
    verdict = await pre_apply_verdict(hooks, change_set, workspace=workspace, sandbox=sandbox)
    return verdict.blocks


async def pre_apply_verdict(
    hooks: HookSet,
    change_set: ChangeSet,
    *,
    workspace: Path,
    sandbox: HookSandbox | None,
) -> PreApplyVerdict:
    """Run the `PreApply` hooks on `change_set`: what blocks it, what asks a person."""
    matching = hooks.matching(EVENT, APPLY_TOOL)
    if not matching:
        return PreApplyVerdict()
    call = ToolCall(tool_name=APPLY_TOOL, tool_input=change_set.model_dump(mode="json"))
    ctx = CallContext(session_id=change_set.task_id, agent_id=change_set.task_id,
                      agent_type=change_set.agent)  # fmt: skip
    outcomes = await run_hooks(
        matching,
        hook_input(EVENT, call, ctx),
        tool_name=APPLY_TOOL,
        workspace_host=workspace,
        sandbox=sandbox,
    )
    blocks = []
    asks = []
    for outcome in outcomes:
        rule = f"PreApply: {outcome.hook}"
        if outcome.decision == "deny":
            why = outcome.reason or "blocked by the PreApply hook"
        elif outcome.error is not None:
            why = f"the PreApply hook failed ({outcome.error}), so it has not passed"
        elif outcome.decision == "ask":
            why = outcome.reason or "the PreApply hook asks a person to review it"
            asks.append(PathReason(path="", reason=why, rule=rule))
            continue
        else:
            continue
        blocks.append(PathReason(path="", reason=why, rule=rule))
    return PreApplyVerdict(blocks=tuple(blocks), asks=tuple(asks))
