"""A library caller's run (`open_run` without its own `TaskManagerConfig`) is held to
the limits its `Settings` carry (the environment's, `Settings.from_env`), exactly as
`warden run` is, not to built-in defaults; a caller's own permission gate steers the
run's egress (its policy's domain rules and mode, its approver)."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.config import Settings
from orchestrator.permissions import EffectivePolicy, HookSet
from orchestrator.permissions.approvers import NonInteractiveApprover
from orchestrator.permissions.rules import parse_rule
from orchestrator.runtime.caps import TaskManagerConfig
from orchestrator.runtime.gate import PolicyGate
from orchestrator.runtime.session import open_run

pytestmark = pytest.mark.integration

MIB = 1024 * 1024


async def test_a_run_opened_without_a_config_gets_the_settings_limits(
    settings: Settings, workspace: Path
) -> None:
    configured = replace(
        settings,
        max_concurrent=3,
        queue_limit=5,
        max_depth=2,
        max_children=4,
        disk_write_limit=64 * MIB,
        model_max_retries=7,
        warm_pool_min=0,
        warm_pool_max=0,
        fallback_uid=2_100_000_123,
    )
    async with open_run(configured, workspace=workspace, prompt="p") as run:
        config = run.manager.config
    # The settings' limits, plus what the run read from the workspace it trusted (no skills).
    assert config.project_skills == {}
    assert dataclasses.replace(config, project_skills=None) == TaskManagerConfig.from_settings(
        configured
    )
    assert (config.max_concurrent_total, config.queue_limit) == (3, 5)
    assert (config.max_depth, config.max_children_per_task) == (2, 4)
    assert config.disk.write_limit_bytes == 64 * MIB and config.model_max_retries == 7
    assert not config.pool_config().enabled and config.fallback_uid == 2_100_000_123


async def test_a_callers_own_policy_gate_steers_the_runs_egress(
    settings: Settings, workspace: Path
) -> None:
    allow = parse_rule("WebFetch(domain:docs.example)", "allow", "caller", "caller")
    gate = PolicyGate(
        policy=EffectivePolicy(rules=(allow,), mode="default"),
        hooks=HookSet((), ()),
        workspace_host=workspace,
        approver=NonInteractiveApprover(),
    )
    quiet = replace(settings, warm_pool_min=0, warm_pool_max=0)
    async with open_run(quiet, workspace=workspace, prompt="p", gate=gate) as run:
        egress = run.manager.egress
        assert run.manager.gate is gate
    # The gate's WebFetch(domain:) allow rule turned egress on and allows that host;
    # anything else is a question in the gate's mode, put to the gate's approver.
    assert egress is not None
    assert egress.rules.first("allow", "docs.example", 443) is not None
    assert egress.rules.first("allow", "other.example", 443) is None
    assert egress.mode == "default" and egress.asker is gate
