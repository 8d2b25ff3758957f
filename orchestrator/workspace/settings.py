"""warden's own keys in Claude Code settings files: the `warden` block.

    {"warden": {"protect": [".github/workflows", "scripts/deploy.sh"]}}

`protect` lists workspace paths mounted read-only in every sandbox (added to
`.claude/` and `.git`, which always are). It is read from the managed policy,
the workspace's `.claude/settings.local.json` and `.claude/settings.json`, and
the user's `settings.json`; the lists add up. A listed path that does not exist
is skipped (the same user settings serve many workspaces) and reported if a run
creates it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.config import Settings
from orchestrator.errors import ConfigError
from orchestrator.permissions.settings_files import SettingsStack
from orchestrator.permissions.sources import read_document

WARDEN_KEY = "warden"
PROTECT_KEY = "protect"


def settings_files(settings: Settings, workspace: Path) -> list[Path]:
    """Settings files warden reads its own keys from, highest first."""
    files = []
    if settings.managed_policy is not None:
        files.append(settings.managed_policy)
    files += [
        workspace / ".claude" / "settings.local.json",
        workspace / ".claude" / "settings.json",
        settings.config_dir / "settings.json",
    ]
    return [f for f in files if f.is_file()]


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


def protected_paths(
    settings: Settings, workspace: Path, stack: SettingsStack | None = None
) -> list[str]:
    """Every path the settings files list under `warden.protect`. `stack`: the run's
    settings as read once (`workspace.inputs`); None reads the files now."""
    paths: list[str] = []
    if stack is None:
        blocks = [(p, warden_block(p)) for p in settings_files(settings, workspace)]
    else:
        wanted = {str(p) for p in settings_files(settings, workspace)}
        blocks = [(f.path, _block_of(f.path, f.doc)) for f in stack.files if str(f.path) in wanted]
    for path, block in blocks:
        value = block.get(PROTECT_KEY, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(
                f"{path}: `{WARDEN_KEY}.{PROTECT_KEY}` must be a list of workspace paths"
            )
        paths += value
    return paths
