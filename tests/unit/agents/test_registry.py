"""The agent registry: built-in types, real-world Claude Code subagent files (long
example-laden descriptions, tool lists in both forms, unknown keys, `inherit`),
project > user > built-in precedence, and errors that name the file and the fix."""

from __future__ import annotations

import logging
import os
import re
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.agents.definition import AgentDefinition
from orchestrator.agents.files import MAX_AGENT_FILE_BYTES, load_agent_file
from orchestrator.agents.registry import AgentRegistry
from orchestrator.config import Settings
from orchestrator.errors import AgentDefinitionError, UnknownAgentError
from sandbox_tools.wire import TOOL_NAMES
from tests.conftest import without_waiting_on

# The style Claude Code's `/agents` command writes: one unquoted line with literal
# `\n`s and `user:`/`assistant:` colons, which strict YAML rejects.
CODE_REVIEWER = r"""---
name: code-reviewer
description: Use this agent when the user has written or modified code and wants it reviewed for correctness, readability and security. Examples:\n\n<example>\nContext: The user just implemented a new endpoint.\nuser: "I've added the /orders endpoint, can you check it?"\nassistant: "I'll use the code-reviewer agent to review the new endpoint."\n<commentary>\nNew code was written, so a review is due.\n</commentary>\n</example>\n\n<example>\nContext: A refactor touched many files.\nuser: "Refactor done."\nassistant: "Let me launch the code-reviewer agent on the changed files."\n</example>
model: sonnet
color: red
---

You are a senior code reviewer.

When invoked:
1. Run `git diff` to see recent changes.
2. Focus on the modified files.

Report findings by priority: critical, warnings, suggestions.
"""

TEST_RUNNER = """\
---
name: test-runner
description: "Runs the test suite and fixes failures.\\nUse PROACTIVELY after code changes."
tools: Bash, Read, Grep, Glob
maxTurns: 25
timeout: 10m
memory: 1g
cpus: 1.5
pids: 256
---
You are a test automation expert. Run the tests, read failures, fix the cause
(not the test), and re-run until green.
"""

DOC_WRITER = """\
---
name: doc-writer
description: >-
  Writes and updates documentation: READMEs, API references and
  changelogs. Use when docs lag behind code.
tools: Read, Write, Edit, Glob, WebFetch, mcp__github__get_issue
model: inherit
color: purple
permissionMode: acceptEdits
skills:
  - markdown-style
hooks:
  PostToolUse:
    - matcher: "Edit|Write"
      hooks:
        - type: command
          command: "./scripts/lint-docs.sh"
---
You write clear, accurate documentation.

- Keep examples runnable.
- Prefer short sentences.
"""

SECURITY_AUDITOR = """\
---
name: security-auditor
description: |
  Audits the workspace for leaked secrets and unsafe shell usage.

  <example>
  user: "Is anything secret committed here?"
  assistant: "I'll run the security-auditor agent."
  </example>
tools:
  - Bash
  - Read
  - Grep
  - Write
disallowedTools: [Write]
image: bash
maxTurns: 5
---
Search for secrets with grep; never print a full secret, only its location.
"""


def _write(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text)
    return path


def _project(workspace: Path) -> Path:
    return workspace / ".claude" / "agents"


def _user(settings: Settings) -> Path:
    return settings.config_dir / "agents"


def test_builtins_without_any_files(settings: Settings, workspace: Path) -> None:
    registry = AgentRegistry.load(settings, workspace)
    assert registry.names() == ["Explore", "Plan", "bash", "general-purpose"]
    general = registry.get("general-purpose")
    # Task is in the definition; the TaskManager offers it only while nesting is allowed.
    assert general.tools == (
        "Bash",
        "Read",
        "Write",
        "Edit",
        "Glob",
        "Grep",
        "TaskOutput",
        "TaskStop",
        "NotebookEdit",
        "TodoWrite",
        "WebFetch",
        "WebSearch",
        "Skill",
        "Task",
    )
    # No image of its own: the run's choice applies (agents.images), by default `agent`.
    assert (general.image, general.max_turns, general.timeout_s) == (None, 50, 900.0)
    assert general.model is None and general.source == "built-in"
    assert "/workspace" in general.system_prompt and "final message" in general.system_prompt
    bash = registry.get("bash")
    assert (bash.tools, bash.image, bash.max_turns, bash.timeout_s) == (
        ("Bash", "Read", "Write", "Edit", "Glob", "TaskOutput", "TaskStop"),
        "bash",
        30,
        900.0,
    )
    assert "/workspace" in bash.system_prompt and "final message" in bash.system_prompt


def test_real_world_files_load(settings: Settings, workspace: Path) -> None:
    project = _project(workspace)
    _write(project, "code-reviewer.md", CODE_REVIEWER)
    _write(project, "test-runner.md", TEST_RUNNER)
    _write(project / "docs", "doc-writer.md", DOC_WRITER)
    _write(project, "security-auditor.md", SECURITY_AUDITOR)
    registry = AgentRegistry.load(settings, workspace)
    assert registry.names() == [
        "Explore",
        "Plan",
        "bash",
        "code-reviewer",
        "doc-writer",
        "general-purpose",
        "security-auditor",
        "test-runner",
    ]

    reviewer = registry.get("code-reviewer")
    assert reviewer.tools is None  # absent = every tool
    assert (reviewer.model, reviewer.model_alias) == ("claude-sonnet-5", "sonnet")
    assert reviewer.description.startswith("Use this agent when the user has written")
    assert '\nuser: "I\'ve added the /orders endpoint, can you check it?"\n' in reviewer.description
    assert reviewer.description.count("<example>") == 2
    assert reviewer.system_prompt.startswith("You are a senior code reviewer.")
    assert "2. Focus on the modified files." in reviewer.system_prompt
    assert (reviewer.color, reviewer.extra) == ("red", {})
    assert reviewer.source == str(project / "code-reviewer.md")

    runner = registry.get("test-runner")
    assert runner.tools == ("Bash", "Read", "Grep", "Glob")
    assert runner.description == (
        "Runs the test suite and fixes failures.\nUse PROACTIVELY after code changes."
    )
    assert (runner.max_turns, runner.timeout_s) == (25, 600.0)
    assert (runner.memory_limit, runner.cpus, runner.pids) == (1024**3, 1.5, 256)

    writer = registry.get("doc-writer")
    assert writer.model is None  # inherit
    assert writer.tools == ("Read", "Write", "Edit", "Glob", "WebFetch")
    assert writer.dropped_tools == ()
    assert writer.mcp_tools == ("mcp__github__get_issue",)  # its server starts, if defined
    assert writer.description.endswith("Use when docs lag behind code.")
    assert writer.permission_mode == "acceptEdits"
    assert writer.skills == ("markdown-style",)
    [hook] = writer.hooks
    assert (hook.event, hook.matcher, hook.command) == (
        "PostToolUse",
        "Edit|Write",
        "./scripts/lint-docs.sh",
    )

    auditor = registry.get("security-auditor")
    assert auditor.tools == ("Bash", "Read", "Grep")  # Write is disallowed
    assert auditor.image == "bash"
    assert "<example>\nuser:" in auditor.description
    assert auditor.max_turns == 5

    warnings = "\n".join(registry.warnings)
    assert "code-reviewer.md: frontmatter is not valid YAML" in warnings
    assert "dropped tool 'WebFetch'" not in warnings  # warden runs it now
    assert "dropped tool 'mcp__github__get_issue'" not in warnings


def test_project_beats_user_beats_builtin(settings: Settings, workspace: Path) -> None:
    def agent(name: str, prompt: str) -> str:
        return f"---\nname: {name}\ndescription: {prompt} version\n---\n{prompt} prompt\n"

    _write(_user(settings), "gp.md", agent("general-purpose", "user"))
    _write(_user(settings), "shared.md", agent("shared", "user"))
    _write(_user(settings), "mine.md", agent("mine", "user"))
    _write(_project(workspace), "shared.md", agent("shared", "project"))
    registry = AgentRegistry.load(settings, workspace)
    assert registry.get("general-purpose").system_prompt == "user prompt"
    assert registry.get("shared").system_prompt == "project prompt"
    assert registry.get("mine").system_prompt == "user prompt"
    assert registry.get("bash").source == "built-in"
    assert registry.overridden == {
        "general-purpose": ["built-in"],
        "shared": [str(_user(settings) / "shared.md")],
    }
    assert AgentRegistry.load(settings, None).get("shared").system_prompt == "user prompt"


def test_unknown_agent_type_lists_the_valid_ones(settings: Settings, workspace: Path) -> None:
    registry = AgentRegistry.load(settings, workspace)
    with pytest.raises(UnknownAgentError) as caught:
        registry.get("general_purpose")
    message = str(caught.value)
    assert "unknown subagent type 'general_purpose'" in message
    assert "Did you mean 'general-purpose'?" in message
    assert "Valid types: Explore, Plan, bash, general-purpose" in message
    assert isinstance(caught.value, LookupError)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("---\nname: a\ndescription: d\ntools: 3\n---\nhi\n", "comma-separated string"),
        ("---\nname: a\ndescription: d\nhi\n", "frontmatter is not closed"),
        ("---\n- a list\n---\nhi\n", "must be `key: value` lines"),
        ("---\nname: a\ndescription: d\nnot a key line\n---\nhi\n", "line 4 of the frontmatter"),
        ("---\ndescription: d\n---\nhi\n", "has no `name`"),
        ("---\nname: a\n---\nhi\n", "has no `description`"),
        ("---\nname: a\ndescription: d\n---\n\n", "no system prompt"),
        ("---\nname: a b\ndescription: d\n---\nhi\n", "`name`: String should match"),
        ("---\nname: a\ndescription: d\nmaxTurns: lots\n---\nhi\n", "`maxTurns` must be a whole"),
        ("---\nname: a\ndescription: d\nmaxTurns: 0\n---\nhi\n", "`maxTurns`: Input should be"),
        ("---\nname: a\ndescription: d\nmemory: lots\n---\nhi\n", "nor a size"),
        ("---\nname: a\ndescription: d\nmemory: 1k\n---\nhi\n", "`warden.memory`: Input should"),
        ("---\nname: a\ndescription: d\nwarden: {memory: lots}\n---\nhi\n", "is not a size"),
        ("---\nname: a\ndescription: d\nwarden: {ram: 1g}\n---\nhi\n", "`warden.ram` is not"),
        ("---\nname: a\ndescription: d\nwarden: 3\n---\nhi\n", "`warden:` must be a mapping"),
        ("---\nname: a\ndescription: d\ncpus: 1\nwarden: {cpus: 2}\n---\nhi\n", "both at the"),
        ("---\nname: a\ndescription: d\nisolation: remote\n---\nhi\n", "not an isolation"),
        ("---\nname: a\ndescription: d\nbackground: maybe\n---\nhi\n", "true or false"),
        ("---\nname: a\ndescription: d\ntimeout: soon\n---\nhi\n", "is not a duration"),
        ("---\nname: a\ndescription: d\ncpus: many\n---\nhi\n", "is not a number"),
        ("---\nname: a\ndescription: d\npermissionMode: yolo\n---\nhi\n", "is not a mode"),
        ("---\nname: a\ndescription: d\nhooks: 3\n---\nhi\n", "`hooks` must be an object"),
    ],
)
def test_malformed_files_name_the_file_and_the_fix(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = _write(tmp_path, "agent.md", text)
    with pytest.raises(AgentDefinitionError) as caught:
        load_agent_file(path)
    assert str(path) in str(caught.value)
    assert expected in str(caught.value)


@pytest.mark.parametrize(
    ("tools", "kept", "said"),
    [
        ("Read, Bsh", ("Read",), "dropped tool 'Bsh': an unknown tool (did you mean 'Bash'?)"),
        ("[Frobnicate, Grep]", ("Grep",), "dropped tool 'Frobnicate': an unknown tool"),
        ("Bash(git:*), Read", ("Read",), "'Bash(git:*)': a permission rule, not a tool name"),
        ("Read, TaskList, SendMessage", ("Read",), "dropped tool 'SendMessage'"),
        ("AskUserQuestion", (), "has no tool warden runs"),
        ("[]", (), "has no tool warden runs"),
    ],
)
def test_tools_warden_does_not_run_are_dropped_one_warning_each(
    tmp_path: Path, tools: str, kept: tuple[str, ...], said: str
) -> None:
    path = _write(tmp_path, "agent.md", f"---\nname: a\ndescription: d\ntools: {tools}\n---\nhi\n")
    agent, warnings = load_agent_file(path)
    assert agent.tools == kept
    assert any(said in w and str(path) in w for w in warnings), warnings
    # A tool never comes back through the default: an empty list means no tools.
    assert agent.tools is not None


def test_every_problem_is_reported_in_one_pass_and_the_rest_load(
    settings: Settings, workspace: Path
) -> None:
    project = _project(workspace)
    _write(project, "README.md", "# Our agents\n\nSee below.\n")
    _write(project, "broken.md", "---\nname: broken\ndescription: y\nmaxTurns: lots\n---\nz\n")
    _write(project, "nameless.md", "---\ndescription: y\n---\nz\n")
    _write(project, "good.md", "---\nname: good\ndescription: fine\ntools: Read, Nope\n---\nz\n")
    registry = AgentRegistry.load(settings, workspace)
    assert registry.get("good").tools == ("Read",)
    problems = "\n".join(registry.problems)
    assert "broken.md: `maxTurns` must be a whole number" in problems
    assert "nameless.md: the frontmatter has no `name`" in problems
    assert "README.md" not in problems  # not an agent file: skipped quietly
    assert len(registry.problems) == 2
    with pytest.raises(UnknownAgentError, match=r"'broken' did not load: .*maxTurns"):
        registry.get("broken")


def test_duplicate_names_in_one_source_keep_the_first(settings: Settings, workspace: Path) -> None:
    _write(_project(workspace), "one.md", "---\nname: twin\ndescription: d\n---\nfirst\n")
    _write(_project(workspace), "two.md", "---\nname: twin\ndescription: d\n---\nsecond\n")
    registry = AgentRegistry.load(settings, workspace)
    assert registry.get("twin").system_prompt == "first"
    assert any("both define agent 'twin'" in p for p in registry.problems)


def test_model_aliases_resolve_through_the_settings(settings: Settings, workspace: Path) -> None:
    for name, model in (("s", "sonnet"), ("o", "opus"), ("h", "haiku"), ("i", "inherit")):
        _write(
            _project(workspace),
            f"{name}.md",
            f"---\nname: {name}\ndescription: d\nmodel: {model}\n---\nx\n",
        )
    _write(
        _project(workspace),
        "x.md",
        "---\nname: x\ndescription: d\nmodel: claude-custom-1\n---\nx\n",
    )
    registry = AgentRegistry.load(settings, workspace)
    assert registry.get("s").model == settings.model_aliases["sonnet"]
    assert (registry.get("o").model, registry.get("o").model_alias) == ("claude-opus-4-8", "opus")
    assert registry.get("h").model == "claude-haiku-4-5"
    assert registry.get("i").model is None  # the parent's model
    assert (registry.get("x").model, registry.get("x").model_alias) == ("claude-custom-1", None)
    mapped = replace(Settings.from_env(
        {"ANTHROPIC_DEFAULT_OPUS_MODEL": "my-opus", "HOME": str(workspace)}
    ), config_dir=settings.config_dir)
    assert AgentRegistry.load(mapped, workspace).get("o").model == "my-opus"


def test_permission_mode_only_narrows(tmp_path: Path) -> None:
    from orchestrator.permissions import EffectivePolicy, narrow_mode

    base = EffectivePolicy(mode="acceptEdits")
    assert narrow_mode(base, "plan", "agent a").mode == "plan"
    assert narrow_mode(base, "dontAsk", "agent a").mode_source == "agent a"
    assert narrow_mode(base, "bypassPermissions", "agent a") is base
    assert narrow_mode(EffectivePolicy(mode="plan"), "default", "agent a").mode == "plan"
    path = _write(tmp_path, "p.md", "---\nname: p\ndescription: d\npermissionMode: plan\n---\nx\n")
    assert load_agent_file(path)[0].permission_mode == "plan"


def test_project_links_out_of_the_workspace_are_refused(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    # A subagent can write the workspace: a link to a host file must not be read
    # into a system prompt (which the next subagent would see).
    secret = _write(tmp_path / "host", "secret.md", "---\nname: s\ndescription: d\n---\nKEY\n")
    project = _project(workspace)
    project.mkdir(parents=True)
    os.symlink(secret, project / "innocent.md")
    registry = AgentRegistry.load(settings, workspace)
    assert "s" not in registry
    assert any(re.search(r"outside .*refusing to read it", p) for p in registry.problems)
    (project / "innocent.md").unlink()
    project.rmdir()
    os.symlink(secret.parent, project)
    registry = AgentRegistry.load(settings, workspace)
    assert "s" not in registry
    assert any("outside the workspace" in p for p in registry.problems)
    # The user's own config dir may link wherever the user likes.
    _user(settings).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(secret.parent, _user(settings))
    assert AgentRegistry.load(settings, None).get("s").system_prompt == "KEY"


def test_oversized_files_are_refused(tmp_path: Path) -> None:
    body = "x" * (MAX_AGENT_FILE_BYTES + 1)
    path = _write(tmp_path, "big.md", f"---\nname: big\ndescription: d\n---\n{body}\n")
    with pytest.raises(AgentDefinitionError, match="over the 262144-byte limit"):
        load_agent_file(path)


def test_durations_sizes_and_wildcard_tools(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "a.md",
        "---\nname: a\ndescription: d\ntools: '*'\nwarden:\n  timeout: 1h\n  memory: 512MiB\n---\nhi\n",
    )
    agent, warnings = load_agent_file(path)
    assert agent.tools is None and warnings == []
    assert (agent.timeout_s, agent.memory_limit) == (3600.0, 512 * 1024**2)
    agent, _ = load_agent_file(
        _write(tmp_path, "b.md", "---\nname: b\ndescription: d\ntimeout: 90\n---\nhi\n")
    )
    assert agent.timeout_s == 90.0


def test_dropped_tools_are_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    settings = Settings(state_dir=tmp_path / "s", config_dir=tmp_path / "c")
    _write(
        _user(settings), "w.md", "---\nname: w\ndescription: d\ntools: Read, AskUserQuestion\n---\nx\n"
    )
    with caplog.at_level(logging.WARNING, logger="orchestrator.agents.registry"):
        registry = AgentRegistry.load(settings, None)
    assert registry.get("w").tools == ("Read",)
    assert "dropped tool 'AskUserQuestion'" in caplog.text


def test_mcp_resource_tools_are_kept_under_either_name(tmp_path: Path) -> None:
    """ListMcpResourcesTool and ReadMcpResourceTool (and their older names, as Claude
    Code's alias table reads them) are kept; ReadMcpResourceDirTool is dropped with
    its reason."""
    path = _write(tmp_path, "r.md", (
        "---\nname: r\ndescription: d\n"
        "tools: ListMcpResources, ReadMcpResourceTool, ReadMcpResourceDir\n---\nx\n"
    ))  # fmt: skip
    agent, _ = load_agent_file(path)
    assert agent.tools == ("ListMcpResourcesTool", "ReadMcpResourceTool")
    assert agent.dropped_tools == ("ReadMcpResourceDirTool",)


def test_definitions_are_closed_and_check_tools() -> None:
    with pytest.raises(ValueError, match="unknown tools"):
        AgentDefinition(name="x", description="d", system_prompt="p", tools=("Nope",))
    assert AgentDefinition(name="x", description="d", system_prompt="p", tools=()).tools == ()
    with pytest.raises(ValueError, match="Extra inputs"):
        AgentDefinition.model_validate(
            {"name": "x", "description": "d", "system_prompt": "p", "colour": "red"}
        )
    assert set(TOOL_NAMES) <= set(AgentRegistry().get("general-purpose").tools or ())


def test_an_agent_file_that_is_a_fifo_is_a_problem_not_a_wait(
    settings: Settings, workspace: Path
) -> None:
    """A FIFO among the agent files is reported as a problem at once; nothing waits in
    `open` for a writer (which held `warden run` at its start for good)."""
    project = _project(workspace)
    project.mkdir(parents=True)
    _write(project, "ok.md", "---\nname: ok\ndescription: d\n---\nhi\n")
    os.mkfifo(project / "stuck.md")
    registry = without_waiting_on(
        project / "stuck.md", lambda: AgentRegistry.load(settings, workspace)
    )
    assert isinstance(registry, AgentRegistry), registry
    assert "ok" in registry
    assert any("stuck.md" in p and "not a regular file" in p for p in registry.problems)
