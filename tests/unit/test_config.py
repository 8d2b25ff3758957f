"""warden's settings (stdlib dataclasses since issue 39): a bad environment value is
one clear error naming the variable, the value and what is accepted; secrets never
show; the bounds the pydantic model had still hold for values built in code."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from orchestrator.config import (
    _NUMBERS,
    AnalyserBound,
    PoolConfig,
    Secret,
    SettingError,
    Settings,
)
from orchestrator.errors import ConfigError, WardenError


@pytest.mark.parametrize(("variable", "setting"), sorted(_NUMBERS.items()))
@pytest.mark.parametrize("text", ["-5", "lots"])
def test_a_bad_number_names_the_variable_the_value_and_what_is_accepted(
    variable: str, setting: str, text: str
) -> None:
    with pytest.raises(SettingError) as raised:
        Settings.from_env({variable: text})
    message = str(raised.value)
    assert message.startswith(f"{variable}={text!r} (setting {setting}): must be a ")
    assert ("whole number" in message or "a number" in message) and raised.value.accepted
    assert isinstance(raised.value, ConfigError) and isinstance(raised.value, WardenError)


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"WARDEN_ISOLATION": "box"}, "WARDEN_ISOLATION='box' (setting isolation): must be worktree"),
        ({"WARDEN_APPLY": "yes"}, "WARDEN_APPLY='yes' (setting apply_mode): must be ask, auto or never"),
        ({"WARDEN_BUILD_MEMORY": "1m"}, "WARDEN_BUILD_MEMORY='1m' (setting build_memory): must be a "
         "whole number, greater than 6291456"),
        ({"WARDEN_APPROVERS": "bob"}, "WARDEN_APPROVERS='bob' (setting approvers): unknown approver"),
        ({"WARDEN_CONTEXT_WINDOWS": "m=10"}, "WARDEN_CONTEXT_WINDOWS='m=10' (setting "
         "model_context_windows): tokens must be at least 1000"),
        ({"WARDEN_ANALYSER_DEADLINE_MS": "600001"}, "must be a whole number, at least 1 and at most "
         "600000"),
    ],
)  # fmt: skip
def test_other_bad_values_name_their_variable(env: dict[str, str], said: str) -> None:
    with pytest.raises(SettingError) as raised:
        Settings.from_env(env)
    assert said in str(raised.value)


def test_numbers_from_the_environment_have_their_fields_types() -> None:
    settings = Settings.from_env({"WARDEN_WARM_POOL_IDLE_S": "12", "WARDEN_MAX_DEPTH": "3"})
    assert settings.warm_pool_idle_s == 12.0 and isinstance(settings.warm_pool_idle_s, float)
    assert settings.max_depth == 3 and isinstance(settings.max_depth, int)
    assert Settings.from_env({"WARDEN_FALLBACK_UID": "4242"}).fallback_uid == 4242


def test_values_built_in_code_keep_the_bounds() -> None:
    with pytest.raises(
        SettingError, match=r"^max_concurrent=0: must be a whole number, at least 1"
    ):
        Settings(max_concurrent=0)
    with pytest.raises(SettingError, match="max_concurrent=True"):
        Settings(max_concurrent=True)
    with pytest.raises(SettingError, match=r"^idle_s=0: must be a number, greater than 0"):
        PoolConfig(idle_s=0)
    with pytest.raises(SettingError, match="workers=17"):
        AnalyserBound(workers=17)
    with pytest.raises(SettingError, match="replace"):  # replace checks as construction does
        dataclasses.replace(Settings(), apply_mode="replace")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_concurency'"):
        Settings(max_concurency=3)  # type: ignore[call-arg]  # closed, as the model was
    with pytest.raises(dataclasses.FrozenInstanceError):
        Settings().max_depth = 2  # type: ignore[misc]


def test_secrets_never_show() -> None:
    key, secret = "sk-ant-very-secret-key", "s" * 32
    settings = Settings.from_env({"ANTHROPIC_API_KEY": key, "WARDEN_WEBHOOK_SECRET": secret})
    assert isinstance(settings.anthropic_api_key, Secret)
    assert settings.anthropic_api_key.get_secret_value() == key
    assert settings.webhook_secret == Secret(secret)
    shown = f"{settings!r} {settings} {settings.anthropic_api_key} {settings.webhook_secret!r}"
    assert key not in shown and secret not in shown


def test_text_given_for_a_path_becomes_a_path() -> None:
    settings = Settings(state_dir="/srv/state", managed_policy="/etc/warden.yaml")  # type: ignore[arg-type]
    assert settings.state_dir == Path("/srv/state")
    assert settings.managed_policy == Path("/etc/warden.yaml")
    with pytest.raises(SettingError, match="config_dir=3: must be a path"):
        Settings(config_dir=3)  # type: ignore[arg-type]
