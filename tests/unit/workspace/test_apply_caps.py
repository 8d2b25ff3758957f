"""`warden.apply.maxFile` / `maxBinary` in the settings files cap a reviewed apply's
change sets: the smallest value of any file wins, and it holds over the run's own
cap (flag, variable, default) when that is larger, never the other way round; a
value that is not a size, or a key that is not a cap, is refused naming its file
and key. The run holds them as it read them (`held_apply_caps`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.apply.policy import ApplyPolicy
from orchestrator.apply.review import ApplySettings
from orchestrator.config import Settings
from orchestrator.errors import ConfigError
from orchestrator.runtime.session import held_apply_caps
from orchestrator.workspace.inputs import read_policy_inputs
from orchestrator.workspace.settings import ApplyCaps, apply_caps


def setup(tmp_path: Path, **docs: object) -> tuple[Settings, Path]:
    """`user`, `project`, `local`, `managed`: the `warden.apply` block of each file."""
    managed = tmp_path / "managed.json"
    settings = Settings(
        state_dir=tmp_path / "state",
        config_dir=tmp_path / "config",
        managed_policy=managed if "managed" in docs else None,
    )
    ws = tmp_path / "ws"
    (ws / ".claude").mkdir(parents=True)
    settings.config_dir.mkdir()
    paths = {
        "user": settings.config_dir / "settings.json",
        "project": ws / ".claude" / "settings.json",
        "local": ws / ".claude" / "settings.local.json",
        "managed": managed,
    }
    for name, block in docs.items():
        paths[name].write_text(json.dumps({"warden": {"apply": block}}))
    return settings, ws


def test_the_smallest_cap_of_any_file_wins(tmp_path: Path) -> None:
    settings, ws = setup(
        tmp_path,
        user={"maxFile": "8m", "maxBinary": 2048},
        project={"maxFile": "4m"},
        managed={"maxBinary": "1k"},
    )
    assert apply_caps(settings, ws) == ApplyCaps(max_file=4 << 20, max_binary=1024)


def test_no_key_leaves_the_run_cap(tmp_path: Path) -> None:
    settings, ws = setup(tmp_path)
    assert apply_caps(settings, ws) == ApplyCaps()
    assert ApplyCaps().hold(100, 200) == (100, 200)


def test_the_stricter_of_the_run_cap_and_the_key_wins() -> None:
    caps = ApplyCaps(max_file=4096, max_binary=512)
    assert caps.hold(16 << 20, 1 << 20) == (4096, 512)  # the key below the flag/default
    assert caps.hold(100, 200) == (100, 200)  # the flag below the key


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"maxFile": "12q"}, r"`warden\.apply\.maxFile` is '12q', not a size"),
        ({"maxBinary": -1}, r"`warden\.apply\.maxBinary` is -1, not a size"),
        ({"maxFile": True}, r"`warden\.apply\.maxFile` is True, not a size"),
        ({"maxFile": ""}, r"`warden\.apply\.maxFile` is '', not a size"),
        ({"maxfile": "1m"}, r"`warden\.apply\.maxfile` is not a setting warden knows"),
        ("16m", r"`warden\.apply` must be an object"),
    ],
)
def test_a_bad_value_is_refused_naming_file_and_key(
    tmp_path: Path, block: object, message: str
) -> None:
    settings, ws = setup(tmp_path, project=block)
    with pytest.raises(ConfigError, match=message) as raised:
        apply_caps(settings, ws)
    assert str(ws / ".claude" / "settings.json") in str(raised.value)


def test_the_run_holds_its_caps_to_the_keys_it_read(tmp_path: Path) -> None:
    settings, ws = setup(tmp_path, project={"maxFile": 64}, user={"maxBinary": "1m"})
    inputs = read_policy_inputs(settings, ws, trusted=False)
    (ws / ".claude" / "settings.json").unlink()  # the run decides from what it read
    run = ApplySettings(policy=ApplyPolicy(max_file_bytes=16 << 20, max_binary_bytes=100))
    held = held_apply_caps(run, settings, ws, inputs)
    assert (held.policy.max_file_bytes, held.policy.max_binary_bytes) == (64, 100)
    assert held.mode == run.mode
