"""Every tool call of a sandboxed subagent is decided on the host: an "ask"
pauses that one call until the root approver answers (with who asks, the exact
input and the rule), a denial reaches the subagent's model and the command
never runs, CI mode denies without waiting, nested asks climb to the root, and
other subagents keep running meanwhile. Every decision lands in the audit."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import Settings
from orchestrator.permissions.approvers import (
    ApprovalAnswer,
    ApprovalQuestion,
    CallbackApprover,
    NonInteractiveApprover,
)
from orchestrator.runtime.caps import TaskManagerConfig
from orchestrator.runtime.tasks import TaskInput, TaskStatus
from tests.integration.harness import (
    PARENT_MATCH,
    convo,
    requests_of,
    scripted_run,
    task,
    text,
    tool,
    trust_hooks,
)

pytestmark = pytest.mark.integration

ASK_TOUCH: dict[str, Any] = {"mode": "default", "allow": ("Bash(echo:*)",)}
"""`touch` matches no rule, so in `default` mode it asks."""


def _toucher(*commands: str, end: str = "{last_tool_result}") -> list[dict[str, Any]]:
    """A `toucher` subagent (prompt TOUCH) that runs each Bash command in its own
    turn, then answers `end`."""
    turns = [[tool("Bash", command=command)] for command in commands]
    return [convo("toucher", {"prompt_contains": "TOUCH"}, *turns, [text(end)])]


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    last = body["messages"][-1]["content"]
    return [b for b in last if isinstance(b, dict) and b.get("type") == "tool_result"]


async def test_ask_is_answered_by_the_root_approver_deny_then_allow(
    settings: Settings, workspace: Path
) -> None:
    questions: list[ApprovalQuestion] = []
    answers = iter(
        [
            ApprovalAnswer(behavior="deny", reason="not today", decided_by="test-human"),
            ApprovalAnswer(behavior="allow", decided_by="test-human"),
        ]
    )

    def decide(question: ApprovalQuestion) -> ApprovalAnswer:
        questions.append(question)
        return next(answers)

    script = _toucher("touch denied.txt", "touch allowed.txt")
    async with scripted_run(
        settings, workspace, script, approver=CallbackApprover(decide), **ASK_TOUCH
    ) as (run, server):
        result = await run.manager.run_task(
            TaskInput(description="touch files", prompt="TOUCH", subagent_type="bash")
        )
        audit = run.store.audit(run.run_id)

    assert result.status is TaskStatus.COMPLETED
    first = questions[0]
    assert first.task_id == result.task_id
    assert first.agent_type == "bash"
    assert first.description == "touch files"
    assert first.tool_name == "Bash"
    assert first.tool_input == {"command": "touch denied.txt"}
    assert first.chain == (result.task_id,)
    assert "mode" in first.asked_by
    # The denial reached the subagent's model, and the command never ran.
    denied = tool_results(requests_of(server, "toucher")[1].body)[0]
    assert denied["is_error"] is True and "not today" in json.dumps(denied)
    assert not (workspace / "denied.txt").exists()
    assert (workspace / "allowed.txt").exists()
    assert [(a.decision, a.final, a.decided_by) for a in audit] == [
        ("ask", "deny", "test-human"),
        ("ask", "allow", "test-human"),
    ]
    assert all(len(a.input_hash) >= 16 for a in audit)


async def test_changed_input_asks_again_despite_a_session_approval(
    settings: Settings, workspace: Path
) -> None:
    asked: list[str] = []

    def decide(question: ApprovalQuestion) -> ApprovalAnswer:
        asked.append(str(question.tool_input["command"]))
        return ApprovalAnswer(behavior="allow", scope="session", decided_by="test-human")

    script = _toucher("touch a.txt", "touch a.txt", "touch b.txt", end="done")
    async with scripted_run(
        settings, workspace, script, approver=CallbackApprover(decide), **ASK_TOUCH
    ) as (run, _):
        await run.manager.run_task(TaskInput(description="t", prompt="TOUCH", subagent_type="bash"))
    assert asked == ["touch a.txt", "touch b.txt"]


async def test_ci_mode_denies_without_blocking(settings: Settings, workspace: Path) -> None:
    script = _toucher("touch nope.txt")
    async with scripted_run(
        settings, workspace, script, approver=NonInteractiveApprover(), **ASK_TOUCH
    ) as (run, _):
        result = await asyncio.wait_for(
            run.manager.run_task(TaskInput(description="t", prompt="TOUCH", subagent_type="bash")),
            timeout=60,
        )
    assert "no human is available" in result.text
    assert not (workspace / "nope.txt").exists()


async def test_shipped_ci_policy_denies_shell_composition(
    settings: Settings, workspace: Path
) -> None:
    script = [
        convo(
            "sneaky",
            {"prompt_contains": "SNEAK"},
            [tool("Bash", command="git status; touch pwned.txt")],
            [text("{last_tool_result}")],
        )
    ]
    async with scripted_run(
        settings, workspace, script, approver=NonInteractiveApprover(), policy="ci", mode=None
    ) as (run, _):
        result = await run.manager.run_task(
            TaskInput(description="t", prompt="SNEAK", subagent_type="general-purpose")
        )
    assert "denied" in result.text.lower()
    assert not (workspace / "pwned.txt").exists()


async def test_nested_ask_reaches_the_root_approver_and_others_keep_running(
    settings: Settings, workspace: Path
) -> None:
    questions: list[ApprovalQuestion] = []
    release = asyncio.Event()

    async def decide(question: ApprovalQuestion) -> ApprovalAnswer:
        questions.append(question)
        await release.wait()
        return ApprovalAnswer(behavior="allow", decided_by="root-human")

    script = [
        convo(
            "parent",
            PARENT_MATCH,
            [task("DELEGATOR delegate the touch"), task("BYSTANDER echo", "bash")],
            [text("{tool_results}")],
        ),
        convo(
            "delegator",
            {"prompt_contains": "DELEGATOR"},
            [task("GRANDCHILD touch it", "bash")],
            [text("delegator saw: {last_tool_result}")],
        ),
        convo(
            "grandchild",
            {"prompt_contains": "GRANDCHILD"},
            [tool("Bash", command="touch nested.txt")],
            [text("grandchild touched")],
        ),
        convo(
            "bystander",
            {"prompt_contains": "BYSTANDER"},
            [tool("Bash", command="echo hi > bystander.txt")],
            [text("bystander done")],
        ),
    ]
    async with scripted_run(
        settings,
        workspace,
        script,
        approver=CallbackApprover(decide),
        config=TaskManagerConfig(max_depth=2),
        mode="default",
        allow=("Bash(echo:*)", "Task", "Write(/workspace/bystander.txt)"),
    ) as (run, _):
        parent = asyncio.create_task(run.parent.run("go"))
        # While the grandchild waits for its approval, the bystander finishes.
        for _ in range(600):
            done = [c for c in run.manager.tasks.values() if c.status is TaskStatus.COMPLETED]
            if questions and done:
                break
            await asyncio.sleep(0.1)
        assert questions, "the nested ask never reached the root approver"
        assert [c.agent_type for c in done] == ["bash"]
        assert (workspace / "bystander.txt").exists()
        assert not (workspace / "nested.txt").exists()
        release.set()
        result = await parent

    question = questions[0]
    grandchild = run.manager.tasks[question.task_id]
    assert len(question.chain) == 2
    assert question.chain[0] == grandchild.parent_id
    assert (workspace / "nested.txt").exists()
    assert "delegator saw: Task Succeeded. Result: grandchild touched" in result.text


async def test_host_read_settings_are_read_only_in_the_sandbox_and_post_hooks_run(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    hook_log = tmp_path / "post-tool-use.jsonl"
    claude = workspace / ".claude"
    claude.mkdir()
    settings_doc = {
        "permissions": {"allow": ["Bash"]},
        "hooks": {
            "PostToolUse": [
                {"matcher": "Bash", "hooks": [{"type": "command", "command": f"cat >> {hook_log}"}]}
            ]
        },
    }
    original = json.dumps(settings_doc)
    (claude / "settings.json").write_text(original)
    trust_hooks(settings, f"cat >> {hook_log}")
    (workspace / ".git" / "hooks").mkdir(parents=True)
    (workspace / ".git" / "config").write_text("[core]\n")
    for path in (claude, claude / "settings.json", workspace / ".git", workspace / ".git" / "hooks",
                 workspace / ".git" / "config"):  # fmt: skip
        os.chown(path, 1000, 1000)
    attack = (
        "echo '{}' > .claude/settings.json; echo evil > .claude/agents.md; "
        "echo '[core] fsmonitor = evil' >> .git/config; echo x > .git/hooks/pre-commit; "
        "echo attempted"
    )
    script = [
        convo(
            "planter",
            {"prompt_contains": "PLANT"},
            [tool("Bash", command=attack)],
            [text("{last_tool_result}")],
        )
    ]
    # Even when a careless human approves the write, the mount holds.
    approve_all = CallbackApprover(
        lambda q: ApprovalAnswer(behavior="allow", decided_by="careless human")
    )
    async with scripted_run(
        settings, workspace, script, mode="acceptEdits", approver=approve_all
    ) as (run, _):
        result = await run.manager.run_task(
            TaskInput(description="plant", prompt="PLANT", subagent_type="bash")
        )
    assert "Read-only file system" in result.text
    assert (claude / "settings.json").read_text() == original
    assert not (claude / "agents.md").exists()
    assert (workspace / ".git" / "config").read_text() == "[core]\n"
    assert not (workspace / ".git" / "hooks" / "pre-commit").exists()
    # The PostToolUse hook ran on the host with Claude Code's input.
    record = json.loads(hook_log.read_text().splitlines()[0])
    assert record["hook_event_name"] == "PostToolUse"
    assert record["tool_name"] == "Bash" and record["tool_input"]["command"] == attack
    assert "attempted" in json.dumps(record["tool_response"])
