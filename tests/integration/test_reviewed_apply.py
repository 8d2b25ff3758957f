"""Locks in reviewed apply (`isolation: worktree`) with the real engine and the
scripted model: a subagent writes only to its own working copy; its change set is
decided by policy before anyone is asked (protected paths, links to host paths,
hard links, large binaries), offered to the approver, merged into the workspace
against what it holds now, and two subagents editing one line end in one applied
change and one conflict that keeps everything it wrote."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from orchestrator.apply.changeset import ApplyReview
from orchestrator.apply.policy import ApplyPolicy
from orchestrator.apply.review import ApplySettings
from orchestrator.apply.workcopy import apply_root
from orchestrator.config import Settings
from orchestrator.permissions.approvers import ApprovalAnswer, ApprovalQuestion, CallbackApprover
from orchestrator.runtime.caps import TaskManagerConfig
from orchestrator.runtime.session import Run
from orchestrator.runtime.tasks import TaskInput, TaskResult
from tests.conftest import UNPRIVILEGED, warden_argv, warden_env
from tests.integration.harness import (
    convo,
    scripted_run,
    task,
    text,
    tool,
    trust_hooks,
    write_agent,
)
from tests.integration.sandbox_fixtures import (  # noqa: F401
    docker_client,
    no_leftovers,
    sandbox_image,
)

pytestmark = pytest.mark.integration

TASK_TIMEOUT_S = 180


def own(path: Path) -> None:
    if os.geteuid() == 0:
        os.chown(path, UNPRIVILEGED, UNPRIVILEGED)


def seed(workspace: Path, **files: str) -> None:
    for name, body in files.items():
        path = workspace / name
        path.parent.mkdir(parents=True, exist_ok=True)
        own(path.parent)
        path.write_text(body)
        own(path)


def config_for(settings: Settings, mode: str, **policy: Any) -> TaskManagerConfig:
    config = TaskManagerConfig.from_settings(settings)
    config.apply = ApplySettings(mode=mode, policy=ApplyPolicy(**policy))  # type: ignore[arg-type]
    return config


def bash_agent(name: str, marker: str, command: str) -> dict[str, Any]:
    return convo(name, {"prompt_contains": marker}, [tool("Bash", command=command)], [text("done")])


async def run_isolated(run: Run, *markers: str) -> list[TaskResult]:
    return await asyncio.wait_for(
        asyncio.gather(
            *(
                run.manager.run_task(
                    TaskInput(
                        description=m,
                        prompt=m,
                        subagent_type="general-purpose",
                        isolation="worktree",
                    )
                )
                for m in markers
            )
        ),
        timeout=TASK_TIMEOUT_S,
    )


def decision_of(settings: Settings, task_id: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (apply_root(settings.state_dir) / task_id / "decision.json").read_text()
    )
    return data


class Recording:
    """An approver that records what it was asked and answers `behavior`."""

    def __init__(self, behavior: str, during: Any = None) -> None:
        self.asked: list[ApprovalQuestion] = []
        self.behavior = behavior
        self.during = during

    def __call__(self, q: ApprovalQuestion) -> ApprovalAnswer:
        if not isinstance(q, ApplyReview):  # a tool call's question: allowed
            return ApprovalAnswer(behavior="allow", channel="test")
        self.asked.append(q)
        if self.during is not None:
            self.during(q)
        bound = q.change_set.sha256
        return ApprovalAnswer(behavior=self.behavior, channel="test", bound_to=bound)  # type: ignore[arg-type]


async def test_review_then_apply_and_the_shared_workspace_untouched_until_then(
    settings: Settings, workspace: Path
) -> None:
    seed(workspace, **{"app.py": "one\ntwo\nthree\nfour\nfive\n"})
    seen_before_yes: list[bool] = []

    def during(q: ApprovalQuestion) -> None:
        # The person edits another line meanwhile: the merge keeps both.
        seen_before_yes.append((workspace / "new.txt").exists())
        (workspace / "app.py").write_text("ONE\ntwo\nthree\nfour\nfive\n")

    approver = Recording("allow", during)
    script = [
        bash_agent(
            "editor", "EDIT",
            "sed -i 's/five/FIVE/' app.py && echo hi > new.txt && ls -a /workspace/.git && "
            "(touch /workspace/.git/planted 2>/dev/null || echo git-read-only)",
        )
    ]  # fmt: skip
    async with scripted_run(
        settings, workspace, script, approver=CallbackApprover(approver),
        config=config_for(settings, "ask"),
    ) as (run, server):  # fmt: skip
        (result,) = await run_isolated(run, "EDIT")
    assert seen_before_yes == [False]
    (review,) = approver.asked
    assert isinstance(review, ApplyReview)
    assert {c.path: c.kind for c in review.change_set.changes} == {
        "app.py": "modified",
        "new.txt": "added",
    }
    assert (workspace / "app.py").read_text() == "ONE\ntwo\nthree\nfour\nFIVE\n"
    assert (workspace / "new.txt").read_text() == "hi\n"
    assert not (workspace / ".git" / "planted").exists()
    assert any("git-read-only" in str(r.body) for r in server.requests)
    assert result.changes is not None and "applied" in result.changes
    assert "applied" in result.render()
    assert not (apply_root(settings.state_dir) / result.task_id).exists()


async def test_policy_rejects_before_anyone_is_asked(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    seed(workspace, **{"keep.txt": "keep\n"})
    approver = Recording("allow")
    script = [
        bash_agent("rc", "RCFILE", "echo 'curl x | sh' > .bashrc && echo ok > fine.txt"),
        bash_agent("link", "HOSTLINK", "ln -s /etc/passwd leak && ln -s ../../etc up"),
        bash_agent("big", "BIGBIN", "head -c 300000 /dev/urandom > big.bin"),
        bash_agent("hard", "HARDLINK", "ln keep.txt twin.txt && echo changed >> twin.txt"),
    ]
    async with scripted_run(
        settings, workspace, script, approver=CallbackApprover(approver),
        config=config_for(settings, "ask", max_binary_bytes=100_000),
    ) as (run, _):  # fmt: skip
        results = await run_isolated(run, "RCFILE", "HOSTLINK", "BIGBIN", "HARDLINK")
    assert approver.asked == []
    rules = {}
    for marker, result in zip(("RCFILE", "HOSTLINK", "BIGBIN", "HARDLINK"), results, strict=True):
        decision = decision_of(settings, result.task_id)
        assert decision["outcome"] == "rejected_by_policy"
        assert result.changes is not None and "rejected by policy" in result.changes
        rules[marker] = {r["path"]: r["rule"] for r in decision["reasons"]}
    assert rules["RCFILE"] == {".bashrc": ".bashrc"}
    assert rules["HOSTLINK"] == {"leak": "link", "up": "link"}
    assert rules["BIGBIN"] == {"big.bin": "size cap"}
    assert "hard link" in rules["HARDLINK"].values()
    for name in (".bashrc", "fine.txt", "leak", "up", "big.bin", "twin.txt"):
        assert not os.path.lexists(workspace / name), name
    assert (workspace / "keep.txt").read_text() == "keep\n"


async def test_two_subagents_on_one_line_one_applies_one_conflicts_nothing_lost(
    settings: Settings, workspace: Path
) -> None:
    seed(workspace, **{"shared.txt": "line\n"})
    script = [
        bash_agent("a", "WRITER-A", "echo from-a > shared.txt && echo a > a-only.txt"),
        bash_agent("b", "WRITER-B", "echo from-b > shared.txt && echo b > b-only.txt"),
    ]
    async with scripted_run(
        settings, workspace, script, config=config_for(settings, "auto")
    ) as (run, _):  # fmt: skip
        results = await run_isolated(run, "WRITER-A", "WRITER-B")
    outcomes = {}
    for marker, r in zip(("WRITER-A", "WRITER-B"), results, strict=True):
        assert r.changes is not None
        outcomes[marker] = "conflict" if "conflict" in r.changes else "applied"
    assert sorted(outcomes.values()) == ["applied", "conflict"]
    winner = next(k for k, v in outcomes.items() if v == "applied")
    loser = results[0] if outcomes["WRITER-A"] == "conflict" else results[1]
    letter = winner[-1].lower()
    assert (workspace / "shared.txt").read_text() == f"from-{letter}\n"
    other = "b" if letter == "a" else "a"
    assert not (workspace / f"{other}-only.txt").exists()  # nothing of the loser applied
    decision = decision_of(settings, loser.task_id)
    assert decision["outcome"] == "conflicted" and decision["conflicts"] == ["shared.txt"]
    kept = apply_root(settings.state_dir) / loser.task_id / "work"
    assert (kept / "shared.txt").read_text() == f"from-{other}\n"  # nothing lost
    # Once the person has resolved it (here: takes the loser's version), apply again.
    (workspace / "shared.txt").write_text("line\n")
    done = subprocess.run(
        warden_argv("apply", loser.task_id, "--hash", f"sha256:{decision['change_set_sha256']}"),
        env=warden_env(WARDEN_STATE_DIR=str(settings.state_dir)),
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (workspace / "shared.txt").read_text() == f"from-{other}\n"
    assert (workspace / f"{other}-only.txt").read_text() == f"{other}\n"


async def test_never_keeps_it_pending_for_warden_apply_and_discard(
    settings: Settings, workspace: Path
) -> None:
    seed(workspace, **{"a.txt": "a\n"})
    script = [
        bash_agent("one", "FIRST", "echo first > one.txt"),
        bash_agent("two", "SECOND", "echo second > two.txt"),
    ]
    async with scripted_run(
        settings, workspace, script, config=config_for(settings, "never")
    ) as (run, _):  # fmt: skip
        first, second = await run_isolated(run, "FIRST", "SECOND")
    assert first.changes is not None and "wait for review" in first.changes
    assert not (workspace / "one.txt").exists() and not (workspace / "two.txt").exists()
    env = warden_env(WARDEN_STATE_DIR=str(settings.state_dir))
    listed = subprocess.run(
        warden_argv("ps", "--pending"), env=env, capture_output=True, text=True, check=True
    )
    assert first.task_id in listed.stdout and second.task_id in listed.stdout
    # Without a terminal: the bare command shows the review and applies nothing; a
    # yes names the hash it showed, and a hash that is not the change set's is refused.
    bare = subprocess.run(
        warden_argv("apply", first.task_id), env=env, capture_output=True, text=True, check=False
    )
    assert bare.returncode == 2 and "│+first" in bare.stdout, bare.stderr
    assert not (workspace / "one.txt").exists()
    digest = decision_of(settings, first.task_id)["change_set_sha256"]
    assert f"warden apply {first.task_id} --hash sha256:{digest}" in bare.stderr
    stale = subprocess.run(
        warden_argv("apply", first.task_id, "--hash", "sha256:" + "f" * 64),
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert stale.returncode == 2 and "changed since you reviewed it" in stale.stderr
    assert not (workspace / "one.txt").exists()
    subprocess.run(
        warden_argv("apply", first.task_id, "--hash", f"sha256:{digest}"),
        env=env, check=True, capture_output=True,
    )  # fmt: skip
    subprocess.run(warden_argv("discard", second.task_id), env=env, check=True, capture_output=True)
    assert (workspace / "one.txt").read_text() == "first\n"
    assert not (workspace / "two.txt").exists()
    assert not (apply_root(settings.state_dir) / second.task_id).exists()
    listed = subprocess.run(
        warden_argv("ps", "--pending"), env=env, capture_output=True, text=True, check=True
    )
    assert first.task_id not in listed.stdout and second.task_id not in listed.stdout


async def test_what_is_applied_is_what_was_reviewed_not_what_the_copy_holds_later(
    settings: Settings, workspace: Path
) -> None:
    seed(workspace, **{"doc.txt": "doc\n"})
    copies: list[Path] = []

    def during(q: ApprovalQuestion) -> None:
        # After the review is shown, something rewrites the copy and swaps a file in
        # it for a link to a host file: neither may reach the workspace.
        work = apply_root(settings.state_dir) / q.task_id / "work"
        copies.append(work)
        (work / "doc.txt").write_text("rewritten after review\n")
        (work / "new.txt").unlink()
        (work / "new.txt").symlink_to("/etc/hostname")

    approver = Recording("allow", during)
    script = [bash_agent("w", "REVIEWED", "echo reviewed > doc.txt && echo new > new.txt")]
    async with scripted_run(
        settings, workspace, script, approver=CallbackApprover(approver),
        config=config_for(settings, "ask"),
    ) as (run, _):  # fmt: skip
        (result,) = await run_isolated(run, "REVIEWED")
    assert copies
    assert (workspace / "doc.txt").read_text() == "reviewed\n"
    assert not (workspace / "new.txt").is_symlink()
    assert (workspace / "new.txt").read_text() == "new\n"
    assert result.changes is not None and "applied" in result.changes


async def test_a_pre_apply_hook_blocks_a_change_set_before_anyone_is_asked(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    seen = tmp_path / "pre-apply-input.json"
    hook = (
        f'input=$(cat); printf %s "$input" > {seen}; '
        'if printf %s "$input" | grep -q forbidden; then '
        "echo 'the team forbids forbidden.txt' >&2; exit 2; fi"
    )
    claude = workspace / ".claude"
    claude.mkdir()
    own(claude)
    doc = {
        "hooks": {"PreApply": [{"matcher": "*", "hooks": [{"type": "command", "command": hook}]}]}
    }
    (claude / "settings.json").write_text(json.dumps(doc))
    own(claude / "settings.json")
    trust_hooks(settings, hook)
    approver = Recording("allow")
    script = [
        bash_agent("bad", "FORBIDDEN", "echo x > forbidden.txt"),
        bash_agent("good", "ALLOWED", "echo y > allowed.txt"),
    ]
    async with scripted_run(
        settings, workspace, script, approver=CallbackApprover(approver),
        config=config_for(settings, "ask"),
    ) as (run, _):  # fmt: skip
        bad, good = await run_isolated(run, "FORBIDDEN", "ALLOWED")
    decision = decision_of(settings, bad.task_id)
    assert decision["outcome"] == "rejected_by_policy"
    assert "the team forbids forbidden.txt" in decision["reasons"][0]["reason"]
    assert [q.task_id for q in approver.asked] == [good.task_id]
    assert not (workspace / "forbidden.txt").exists()
    assert (workspace / "allowed.txt").read_text() == "y\n"
    payload = json.loads(seen.read_text())
    assert payload["hook_event_name"] == "PreApply" and payload["tool_name"] == "Apply"
    assert [c["path"] for c in payload["tool_input"]["changes"]] in (
        ["forbidden.txt"],
        ["allowed.txt"],
    )


async def test_tasks_started_inside_an_isolated_task_work_in_its_copy(
    settings: Settings, workspace: Path
) -> None:
    seed(workspace, **{"a.txt": "a\n"})
    live: list[bool] = []

    def during(q: ApprovalQuestion) -> None:  # nothing of any of them is live before the yes
        live.extend((workspace / name).exists() for name in ("plain.txt", "own.txt", "seen.txt"))

    approver = Recording("allow", during)
    script = [
        convo(
            "outer", {"prompt_contains": "OUTER"},
            [task("INNER-PLAIN go")],
            [task("INNER-OWN go", isolation="worktree")],
            [tool("Bash", command="cat plain.txt own.txt > seen.txt")],
            [text("outer done")],
        ),
        bash_agent("plain", "INNER-PLAIN", "echo plain > plain.txt"),
        bash_agent("own", "INNER-OWN", "cat plain.txt > own.txt"),
    ]  # fmt: skip
    config = config_for(settings, "ask")
    config.max_depth = 2
    async with scripted_run(
        settings, workspace, script, approver=CallbackApprover(approver), config=config
    ) as (run, _):  # fmt: skip
        (result,) = await run_isolated(run, "OUTER")
    # One review, the outer task's: its children's changes are part of it.
    (review,) = approver.asked
    assert isinstance(review, ApplyReview) and review.task_id == result.task_id
    assert {c.path for c in review.change_set.changes} == {"plain.txt", "own.txt", "seen.txt"}
    assert live == [False, False, False]
    assert (workspace / "seen.txt").read_text() == "plain\nplain\n"  # each saw the copy
    assert (workspace / "own.txt").read_text() == "plain\n"
    assert result.changes is not None and "applied" in result.changes


async def test_an_empty_directory_replaced_by_a_file_applies_unless_the_workspace_changed_it(
    settings: Settings, workspace: Path
) -> None:
    for name in ("cache", "logs"):
        (workspace / name).mkdir()
        own(workspace / name)

    def during(q: ApprovalQuestion) -> None:
        assert isinstance(q, ApplyReview)
        if any(c.path == "logs" for c in q.change_set.changes):  # the person uses logs/
            (workspace / "logs" / "today.log").write_text("the person's\n")

    approver = Recording("allow", during)
    script = [
        bash_agent("cache", "CACHE-FILE", "rmdir cache && echo cached > cache"),
        bash_agent("logs", "LOGS-FILE", "rmdir logs && echo logged > logs"),
    ]
    async with scripted_run(
        settings, workspace, script, approver=CallbackApprover(approver),
        config=config_for(settings, "ask"),
    ) as (run, _):  # fmt: skip
        cache, logs = await run_isolated(run, "CACHE-FILE", "LOGS-FILE")
    reviews = [q for q in approver.asked if isinstance(q, ApplyReview)]
    kinds = {c.path: (c.kind, c.old_type) for q in reviews for c in q.change_set.changes}
    assert kinds == {"cache": ("added", "dir"), "logs": ("added", "dir")}
    assert (workspace / "cache").read_text() == "cached\n"
    assert cache.changes is not None and "applied" in cache.changes
    # The workspace's side changed (a file put in the directory): never applied.
    assert (workspace / "logs" / "today.log").read_text() == "the person's\n"
    assert logs.changes is not None and "conflict" in logs.changes
    decision = decision_of(settings, logs.task_id)
    assert decision["outcome"] == "conflicted" and decision["conflicts"] == ["logs"]
    kept = apply_root(settings.state_dir) / logs.task_id / "work"
    assert (kept / "logs").read_text() == "logged\n"  # nothing lost


async def test_a_change_set_is_decided_by_the_rules_its_task_ran_under(
    settings: Settings, workspace: Path
) -> None:
    """The run asks before docs/ is edited; the scribe's agent file runs it in
    `dontAsk`, where that ask is a deny: its change to docs/ (written by an allowed
    interpreter, which no write rule sees) is rejected before anyone is asked, as
    an Edit of it by that task would have been."""
    seed(workspace, **{"docs/a.md": "a\n"})
    settings_doc = {"permissions": {"ask": ["Edit(docs/**)"], "allow": ["Bash(python3:*)"]}}
    (workspace / ".claude").mkdir(exist_ok=True)
    (workspace / ".claude" / "settings.json").write_text(json.dumps(settings_doc))
    write_agent(
        workspace, "scribe",
        "---\nname: scribe\ndescription: writes docs\npermissionMode: dontAsk\n---\nWrite.\n",
    )  # fmt: skip
    command = "python3 -c \"open('docs/a.md','w').write('the scribe\\n')\""
    approver = Recording("allow")
    async with scripted_run(
        settings, workspace, [bash_agent("scribe", "SCRIBE", command)],
        approver=CallbackApprover(approver), config=config_for(settings, "ask"),
    ) as (run, _):  # fmt: skip
        result = await asyncio.wait_for(
            run.manager.run_task(
                TaskInput(description="SCRIBE", prompt="SCRIBE", subagent_type="scribe",
                          isolation="worktree")
            ),
            timeout=TASK_TIMEOUT_S,
        )  # fmt: skip
    assert approver.asked == []  # no person is asked about it
    assert result.changes is not None and "rejected" in result.changes
    decision = decision_of(settings, result.task_id)
    assert decision["outcome"] == "rejected_by_policy"
    (reason,) = decision["reasons"]
    assert reason["path"] == "docs/a.md" and "dontAsk" in reason["reason"]
    assert (workspace / "docs" / "a.md").read_text() == "a\n"
    kept = apply_root(settings.state_dir) / result.task_id / "work"
    assert (kept / "docs" / "a.md").read_text() == "the scribe\n"  # it did write it
