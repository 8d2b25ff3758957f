"""Locks in "always allow": only an exact rule is offered (one plain simple Bash
command; never a wildcard or anything matched more widely), the person sees the
rule and the file before it is written, the rule lands in the workspace's
.claude/settings.local.json next to what was there, a later run allows exactly that
command and still asks for others, and a link planted in the workspace is refused."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from orchestrator.agents.registry import AgentRegistry
from orchestrator.broker import wire_models
from orchestrator.config import Settings
from orchestrator.errors import ConfigError
from orchestrator.permissions import load_hooks, load_policy
from orchestrator.permissions.always_allow import add_allow_rule, exact_rule
from orchestrator.permissions.approvers import ApprovalQuestion
from orchestrator.runtime.gate import PolicyGate
from orchestrator.runtime.tasks import TaskContext
from orchestrator.ui.approval_prompt import TerminalApprover


@pytest.mark.parametrize(
    ("tool", "command", "rule"),
    [
        ("Bash", "npm  run test", "Bash(npm run test)"),
        ("Bash", "rm -rf build/out.txt", "Bash(rm -rf build/out.txt)"),
        ("Bash", "rm -rf *", None),
        ("Bash", "npm test:*", None),
        ("Bash", "make; curl x", None),
        ("Bash", "echo $(id)", None),
        ("Bash", "echo 'a b'", None),
        ("Bash", "ls > out", None),
        ("Bash", "", None),
        ("Bash", "timeout 5 rm x", None),
        ("Read", "x", None),
    ],
)
def test_only_an_exact_rule_is_offered(tool: str, command: str, rule: str | None) -> None:
    assert exact_rule(tool, {"command": command}) == rule


@pytest.mark.parametrize(
    ("tool", "file_path", "rule"),
    [
        ("Read", "/workspace/src/a.py", "Read(/src/a.py)"),
        ("Edit", "src/a.py", "Edit(/src/a.py)"),
        ("Write", "/workspace/new/b.txt", "Write(/new/b.txt)"),
        ("Write", "/tmp/out.txt", "Write(//tmp/out.txt)"),
        ("Read", "/workspace/src/*.py", None),
        ("Read", "/workspace/src/[ab].py", None),
        ("Edit", "~/notes", None),
        ("Edit", "/workspace/a b.txt", None),
        ("Write", "/workspace/x).txt", None),
        ("Read", "/workspace/src", None),  # a directory: the rule would cover its tree
        ("Read", "/workspace/link.py", None),  # a link: the rule would not name the file
        ("Read", "/workspace", None),
        ("Glob", "/workspace/src/a.py", None),
    ],
)
def test_a_file_rule_names_exactly_the_file(
    tmp_path: Path, tool: str, file_path: str, rule: str | None
) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("")
    (tmp_path / "link.py").symlink_to("src/a.py")
    assert exact_rule(tool, {"file_path": file_path}, tmp_path) == rule


def test_the_rule_is_added_next_to_existing_settings(tmp_path: Path) -> None:
    (tmp_path / ".claude").mkdir()
    settings = tmp_path / ".claude" / "settings.local.json"
    settings.write_text(json.dumps({"permissions": {"allow": ["Read"]}, "env": {"A": "1"}}))
    assert add_allow_rule(tmp_path, "Bash(make test)") == settings
    add_allow_rule(tmp_path, "Bash(make test)")
    assert json.loads(settings.read_text()) == {
        "permissions": {"allow": ["Read", "Bash(make test)"]},
        "env": {"A": "1"},
    }


def test_links_and_bad_files_are_refused_and_left_alone(tmp_path: Path) -> None:
    outside = tmp_path / "outside.json"
    outside.write_text("{}")
    ws = tmp_path / "ws"
    (ws / ".claude").mkdir(parents=True)
    (ws / ".claude" / "settings.local.json").symlink_to(outside)
    with pytest.raises(ConfigError, match="symbolic link"):
        add_allow_rule(ws, "Bash(make)")
    assert outside.read_text() == "{}"
    other = tmp_path / "other"
    other.mkdir()
    (other / ".claude").symlink_to(tmp_path)
    with pytest.raises(ConfigError, match="symbolic link"):
        add_allow_rule(other, "Bash(make)")
    bad = tmp_path / "bad"
    (bad / ".claude").mkdir(parents=True)
    (bad / ".claude" / "settings.local.json").write_text("[1]")
    with pytest.raises(ConfigError, match="not a JSON object"):
        add_allow_rule(bad, "Bash(make)")
    assert (bad / ".claude" / "settings.local.json").read_text() == "[1]"


def _question(rule: str) -> ApprovalQuestion:
    return ApprovalQuestion(
        task_id="sa_x", agent_type="bash", tool_name="Bash",
        tool_input={"command": "make test"}, input_hash="0" * 64, asked_by="mode: default",
        always_rule=rule, always_file="/w/.claude/settings.local.json",
    )  # fmt: skip


async def test_the_person_sees_the_rule_and_confirms_it() -> None:
    out = io.StringIO()
    approver = TerminalApprover(stdin=io.StringIO("w\nn\nw\ny\n"), stdout=out, user="t")
    answer = await approver.approve(_question("Bash(make test)"))
    assert (answer.behavior, answer.scope) == ("allow", "always")
    shown = out.getvalue()
    assert "[w] always allow: add Bash(make test) to /w/.claude/settings.local.json" in shown
    assert shown.count("Always allow: add the rule Bash(make test)") == 2  # asked, declined, asked
    # Without an exact rule the choice is not offered, and typing it does nothing.
    out2 = io.StringIO()
    plain = TerminalApprover(stdin=io.StringIO("w\na\n"), stdout=out2, user="t")
    assert (await plain.approve(_question(""))).scope == "once"
    assert "always allow" not in out2.getvalue()


async def test_an_always_answer_writes_a_rule_the_next_run_obeys(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    settings = Settings(state_dir=tmp_path / "state", config_dir=tmp_path / "cfg")
    asked: list[ApprovalQuestion] = []

    class Always:
        async def approve(self, q: ApprovalQuestion) -> object:
            from orchestrator.permissions.approvers import ApprovalAnswer

            asked.append(q)
            return ApprovalAnswer(behavior="allow", scope="always", decided_by="t")

    def gate() -> PolicyGate:
        return PolicyGate(
            policy=load_policy(settings, ws, mode="default"),
            hooks=load_hooks(settings, ws),
            workspace_host=ws,
            approver=Always(),  # type: ignore[arg-type]
        )

    agent = AgentRegistry.load(settings, ws).get("bash")
    task = TaskContext(task_id="sa_x", session_id="sa_x", run_id="run_x", trace_id="t",
                       parent_id=None, depth=1, agent=agent, description="d", timeout_s=5)  # fmt: skip

    def call(command: str) -> wire_models.PermissionRequest:
        return wire_models.PermissionRequest(
            tool_name="Bash", tool_input={"command": command}, tool_use_id="tu"
        )

    assert (await gate().answer_tool_call(task, call("touch a.txt"))).behavior == "allow"
    assert [q.always_rule for q in asked] == ["Bash(touch a.txt)"]
    rules = json.loads((ws / ".claude" / "settings.local.json").read_text())
    assert rules == {"permissions": {"allow": ["Bash(touch a.txt)"]}}
    # A new run reads the rule: that exact command no longer asks; another still does.
    fresh = gate()
    assert (await fresh.answer_tool_call(task, call("touch a.txt"))).behavior == "allow"
    assert len(asked) == 1
    await fresh.answer_tool_call(task, call("touch b.txt"))
    assert len(asked) == 2


async def test_an_always_edit_rule_covers_that_file_only(tmp_path: Path) -> None:
    from orchestrator.permissions.approvers import ApprovalAnswer

    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    settings = Settings(state_dir=tmp_path / "state", config_dir=tmp_path / "cfg")
    asked: list[ApprovalQuestion] = []

    class Always:
        async def approve(self, q: ApprovalQuestion) -> ApprovalAnswer:
            asked.append(q)
            return ApprovalAnswer(behavior="allow", scope="always", decided_by="t")

    def gate() -> PolicyGate:
        return PolicyGate(
            policy=load_policy(settings, ws, mode="default"),
            hooks=load_hooks(settings, ws),
            workspace_host=ws,
            approver=Always(),
        )

    agent = AgentRegistry.load(settings, ws).get("general-purpose")
    task = TaskContext(task_id="sa_x", session_id="sa_x", run_id="run_x", trace_id="t",
                       parent_id=None, depth=1, agent=agent, description="d", timeout_s=5)  # fmt: skip

    def edit(path: str) -> wire_models.PermissionRequest:
        return wire_models.PermissionRequest(
            tool_name="Write", tool_input={"file_path": path, "content": "x"}, tool_use_id="tu"
        )

    assert (await gate().answer_tool_call(task, edit("/workspace/src/a.py"))).behavior == "allow"
    assert [q.always_rule for q in asked] == ["Write(/src/a.py)"]
    written = json.loads((ws / ".claude" / "settings.local.json").read_text())
    assert written == {
        "permissions": {"allow": ["Write(/src/a.py)"], "ask": ["Write(/src/a.py/*)"]}
    }
    fresh = gate()
    assert (await fresh.answer_tool_call(task, edit("src/a.py"))).behavior == "allow"
    assert len(asked) == 1  # the same file, however spelled: no question
    await fresh.answer_tool_call(task, edit("/workspace/src/b.py"))
    assert len(asked) == 2 and asked[-1].always_rule == "Write(/src/b.py)"
    # An ask rule asked: an allow rule would not stop it asking, so none is offered.
    (ws / ".claude" / "settings.json").write_text('{"permissions": {"ask": ["Write(/src/c.py)"]}}')
    await gate().answer_tool_call(task, edit("/workspace/src/c.py"))
    assert asked[-1].always_rule == ""


def test_a_rule_for_a_missing_path_covers_that_one_file_now_and_later(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    settings = Settings(state_dir=tmp_path / "state", config_dir=tmp_path / "cfg")
    rule = exact_rule("Edit", {"file_path": ".github", "old_string": "", "new_string": ""}, ws)
    assert rule == "Edit(/.github)"
    add_allow_rule(ws, rule)
    written = json.loads((ws / ".claude" / "settings.local.json").read_text())
    assert written == {"permissions": {"allow": ["Edit(/.github)"], "ask": ["Edit(/.github/*)"]}}
    from orchestrator.permissions import ToolCall, evaluate

    def decide(path: str) -> str:
        policy = load_policy(settings, ws, mode="default")
        call = ToolCall(tool_name="Write", tool_input={"file_path": path, "content": "x"})
        return evaluate(policy, call, workspace_host=ws).decision.behavior

    assert decide(".github") == "allow"
    (ws / ".github" / "workflows").mkdir(parents=True)  # later, a directory appears there
    for below in (".github/workflows/x.yml", ".github/x", "/workspace/.github/a/b/c"):
        assert decide(below) == "ask", below


def test_a_fifo_or_a_directory_at_the_settings_file_is_refused_without_blocking(
    tmp_path: Path,
) -> None:
    import os
    import threading

    for make in (os.mkfifo, os.mkdir):
        ws = tmp_path / make.__name__
        (ws / ".claude").mkdir(parents=True)
        make(ws / ".claude" / "settings.local.json")
        outcome: list[BaseException | None] = []

        def write(ws: Path = ws, outcome: list[BaseException | None] = outcome) -> None:
            try:
                add_allow_rule(ws, "Bash(make test)")
                outcome.append(None)
            except BaseException as exc:
                outcome.append(exc)

        worker = threading.Thread(target=write, daemon=True)
        worker.start()
        worker.join(timeout=30)
        assert not worker.is_alive(), "the writer blocked on the settings file"
        assert isinstance(outcome[0], ConfigError) and "regular file" in str(outcome[0])


def test_concurrent_always_answers_lose_no_rule(tmp_path: Path) -> None:
    import threading

    ws = tmp_path / "ws"
    ws.mkdir()
    start = threading.Barrier(40)
    errors: list[BaseException] = []

    def answer(i: int) -> None:
        start.wait()
        try:
            add_allow_rule(ws, f"Bash(make test{i})")
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=answer, args=(i,)) for i in range(40)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors
    allow = json.loads((ws / ".claude" / "settings.local.json").read_text())["permissions"]["allow"]
    assert sorted(allow) == sorted(f"Bash(make test{i})" for i in range(40))


def test_an_always_read_rule_leaves_searches_of_the_workspace_alone(tmp_path: Path) -> None:
    from orchestrator.permissions import ToolCall, evaluate

    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "a.py").write_text("x")
    settings = Settings(state_dir=tmp_path / "state", config_dir=tmp_path / "cfg")
    rule = exact_rule("Read", {"file_path": "src/a.py"}, ws)
    assert rule == "Read(/src/a.py)"
    add_allow_rule(ws, rule)
    policy = load_policy(settings, ws, mode="default")
    grep = ToolCall(tool_name="Grep", tool_input={"pattern": "x", "path": "."})
    assert evaluate(policy, grep, workspace_host=ws).decision.behavior == "allow"


async def test_a_lock_a_sandbox_holds_on_claude_costs_the_rule_not_the_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every sandbox sees .claude (read-only does not stop a flock): one that holds its
    lock for good makes an "always" answer give up on the rule after a bounded wait,
    saying to add it by hand; the call itself is still allowed, as the person said."""
    import fcntl
    import os

    from orchestrator.permissions import always_allow
    from orchestrator.permissions.approvers import ApprovalAnswer

    monkeypatch.setattr(always_allow, "LOCK_WAIT_S", 0.2)
    ws = tmp_path / "ws"
    (ws / ".claude").mkdir(parents=True)
    settings = Settings(state_dir=tmp_path / "state", config_dir=tmp_path / "cfg")
    events: list[tuple[str, dict[str, object]]] = []

    class Always:
        async def approve(self, q: ApprovalQuestion) -> ApprovalAnswer:
            return ApprovalAnswer(behavior="allow", scope="always", decided_by="t")

    gate = PolicyGate(
        policy=load_policy(settings, ws, mode="default"),
        hooks=load_hooks(settings, ws),
        workspace_host=ws,
        approver=Always(),
    )

    async def emit(kind: str, task: object, **data: object) -> None:
        events.append((kind, data))

    monkeypatch.setattr(gate, "_emit", emit)
    agent = AgentRegistry.load(settings, ws).get("bash")
    task = TaskContext(task_id="sa_x", session_id="sa_x", run_id="run_x", trace_id="t",
                       parent_id=None, depth=1, agent=agent, description="d", timeout_s=5)  # fmt: skip
    squatter = os.open(ws / ".claude", os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(squatter, fcntl.LOCK_EX)
        request = wire_models.PermissionRequest(
            tool_name="Bash", tool_input={"command": "touch a.txt"}, tool_use_id="tu"
        )
        assert (await gate.answer_tool_call(task, request)).behavior == "allow"
        with pytest.raises(ConfigError, match="by hand"):
            add_allow_rule(ws, "Bash(touch b.txt)")
    finally:
        os.close(squatter)
    assert not (ws / ".claude" / "settings.local.json").exists()
    failed = [data for kind, data in events if kind == "permission_rule_failed"]
    assert failed and "stayed locked" in str(failed[0]["error"]), events
