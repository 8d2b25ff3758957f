"""The checked fields of warden's settings (`config`): numeric fields whose bounds
`__post_init__` enforces, the error a bad value raises, the secret text type, and
how a variable's text becomes a value (`parse_number`, `parse_size`,
`parse_context_windows`, `approver_spec_problem`).
`config` is stdlib dataclasses rather than pydantic models for `warden exec`'s
start-up (its docstring says why); this is what pydantic's `Field(gt=, ge=, le=)`,
`ValidationError` and `SecretStr` did there.

May import: `errors`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from orchestrator.errors import ConfigError

_T = TypeVar("_T")
_SIZE_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
"""Size suffixes (1024-based, like Docker)."""


class SettingError(ConfigError):
    """A setting (or the environment variable that set it) has a value it does not
    accept; the message names the variable, the value and what is accepted."""

    def __init__(
        self, setting: str, value: object, accepted: str, variable: str | None = None
    ) -> None:
        self.setting = setting
        self.accepted = accepted
        where = f"{variable}={value!r} (setting {setting})" if variable else f"{setting}={value!r}"
        super().__init__(f"{where}: {accepted}")


@dataclass(frozen=True)
class Secret:
    """A secret text (an API key, a shared secret) that never shows in `repr`, `str`
    or a log line; read it with `get_secret_value()`. pydantic's `SecretStr` did this
    when `Settings` was a model (see `config`'s docstring)."""

    _value: str = field(repr=False)

    def get_secret_value(self) -> str:
        return self._value

    def __str__(self) -> str:
        return "**********" if self._value else ""


def whole(
    default: _T, *, gt: int | None = None, ge: int | None = None, le: int | None = None
) -> _T:
    """A whole-number field, with the bounds `check_bounds` enforces."""
    return field(default=default, metadata={"kind": int, "gt": gt, "ge": ge, "le": le})


def real(default: _T, *, gt: float | None = None) -> _T:
    """A number field (int or float; kept as float), with the bound `check_bounds` enforces."""
    return field(default=default, metadata={"kind": float, "gt": gt})


def _accepted(metadata: Mapping[str, Any]) -> str:  # Any: a dataclass field's metadata
    """What a numeric field accepts, in words: `a whole number of at least 1`."""
    words = ["a whole number" if metadata["kind"] is int else "a number"]
    for key, said in (("gt", "greater than"), ("ge", "at least"), ("le", "at most")):
        if metadata.get(key) is not None:
            words.append(f"{said} {metadata[key]}")
    return words[0] + (", " + " and ".join(words[1:]) if words[1:] else "")


def _number_problem(metadata: Mapping[str, Any], value: object) -> bool:  # Any: as above
    """True when `value` is not what a numeric field with this metadata accepts."""
    kind = metadata["kind"]
    if isinstance(value, bool) or not isinstance(value, int if kind is int else int | float):
        return True
    gt, ge, le = metadata.get("gt"), metadata.get("ge"), metadata.get("le")
    return (
        (gt is not None and not value > gt)
        or (ge is not None and not value >= ge)
        or (le is not None and not value <= le)
    )


def check_bounds(values: object) -> None:
    """Enforce the bounds of `values`' numeric fields (None only where that is the
    default); floats given as ints become floats. Raises SettingError."""
    for spec in fields(values):  # type: ignore[arg-type]  # always a dataclass here
        if "kind" not in spec.metadata:
            continue
        value = getattr(values, spec.name)
        if value is None and spec.default is None:
            continue
        if _number_problem(spec.metadata, value):
            raise SettingError(spec.name, value, f"must be {_accepted(spec.metadata)}")
        if spec.metadata["kind"] is float:
            object.__setattr__(values, spec.name, float(value))


def parse_number(cls: type, setting: str, variable: str, text: str) -> int | float:
    """The number `text` (an environment variable's value) for a numeric field."""
    metadata = next(spec.metadata for spec in fields(cls) if spec.name == setting)
    try:
        return int(text) if metadata["kind"] is int else float(text)
    except ValueError:
        raise SettingError(setting, text, f"must be {_accepted(metadata)}", variable) from None


APPROVER_KINDS = ("terminal", "webhook:URL")
"""The approver channels `--approver` and WARDEN_APPROVERS name."""


def approver_spec_problem(spec: str) -> str | None:
    """Why `spec` names no approver channel (None: it does)."""
    if spec == "terminal":
        return None
    if spec.startswith("webhook:"):
        url = spec.removeprefix("webhook:")
        if url.startswith(("http://", "https://")) and len(url) > len("https://"):
            return None
        return f"approver {spec!r}: the webhook URL must start with http:// or https://"
    return f"unknown approver {spec!r}: use {' or '.join(APPROVER_KINDS)}"


def parse_size(text: str, what: str) -> int:
    """Bytes from `1073741824`, `512m`, `1g`, `2GiB` (1024-based, like Docker); 0 allowed."""
    value = text.strip().lower().removesuffix("ib").removesuffix("b")
    unit = value[-1:] if value[-1:] in _SIZE_UNITS else ""
    try:
        number = float(value[: len(value) - len(unit)])
    except ValueError:
        number = -1.0
    if not 0 <= number < float("inf"):
        raise ConfigError(f"{what}={text!r} is not a size; use bytes or 512m, 1g, 2GiB (0: off)")
    return int(number * _SIZE_UNITS[unit])


def parse_context_windows(text: str) -> dict[str, int]:
    """`model=tokens,model=tokens` (WARDEN_CONTEXT_WINDOWS) as a dict."""
    windows: dict[str, int] = {}
    for item in text.split(","):
        model, _, tokens = item.strip().partition("=")
        if not model.strip() or not tokens.strip().isdigit():
            raise ConfigError(
                f"WARDEN_CONTEXT_WINDOWS: {item.strip()!r} is not model=tokens; write e.g. "
                "WARDEN_CONTEXT_WINDOWS=claude-sonnet-5=1000000,my-model=32000"
            )
        windows[model.strip()] = int(tokens)
    return windows
