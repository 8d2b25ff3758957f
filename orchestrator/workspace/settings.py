"""warden's own keys in Claude Code settings files: the `warden` block.

    {"warden": {"protect": [".github/workflows", "scripts/deploy.sh"],
                "apply": {"maxFile": "8m", "maxBinary": "512k"}}}

`protect` lists workspace paths mounted read-only in every sandbox (added to
`.claude/` and `.git`, which always are). It is read from the managed policy,
the workspace's `.claude/settings.local.json` and `.claude/settings.json`, and
the user's `settings.json`; the lists add up. A listed path that does not exist
is skipped (the same user settings serve many workspaces) and reported if a run
creates it.

`apply.maxFile` / `apply.maxBinary` cap the text and binary files a reviewed
apply's change set may write, read from the same files. Like `protect`, they only
ever restrict: the smallest value of any file wins, and it holds over the run's
own cap (`warden run --apply-max-file`/`--apply-max-binary`,
`WARDEN_APPLY_MAX_FILE`/`_BINARY`, the default) when that is larger. Any other key
under `apply`, or a value that is not a size, is refused with the file and key named.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.config import Settings
from orchestrator.errors import ConfigError
from orchestrator.permissions.settings_files import SettingsStack
from orchestrator.permissions.sources import read_document
from orchestrator.setting_fields import parse_size

WARDEN_KEY = "warden"
PROTECT_KEY = "protect"
APPLY_KEY = "apply"
APPLY_CAP_KEYS = {"maxFile": "max_file", "maxBinary": "max_binary"}
"""`warden.apply` keys → `ApplyCaps` fields."""


def settings_files(settings: Settings, workspace: Path) -> list[Path]:
    """Settings files warden reads its own keys from, highest first."""
    return [f for f in _candidates(settings, workspace) if f.is_file()]


def _candidates(settings: Settings, workspace: Path) -> list[Path]:
    files = []
    if settings.managed_policy is not None:
        files.append(settings.managed_policy)
    files += [
        workspace / ".claude" / "settings.local.json",
        workspace / ".claude" / "settings.json",
        settings.config_dir / "settings.json",
    ]
    return files


def warden_block(path: Path) -> dict[str, Any]:
    """A settings file's `warden` block ({} when absent). Raises ConfigError when malformed."""
    return _block_of(path, read_document(path))


def _block_of(path: Path, doc: object) -> dict[str, Any]:
    if not isinstance(doc, dict):
        return {}
    block = doc.get(WARDEN_KEY)
    if block is None:
        return {}
    if not isinstance(block, dict):
        raise ConfigError(
            f'{path}: `{WARDEN_KEY}` must be an object, e.g. {{"protect": [".github/workflows"]}}'
        )
    return block


def _blocks(
    settings: Settings, workspace: Path, stack: SettingsStack | None
) -> list[tuple[Path, dict[str, Any]]]:
    if stack is None:
        return [(p, warden_block(p)) for p in settings_files(settings, workspace)]
    wanted = {str(p) for p in _candidates(settings, workspace)}  # as read, not as now
    return [(f.path, _block_of(f.path, f.doc)) for f in stack.files if str(f.path) in wanted]


def protected_paths(
    settings: Settings, workspace: Path, stack: SettingsStack | None = None
) -> list[str]:
    """Every path the settings files list under `warden.protect`. `stack`: the run's
    settings as read once (`workspace.inputs`); None reads the files now."""
    paths: list[str] = []
    for path, block in _blocks(settings, workspace, stack):
        value = block.get(PROTECT_KEY, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(
                f"{path}: `{WARDEN_KEY}.{PROTECT_KEY}` must be a list of workspace paths"
            )
        paths += value
    return paths


@dataclass(frozen=True)
class ApplyCaps:
    """The smallest `warden.apply` caps the settings files name (None: no file names one)."""

    max_file: int | None = None
    """Largest text file a change set may write, in bytes."""
    max_binary: int | None = None
    """Largest binary file a change set may write, in bytes."""

    def hold(self, max_file: int, max_binary: int) -> tuple[int, int]:
        """The run's caps (`max_file`, `max_binary`) held to these: the stricter wins."""
        return (
            max_file if self.max_file is None else min(max_file, self.max_file),
            max_binary if self.max_binary is None else min(max_binary, self.max_binary),
        )


def apply_caps(
    settings: Settings, workspace: Path, stack: SettingsStack | None = None
) -> ApplyCaps:
    """The smallest of each `warden.apply` cap in the settings files. `stack`: the
    run's settings as read once; None reads the files now. ConfigError names the file
    and key of a value that is not a size, or of a key that is not a cap."""
    found: dict[str, int] = {}
    for path, block in _blocks(settings, workspace, stack):
        caps = block.get(APPLY_KEY)
        if caps is None:
            continue
        if not isinstance(caps, dict):
            raise ConfigError(
                f"{path}: `{WARDEN_KEY}.{APPLY_KEY}` must be an object, e.g. "
                f'{{"maxFile": "16m", "maxBinary": "1m"}}'
            )
        for key, value in caps.items():
            field = APPLY_CAP_KEYS.get(key)
            if field is None:
                raise ConfigError(
                    f"{path}: `{WARDEN_KEY}.{APPLY_KEY}.{key}` is not a setting warden knows "
                    f"(it knows {', '.join(sorted(APPLY_CAP_KEYS))}); fix or remove it"
                )
            size = _size(path, key, value)
            found[field] = min(size, found.get(field, size))
    return ApplyCaps(**found)


def _size(path: Path, key: str, value: object) -> int:
    name = f"{WARDEN_KEY}.{APPLY_KEY}.{key}"
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and value.strip():
        try:
            return parse_size(value, name)
        except ConfigError:
            pass
    raise ConfigError(
        f"{path}: `{name}` is {value!r}, not a size; give bytes (a whole number such as "
        '1048576) or a size such as "512k", "16m", "1g"'
    )
