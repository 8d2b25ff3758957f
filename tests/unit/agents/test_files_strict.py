"""An agent file whose restricting keys (tools, disallowedTools, network,
permissionMode, limits) are malformed or misspelt is refused with the line and the
fix, never loaded with guessed fields; `warden agents validate` exits non-zero."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from orchestrator.agents.files import load_agent_file
from orchestrator.config import Settings
from orchestrator.egress.rules import RuleSet
from orchestrator.egress.sources import agent_rules
from orchestrator.errors import AgentDefinitionError
from tests.conftest import warden_argv, warden_env

HEAD = "---\nname: helper\ndescription: helps\n"


def agent(tmp_path: Path, lines: str) -> Path:
    path = tmp_path / "helper.md"
    path.write_text(HEAD + lines + "---\nHelp.\n")
    return path


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        ("disallowedTools: [Bash, Edit\n", r"line 4: `disallowedTools` is not valid YAML"),
        ("tools: [Read\n", r"line 4: `tools` is not valid YAML"),
        ("Network:\n  allowedDomains: []\n", r"line 4: key 'Network' is not read.*'network'"),
        ("network:\n  allowed_domains: [x.org]\n", r"line 5: `network.allowed_domains`"),
        ("network:\n  allowedDomains: x.org\n", r"list of domains"),
        ("network: [x.org]\n", r"`network` must be"),
        ("max_turns: 5\n", r"'max_turns' is not read.*'maxTurns'"),
        ("Tools: Read\n", r"'Tools' is not read.*'tools'"),
        ("permission_mode: plan\n", r"'permission_mode'.*'permissionMode'"),
    ],
)
def test_malformed_restricting_keys_are_refused(tmp_path: Path, lines: str, expected: str) -> None:
    with pytest.raises(AgentDefinitionError, match=expected):
        load_agent_file(agent(tmp_path, lines))


def test_text_keys_stay_lenient(tmp_path: Path) -> None:
    path = agent(tmp_path, "model: sonnet\ncolor: red\n")
    path.write_text(path.read_text().replace("description: helps", "description: Use when: x"))
    found, warnings = load_agent_file(path)
    assert found.description == "Use when: x" and any("not valid YAML" in w for w in warnings)


def test_empty_allowed_domains_means_no_domain(tmp_path: Path) -> None:
    found, _ = load_agent_file(agent(tmp_path, "network:\n  allowedDomains: []\n"))
    assert agent_rules(RuleSet(), found.name, found.source, {"network": found.network}) is None


def test_agents_validate_exits_non_zero(settings: Settings, tmp_path: Path) -> None:
    agent(tmp_path, "disallowedTools: [Bash, Edit\n")
    proc = subprocess.run(
        warden_argv("agents", "validate", str(tmp_path)),
        env=warden_env(WARDEN_CONFIG_DIR=str(settings.config_dir),
                       WARDEN_STATE_DIR=str(settings.state_dir)),
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "disallowedTools" in proc.stdout + proc.stderr
