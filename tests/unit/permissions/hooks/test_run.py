"""Locks in PreToolUse/PostToolUse hooks with real hook scripts run on the host:
the stdin JSON, exit 2 blocks with stderr as the reason, each JSON decision,
updatedInput validated (and re-checked against deny rules), malformed output and
other exit codes are reported errors (never an allow), a hung hook's whole process
group is killed at its timeout, output is bounded, hook/rule precedence, and hooks
in the shape of Claude Code's documented examples work unchanged."""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path

import pytest

from orchestrator.config import Settings
from orchestrator.errors import PolicyError
from orchestrator.permissions import (
    CallContext,
    EffectivePolicy,
    HookSet,
    PermissionEngine,
    ToolCall,
    load_hooks,
    load_policy,
)
from orchestrator.permissions.hooks.definitions import parse_hooks
from orchestrator.permissions.hooks.run import MAX_HOOK_OUTPUT_BYTES
from orchestrator.permissions.hooks.sandbox import SandboxedHookRun

HOOKS = Path(__file__).parent / "scripts"
CTX = CallContext(
    session_id="sess-1",
    agent_id="sa_1",
    agent_type="general-purpose",
    transcript_path="/tmp/t.jsonl",
)


def script(name: str, *args: str) -> str:
    runner = f"{shlex.quote(sys.executable)} " if name.endswith(".py") else ""
    return runner + " ".join(shlex.quote(a) for a in [str(HOOKS / name), *args])


def hookset(
    *commands: str, matcher: str = "Bash", event: str = "PreToolUse", timeout: float = 10
) -> HookSet:
    block = {
        event: [
            {
                "matcher": matcher,
                "hooks": [{"type": "command", "command": c, "timeout": timeout} for c in commands],
            }
        ]
    }
    # These tests are about the protocol on the host: the hooks are trusted there
    # (as the user's settings would mark them); test_hook_trust covers who may trust.
    found, _ = parse_hooks(block, "test")
    return HookSet(tuple(found), trusted_commands=frozenset(commands))


def engine(
    settings: Settings, workspace: Path, hooks: HookSet, **policy: object
) -> PermissionEngine:
    pol: EffectivePolicy = load_policy(settings, workspace, **policy)  # type: ignore[arg-type]
    return PermissionEngine(pol, hooks, workspace_host=workspace)


def bash(command: str) -> ToolCall:
    return ToolCall(
        tool_name="Bash", tool_input={"command": command, "description": "d"}, tool_use_id="toolu_1"
    )


async def test_stdin_json_and_environment(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    out = tmp_path / "event.json"
    eng = engine(settings, workspace, hookset(script("record.sh", str(out))))
    decision = await eng.evaluate(bash("ls"), CTX)
    event = json.loads(out.read_text())
    assert event == {
        "session_id": "sess-1",
        "transcript_path": "/tmp/t.jsonl",
        "cwd": "/workspace",
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "ls", "description": "d"},
        "tool_use_id": "toolu_1",
        "agent_id": "sa_1",
        "agent_type": "general-purpose",
    }
    assert Path(f"{out}.dir").read_text().strip() == str(workspace)
    assert decision.behavior == "ask"  # no opinion: the rules (mode default) decide
    assert decision.hook_outcomes[0].decision is None and decision.hook_outcomes[0].error is None


async def test_exit_2_denies_with_stderr_even_when_a_rule_allows(
    settings: Settings, workspace: Path
) -> None:
    eng = engine(settings, workspace, hookset(script("block.sh")), allow=["Bash"])
    d = await eng.evaluate(bash("ls"), CTX)
    assert (d.behavior, d.reason, d.hook) == (
        "deny",
        "blocked: this repository forbids it",
        script("block.sh"),
    )


@pytest.mark.parametrize(
    ("hook_says", "rules", "expected"),
    [
        ("deny", {"allow": ["Bash"]}, "deny"),  # a hook deny wins over an allow rule
        ("ask", {"allow": ["Bash"]}, "ask"),  # a hook ask still asks
        ("ask", {"allow": ["Bash"], "mode": "dontAsk"}, "deny"),  # ...but dontAsk never asks
        ("allow", {}, "allow"),  # skips the mode's prompt
        ("allow", {"mode": "dontAsk"}, "allow"),
        ("allow", {"deny": ["Bash(ls:*)"]}, "deny"),  # never overrides a deny rule
        ("allow", {"mode": "plan"}, "deny"),  # nor the read-only plan mode
    ],
)
async def test_json_decisions_and_precedence(
    settings: Settings, workspace: Path, hook_says: str, rules: dict[str, object], expected: str
) -> None:
    eng = engine(
        settings,
        workspace,
        hookset(script("decide.py", hook_says, f"policy bot: {hook_says}")),
        **rules,
    )
    d = await eng.evaluate(bash("ls -la"), CTX)
    assert d.behavior == expected
    if expected == hook_says:
        assert d.hook is not None and d.reason == f"policy bot: {hook_says}"


async def test_hook_allow_never_skips_an_ask_rule_or_an_unparsed_command(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    (workspace / ".claude").mkdir()
    (workspace / ".claude/settings.json").write_text(
        json.dumps({"permissions": {"ask": ["Bash(git push:*)"]}})
    )
    eng = engine(settings, workspace, hookset(script("decide.py", "allow")))
    assert (await eng.evaluate(bash("git push"), CTX)).behavior == "ask"
    assert (await eng.evaluate(bash("for f in *; do ls ${f%.py}; done"), CTX)).behavior == "ask"


async def test_updated_input_is_validated_and_rechecked(
    settings: Settings, workspace: Path
) -> None:
    eng = engine(
        settings,
        workspace,
        hookset(script("update_input.py", "valid", "ls -la")),
        allow=["Bash(ls:*)"],
    )
    d = await eng.evaluate(bash("ls"), CTX)
    assert d.behavior == "allow" and d.updated_input == {"command": "ls -la", "description": "d"}

    sneaky = engine(
        settings,
        workspace,
        hookset(script("update_input.py", "valid", "ls; rm -rf /")),
        allow=["Bash(ls:*)"],
        deny=["Bash(rm:*)"],
    )
    d = await sneaky.evaluate(bash("ls"), CTX)
    assert d.behavior == "deny" and "rm" in d.reason

    for kind, message in (("missing", "needs command"), ("notobject", "must be a JSON object")):
        bad = engine(settings, workspace, hookset(script("update_input.py", kind)))
        d = await bad.evaluate(bash("ls"), CTX)
        assert d.behavior == "ask" and d.updated_input is None  # error: no decision, rules decide
        assert message in (d.hook_outcomes[0].error or "")


@pytest.mark.parametrize(
    ("name", "error"),
    [
        (
            "malformed.sh",
            "malformed JSON output: Expecting ',' delimiter: line 1 column 54 (char 53)",
        ),
        ("fail.sh", "exited with 1: hook crashed: missing dependency"),
    ],
)
async def test_errors_are_reported_not_allowed(
    settings: Settings, workspace: Path, name: str, error: str
) -> None:
    eng = engine(settings, workspace, hookset(script(name)), mode="dontAsk")
    d = await eng.evaluate(bash("ls"), CTX)
    assert d.behavior == "deny"  # the rules' answer; the broken hook allowed nothing
    assert d.hook_outcomes[0].error == error


async def test_timeout_kills_the_whole_process_group(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    pids_file = tmp_path / "pids"
    eng = engine(
        settings, workspace, hookset(script("hang.sh", str(pids_file)), timeout=0.5), allow=["Bash"]
    )
    started = time.monotonic()
    d = await eng.evaluate(bash("ls"), CTX)
    assert time.monotonic() - started < 5
    assert d.behavior == "allow"  # the allow rule decides; the hook's timeout is only an error
    outcome = d.hook_outcomes[0]
    assert outcome.exit_code is None and "timed out after 0.5s" in (outcome.error or "")
    shell_pid, child_pid = (int(p) for p in pids_file.read_text().split())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_alive(p) for p in (shell_pid, child_pid)):
        time.sleep(0.05)
    assert not _alive(shell_pid) and not _alive(child_pid)


async def test_timed_out_hook_is_not_an_allow(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    eng = engine(settings, workspace, hookset(script("hang.sh", str(tmp_path / "p")), timeout=0.3))
    assert (await eng.evaluate(bash("ls"), CTX)).behavior == "ask"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


async def test_output_is_bounded(settings: Settings, workspace: Path) -> None:
    eng = engine(settings, workspace, hookset(script("flood.sh")))
    d = await eng.evaluate(bash("ls"), CTX)
    assert (
        d.hook_outcomes[0].error
        == f"stdout longer than {MAX_HOOK_OUTPUT_BYTES} bytes; output ignored"
    )


async def test_matcher_selects_tools(settings: Settings, workspace: Path) -> None:
    eng = engine(settings, workspace, hookset(script("block.sh"), matcher="Edit|Write"))
    assert (await eng.evaluate(bash("ls"), CTX)).hook_outcomes == ()
    write = ToolCall(tool_name="Write", tool_input={"file_path": "a", "content": ""})
    assert (await eng.evaluate(write, CTX)).behavior == "deny"
    for everything in ("", "*"):
        eng = engine(settings, workspace, hookset(script("block.sh"), matcher=everything))
        assert (await eng.evaluate(bash("ls"), CTX)).behavior == "deny"


async def test_post_tool_use_gets_the_response(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    out = tmp_path / "post.json"
    eng = engine(settings, workspace, hookset(script("record.sh", str(out)), event="PostToolUse"))
    outcomes = await eng.post_tool_use(bash("ls"), {"stdout": "a\n", "exit_code": 0}, CTX)
    assert len(outcomes) == 1 and outcomes[0].error is None
    event = json.loads(out.read_text())
    assert event["hook_event_name"] == "PostToolUse" and event["tool_response"] == {
        "stdout": "a\n",
        "exit_code": 0,
    }


async def test_documented_bash_validator_example(settings: Settings, workspace: Path) -> None:
    eng = engine(
        settings, workspace, hookset(f"python3 {HOOKS / 'bash_validator.py'}"), allow=["Bash"]
    )
    d = await eng.evaluate(bash("grep -r TODO ."), CTX)
    assert d.behavior == "deny" and "Use 'rg' (ripgrep) instead of 'grep'" in d.reason
    assert (await eng.evaluate(bash("rg TODO"), CTX)).behavior == "allow"


async def test_documented_jq_logger_example(
    settings: Settings, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".claude").mkdir()
    # The command logger from Claude Code's hooks guide, verbatim as a settings string.
    logger = (
        r"""jq -r '"\(.tool_input.command) - \(.tool_input.description // "No description")"'"""
        " >> ~/.claude/bash-command-log.txt"
    )
    settings_doc = {
        "hooks": {
            "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": logger}]}]
        }
    }
    (workspace / ".claude").mkdir()
    (workspace / ".claude/settings.json").write_text(json.dumps(settings_doc))
    settings.config_dir.mkdir(parents=True)  # the user trusts the project's hook
    trust = {"warden": {"trustedHooks": [logger]}}
    (settings.config_dir / "settings.json").write_text(json.dumps(trust))
    eng = PermissionEngine(
        load_policy(settings, workspace), load_hooks(settings, workspace), workspace_host=workspace
    )
    await eng.evaluate(bash("ls -la"), CTX)
    await eng.evaluate(ToolCall(tool_name="Bash", tool_input={"command": "pwd"}), CTX)
    assert (
        tmp_path / ".claude/bash-command-log.txt"
    ).read_text() == "ls -la - d\npwd - No description\n"


def test_bad_hook_config_is_a_policy_error(settings: Settings, workspace: Path) -> None:
    for block, message in (
        ({"PreToolUse": {"matcher": "x"}}, "must be a list"),
        ({"PreToolUse": [{"matcher": "(", "hooks": []}]}, "not a valid regex"),
        ({"PreToolUse": [{"hooks": [{"type": "command"}]}]}, "command must be a non-empty string"),
        ({"PreToolUse": [{"hooks": [{"command": "x", "timeout": -1}]}]}, "timeout must be seconds"),
    ):
        with pytest.raises(PolicyError, match=message):
            parse_hooks(block, "f.json")
    hooks, warnings = parse_hooks(
        {"Stop": [], "PreToolUse": [{"hooks": [{"type": "prompt", "prompt": "x"}]}]}, "f.json"
    )
    assert hooks == [] and len(warnings) == 2


def test_hooks_load_from_every_settings_file(settings: Settings, workspace: Path) -> None:
    (workspace / ".claude").mkdir()
    one = {
        "hooks": {
            "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "true"}]}]
        }
    }
    (workspace / ".claude/settings.json").write_text(json.dumps(one))
    settings.config_dir.mkdir(parents=True)
    two = {
        "hooks": {
            "PostToolUse": [{"hooks": [{"type": "command", "command": "false", "timeout": 5}]}]
        }
    }
    (settings.config_dir / "settings.json").write_text(json.dumps(two))
    loaded = load_hooks(settings, workspace)
    assert [(h.event, h.command, h.source.split(":")[0]) for h in loaded.hooks] == [
        ("PreToolUse", "true", "project"),
        ("PostToolUse", "false", "user"),
    ]
    assert os.path.basename(loaded.hooks[1].source) == "settings.json"


class _RecordingSandbox:
    """A `HookSandbox` that says what it was asked and answers exit 2."""

    def __init__(self) -> None:
        self.commands: list[tuple[str, bytes]] = []

    async def run(
        self,
        command: str,
        stdin: bytes,
        timeout_s: float,
        *,
        cwd: str,
        output_limit: int,
    ) -> SandboxedHookRun:
        self.commands.append((command, stdin))
        return SandboxedHookRun(exit_code=2, stderr=(b"blocked in the sandbox", False))


async def test_a_sandboxed_hook_runs_in_the_sandbox_the_engine_was_given(
    settings: Settings, workspace: Path
) -> None:
    block = {
        "PreToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "check", "sandbox": True}]}
        ]
    }
    hooks = HookSet(tuple(parse_hooks(block, "test")[0]))
    policy = load_policy(settings, workspace, allow=("Bash",))
    alone = PermissionEngine(policy, hooks, workspace_host=workspace)
    decision = await alone.evaluate(bash("ls"), CTX)
    assert decision.behavior == "allow"  # the rule decides; the hook is an error, never an allow
    (outcome,) = decision.hook_outcomes
    assert outcome.error is not None and "given none" in outcome.error
    sandbox = _RecordingSandbox()
    boxed = PermissionEngine(policy, hooks, workspace_host=workspace, sandbox=sandbox)
    decision = await boxed.evaluate(bash("ls"), CTX)
    assert (decision.behavior, decision.reason) == ("deny", "blocked in the sandbox")
    ((command, stdin),) = sandbox.commands
    assert command == "check" and json.loads(stdin)["tool_input"]["command"] == "ls"


async def test_mcp_tools_are_matched_by_their_full_name(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    out = tmp_path / "pre.json"
    hooks = hookset(script("record.sh", str(out)), script("block.sh"), matcher="mcp__db__.*")
    eng = engine(settings, workspace, hooks, allow=("mcp__db", "mcp__web"))
    query = ToolCall(tool_name="mcp__db__query", tool_input={"sql": "drop table t"})
    assert (await eng.evaluate(query, CTX)).behavior == "deny"
    assert json.loads(out.read_text())["tool_input"] == {"sql": "drop table t"}
    other = ToolCall(tool_name="mcp__web__get", tool_input={})
    decision = await eng.evaluate(other, CTX)
    assert (decision.behavior, decision.hook_outcomes) == ("allow", ())
