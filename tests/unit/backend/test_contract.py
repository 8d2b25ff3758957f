"""The backend contract's values (stdlib dataclasses, not pydantic models: issue 39)
refuse what the models refused, with a message naming the field, and cannot be
changed through the lists and dicts they were built from."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from orchestrator import labels
from orchestrator.backend.contract import (
    BuildLimits,
    ContainerInfo,
    DiskLimits,
    Mount,
    ResourceLimits,
    SandboxResult,
    SandboxSpec,
    SandboxStatus,
)
from orchestrator.errors import ConfigError

MIB = 1024 * 1024


def spec(**changes: object) -> SandboxSpec:
    values: dict[str, object] = {
        "image": "img",
        "command": ["true"],
        "warden_labels": labels.warden_labels("test-contract", exec="e"),
        **changes,
    }
    return SandboxSpec(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"command": []}, "SandboxSpec.command is empty"),
        ({"command": "ls -l"}, "SandboxSpec.command='ls -l' is not a list of words"),
        ({"command": ["ls", 1]}, "is not a list of words"),
        ({"user": "0:0"}, "is root"),
        ({"user": "root"}, "must be numeric"),
        ({"warden_labels": {"owner": "me"}}, "outside the 'warden.' namespace"),
        ({"timeout_s": 0}, "SandboxSpec.timeout_s=0 must be greater than 0"),
        ({"output_limit_bytes": 0}, "SandboxSpec.output_limit_bytes=0 must be greater than 0"),
        ({"env": {"A": 1}}, "SandboxSpec.env={'A': 1} must map text to text"),
        ({"mounts": [{"source": "/x", "target": "/y"}]}, "is not a list of Mount"),
        ({"limits": {"memory_bytes": 1}}, "is not a ResourceLimits"),
    ],
)
def test_a_bad_spec_names_the_field_and_what_is_accepted(
    changes: dict[str, object], said: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        spec(**changes)
    assert said in str(raised.value)
    assert isinstance(raised.value, ValueError)  # as pydantic's ValidationError was


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda: ResourceLimits(memory_bytes=6 * MIB), "must be greater than 6291456"),
        (lambda: ResourceLimits(cpus=0), "ResourceLimits.cpus=0 must be greater than 0"),
        (lambda: ResourceLimits(pids=7), "ResourceLimits.pids=7 must be at least 8"),
        (lambda: ResourceLimits(pids=True), "ResourceLimits.pids=True is not a whole number"),
        (lambda: DiskLimits(write_limit_bytes=-1), "must be at least 0"),
        (lambda: BuildLimits(deadline_s=0), "BuildLimits.deadline_s=0 must be greater than 0"),
        (lambda: Mount(source=3, target="/x"), "Mount.source=3 is not a path"),  # type: ignore[arg-type]
        (
            lambda: SandboxResult(
                status="lost",  # type: ignore[arg-type]
                exit_code=0,
                stdout="",
                stderr="",
                truncated=False,
                duration_s=0,
            ),
            "SandboxResult.status='lost' is no status",
        ),
        (
            lambda: ContainerInfo(id="c", name="n", status="up", labels={"a": None}),  # type: ignore[dict-item]
            "text to text",
        ),
    ],
)
def test_bad_limits_and_results_are_refused(make: object, said: str) -> None:
    with pytest.raises(ConfigError) as raised:
        make()  # type: ignore[operator]
    assert said in str(raised.value)


def test_values_are_frozen_and_own_their_lists() -> None:
    command, env = ["echo", "hi"], {"A": "1"}
    built = spec(command=command, env=env, workspace="/srv/ws")
    command.append("rm -rf /")
    env["LD_PRELOAD"] = "/evil.so"
    assert built.command == ["echo", "hi"] and built.env == {"A": "1"}
    assert built.workspace == Path("/srv/ws")  # text becomes a Path, as the models did
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.image = "other"  # type: ignore[misc]
    changed = dataclasses.replace(built, timeout_s=5)
    assert changed.timeout_s == 5.0 and isinstance(changed.timeout_s, float)
    with pytest.raises(ConfigError):  # replace validates as construction does
        dataclasses.replace(built, command=[])


def test_limits_round_trip_through_json() -> None:
    limits = ResourceLimits(memory_bytes=96 * MIB, cpus=2, disk=DiskLimits(free_inode_floor=5))
    assert ResourceLimits.from_json(limits.to_json()) == limits
    assert limits.to_json() == ResourceLimits.from_json(limits.to_json()).to_json()
    with pytest.raises(ConfigError):
        ResourceLimits.from_json('{"memory_bytes": 1}')


def test_a_result_status_given_as_text_becomes_the_status() -> None:
    result = SandboxResult(
        status="oom_killed",  # type: ignore[arg-type]
        exit_code=137,
        stdout="",
        stderr="",
        truncated=False,
        duration_s=1,
    )
    assert result.status is SandboxStatus.OOM_KILLED and result.duration_s == 1.0
