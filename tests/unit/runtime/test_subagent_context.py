"""A subagent's context is Claude Code's: the memory section after the agent's
prompt, the CLAUDE.md files and the date before the task, preloaded skills after
it, the environment and a git snapshot (taken in the sandbox) in the system
prompt; Explore and Plan leave out CLAUDE.md and the git snapshot."""

from __future__ import annotations

import datetime
import os
import subprocess
from pathlib import Path

from orchestrator.agents.definition import AgentDefinition
from orchestrator.agents.registry import AgentRegistry
from orchestrator.runtime.subagent_context import (
    ContextSources,
    context_reminder,
    memory_section,
    skill_blocks,
)
from sandbox_tools import environment

DAY = datetime.date(2026, 12, 6)


def _sources(tmp_path: Path) -> ContextSources:
    home, ws = tmp_path / "home", tmp_path / "ws"
    (home / "skills" / "style").mkdir(parents=True, exist_ok=True)
    (ws / ".claude" / "skills" / "greet").mkdir(parents=True, exist_ok=True)
    (ws / ".claude" / "agent-memory" / "rev").mkdir(parents=True, exist_ok=True)
    (home / "CLAUDE.md").write_text("USER RULE\n")
    (ws / "CLAUDE.md").write_text("PROJECT RULE\n")
    (ws / ".claude" / "skills" / "greet" / "SKILL.md").write_text(
        "---\nname: greet\ndescription: d\n---\nSAY HI\n"
    )
    (home / "skills" / "style" / "SKILL.md").write_text("USER STYLE\n")
    (ws / ".claude" / "agent-memory" / "rev" / "MEMORY.md").write_text("- [x](x.md) - REMEMBERED\n")
    return ContextSources(claude_dir=home, workspace=ws)


def _agent(**fields: object) -> AgentDefinition:
    return AgentDefinition.model_validate(
        {"name": "rev", "description": "d", "system_prompt": "BODY", **fields}
    )


def test_claude_md_files_and_the_date_come_before_the_task(tmp_path: Path) -> None:
    text = str(context_reminder(_agent(), _sources(tmp_path), DAY)["text"])
    assert text.index("USER RULE") < text.index("PROJECT RULE") < text.index("2026-12-06")
    assert "/workspace/CLAUDE.md" in text  # the path as the subagent sees it
    builtin = _agent(omit_claude_md=True)  # source: built-in (Explore, Plan)
    omitted = str(context_reminder(builtin, _sources(tmp_path), DAY)["text"])
    assert "RULE" not in omitted and "2026-12-06" in omitted
    # an agent file's omitClaudeMd: the pinned Claude Code still sends the files
    from_file = _agent(omit_claude_md=True, source="/x/quiet.md")
    assert "PROJECT RULE" in str(context_reminder(from_file, _sources(tmp_path), DAY)["text"])


def test_memory_section_holds_the_index_and_where_it_lives(tmp_path: Path) -> None:
    section = memory_section(_agent(memory_scope="project"), _sources(tmp_path))
    assert section is not None
    assert "/workspace/.claude/agent-memory/rev/" in section and "REMEMBERED" in section
    assert memory_section(_agent(), _sources(tmp_path)) is None
    empty = memory_section(_agent(memory_scope="local"), _sources(tmp_path))
    assert empty is not None and "no memories yet" in empty


def test_skills_are_preloaded_project_first_then_the_users(tmp_path: Path) -> None:
    blocks, missing = skill_blocks(_agent(skills=("greet", "style", "nope")), _sources(tmp_path))
    text = "\n".join(str(b["text"]) for b in blocks)
    assert text.index("SAY HI") < text.index("USER STYLE")
    assert "name: greet" not in text  # frontmatter left out
    assert missing == ["nope"]


def test_a_link_out_of_the_workspace_is_not_read(tmp_path: Path) -> None:
    sources = _sources(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET")
    assert sources.workspace is not None
    (sources.workspace / "CLAUDE.md").unlink()
    (sources.workspace / "CLAUDE.md").symlink_to(secret)
    assert "SECRET" not in str(context_reminder(_agent(), sources, DAY)["text"])


def test_explore_and_plan_are_read_only_and_leave_out_claude_md_and_git() -> None:
    registry = AgentRegistry()
    for name in ("Explore", "Plan"):
        agent = registry.get(name)
        assert agent.tools == ("Bash", "Read", "Glob", "Grep", "TaskStop", "Skill")
        assert agent.omit_claude_md and agent.omit_git_status
    assert registry.get("Explore").model_alias == "haiku"
    assert registry.get("Plan").model is None  # inherit


def test_the_git_snapshot_ignores_the_repositorys_hooks_and_fsmonitor(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1"}
    for argv in (["git", "init", "-q", "-b", "main"],
                 ["git", "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-q",
                  "--allow-empty", "-m", "first"]):  # fmt: skip
        subprocess.run(argv, cwd=ws, env=env, check=True)
    marker = tmp_path / "ran"
    script = tmp_path / "evil.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\n")
    os.chmod(script, 0o755)
    subprocess.run(["git", "config", "core.fsmonitor", str(script)], cwd=ws, env=env, check=True)
    (ws / ".git" / "hooks" / "post-index-change").write_text(f"#!/bin/sh\ntouch {marker}\n")
    os.chmod(ws / ".git" / "hooks" / "post-index-change", 0o755)
    (ws / "new.txt").write_text("x")
    prompt = environment.system_prompt("BODY", str(ws), environment=True, git_status=True)
    assert not marker.exists()
    assert prompt.startswith("BODY\n\n")
    assert "Is directory a git repo: Yes" in prompt
    assert "Current branch: main" in prompt and "?? new.txt" in prompt and "first" in prompt
    bare = environment.system_prompt("BODY", str(ws), environment=True, git_status=False)
    assert "gitStatus" not in bare


def test_the_skill_tool_offers_trusted_project_skills_and_the_users(tmp_path: Path) -> None:
    """The Skill tool's table and listing: the project's skills as the trust verdict
    read them (none when the workspace is untrusted: `{}`), then the user's."""
    from orchestrator.runtime.subagent_context import available_skills, skill_listing

    sources = _sources(tmp_path)
    assert [s["name"] for s in available_skills(sources)] == ["greet", "style"]
    trusted = ContextSources(sources.claude_dir, sources.workspace,
                             {"greet": "---\ndescription: As trusted\n---\nTRUSTED HI\n"})  # fmt: skip
    [greet, _] = available_skills(trusted)
    assert greet == {"name": "greet", "description": "As trusted", "invocable": True,
                     "directory": "/workspace/.claude/skills/greet", "text": "TRUSTED HI"}  # fmt: skip
    untrusted = ContextSources(sources.claude_dir, sources.workspace, {})
    assert [s["name"] for s in available_skills(untrusted)] == ["style"]
    blocks, missing = skill_blocks(_agent(skills=("greet",)), untrusted)
    assert (blocks, missing) == ([], ["greet"])
    listing = skill_listing(available_skills(trusted))
    # Claude Code's words, unwrapped: the runner sends it as a system-role message
    assert listing.startswith("The following skills are available for use with the Skill tool:")
    assert "- greet: As trusted" in listing and "system-reminder" not in listing


def test_the_listing_says_what_claude_code_says_and_hides_what_it_hides(tmp_path: Path) -> None:
    """Measured from the pinned CLI's subagent: `description - when_to_use`; without a
    description the text's first line (a heading's `#` dropped); a skill with
    `disable-model-invocation: true` is not listed (the tool refuses it)."""
    from orchestrator.runtime.subagent_context import available_skills, skill_listing

    skills = {
        "when": "---\ndescription: Has a when\nwhen_to_use: Use it for WHENX\n"
        'argument-hint: "[file]"\n---\nWHENBODY\n',
        "nodesc": "---\nname: nodesc\n---\n\n# First line of NODESC body.\nmore\n",
        "hidden": "---\ndescription: Hidden\ndisable-model-invocation: true\n---\nHIDDEN\n",
        "long": "---\ndescription: " + "x" * 2000 + "\n---\nL\n",
    }
    found = available_skills(ContextSources(None, tmp_path, skills))
    assert {s["name"]: s["invocable"] for s in found} == {
        "hidden": False, "long": True, "nodesc": True, "when": True,
    }  # fmt: skip
    listing = skill_listing(found)
    assert "- when: Has a when - Use it for WHENX" in listing.splitlines()
    assert "- nodesc: First line of NODESC body." in listing
    assert "hidden" not in listing
    assert "- long: " + "x" * 1535 + "\u2026" in listing


def test_a_managed_lock_on_skills_offers_no_user_skills(tmp_path: Path) -> None:
    """A managed `strictPluginOnlyCustomization` locking skills: Claude Code loads no
    user or project skills (the run passes `project_skills={}` and `user_skills=False`)."""
    from orchestrator.runtime.subagent_context import available_skills, skill_grants

    sources = _sources(tmp_path)
    locked = ContextSources(sources.claude_dir, sources.workspace, {}, user_skills=False)
    assert available_skills(locked) == [] and skill_grants(locked) == ()
    assert [s["name"] for s in available_skills(sources)] == ["greet", "style"]


def test_the_runner_is_given_the_listing_apart_from_the_first_message(tmp_path: Path) -> None:
    """`runner_spec`: a new task's listing goes in `skill_listing` (the runner sends it
    as a system-role message after the first message), not in that message; a resumed
    or forked task gets none (its conversation already has what it began with)."""
    from orchestrator.broker.wire_models import TaskSpec
    from orchestrator.jsontypes import JSONObject
    from orchestrator.runtime.briefing import runner_spec
    from orchestrator.runtime.caps import TaskManagerConfig
    from orchestrator.runtime.tasks import ForkPrefix, TaskContext, TaskInput

    agent = _agent(skills=("greet",))
    ctx = TaskContext(task_id="sa_1", session_id="sa_1", run_id="r", trace_id="t",
                      parent_id=None, depth=1, agent=agent, description="d", timeout_s=60)  # fmt: skip
    task = TaskInput(description="d", prompt="do it")

    def spec(
        history: list[JSONObject], fork: ForkPrefix | None = None, model: str = "claude-sonnet-5"
    ) -> TaskSpec:
        return runner_spec(ctx, task, history=history, max_turns=5, may_delegate=False,
                           model=model, config=TaskManagerConfig(), fork=fork,
                           sources=_sources(tmp_path))  # fmt: skip

    new = spec([])
    assert new.skill_listing.startswith(
        "The following skills are available for use with the Skill tool:"
    )
    assert "- greet: d" in new.skill_listing and "- style: USER STYLE" in new.skill_listing
    after = str(new.context_after)
    assert "SAY HI" in after and "available for use" not in after  # preloaded only
    assert spec([{"role": "user", "content": "x"}]).skill_listing == ""
    fork = ForkPrefix(model="m", system_prompt="s", tool_definitions=[], messages=[])
    assert spec([], fork).skill_listing == ""
    # a model the pinned CLI sends no system-role message: a reminder opening the
    # first message instead (measured on Haiku 4.5)
    haiku = spec([], model="claude-haiku-4-5-20251001")
    assert haiku.skill_listing == ""
    assert haiku.context_before[0]["text"] == (
        f"<system-reminder>\n{new.skill_listing}\n</system-reminder>\n"
    )
    assert "currentDate" in str(haiku.context_before[1])  # the context reminder follows


def test_which_models_take_the_listing_as_a_system_message() -> None:
    """The pinned CLI's model table: its newest models take a mid-conversation system
    message; the older ones, every `claude-3-*` and Haiku 4.5 do not; a model it does
    not know does (the first-party API)."""
    from orchestrator.agents.keys import mid_conversation_system

    takes = ["claude-sonnet-5", "claude-opus-4-8", "claude-fable-5", "my-model"]
    assert all(mid_conversation_system(m) for m in takes)
    not_taken = ["claude-haiku-4-5-20251001", "claude-sonnet-4-5-20250929",
                 "claude-opus-4-20250514", "claude-opus-4-7", "claude-3-5-haiku-20241022"]  # fmt: skip
    assert not any(mid_conversation_system(m) for m in not_taken)
