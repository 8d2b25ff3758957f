"""Workspace trust: a project's own allow rules, mode, hooks and agent files take
effect only in a workspace the person has trusted, as in Claude Code. Deny and
ask rules always apply (they only narrow).

A workspace is trusted when any of these says so:
- `--trust-workspace` (or the API's `trusted=True`), or `WARDEN_TRUST_WORKSPACE=1`
  (`Settings.trust_workspace`, for CI);
- warden's record, `~/.config/warden/trusted-workspaces.json`, written when the
  person answers yes to the prompt `warden run` shows on first use;
- Claude Code's own record: `hasTrustDialogAccepted` for the directory or one
  above it in `~/.claude.json` (`$CLAUDE_CONFIG_DIR/.claude.json`).
A workspace with nothing to trust (no project allow rules, mode, hooks, agent
files or dev container) needs no answer. An untrusted workspace's dev container is
not used unless `--devcontainer` asks for it.

Several warden processes may record a yes at once (two runs in two workspaces
answered together): `remember` reads, adds and replaces the record under an
exclusive `flock` on the config directory, through a temporary file of its own, so
neither answer is lost and no half-written record is ever read.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from orchestrator.config import Settings
from orchestrator.errors import ConfigError

TRUST_FILE = "trusted-workspaces.json"
MAX_TRUST_FILE_BYTES = 4 * 1024 * 1024
"""Largest trust record read (Claude Code's `.claude.json` grows with history)."""
PROJECT_SETTINGS = (".claude/settings.json", ".claude/settings.local.json")
PROJECT_AGENTS = ".claude/agents"
PROJECT_DEVCONTAINERS = (".devcontainer/devcontainer.json", ".devcontainer.json")


def _load(path: Path) -> object:
    try:
        if path.stat().st_size > MAX_TRUST_FILE_BYTES:
            return None
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None  # an unreadable record trusts nothing


def _claude_record(settings: Settings) -> Path:
    if settings.claude_dir.name == ".claude":
        return settings.claude_dir.parent / ".claude.json"
    return settings.claude_dir / ".claude.json"  # CLAUDE_CONFIG_DIR


def recorded(settings: Settings, workspace: Path) -> bool:
    """True when warden's or Claude Code's record trusts `workspace`."""
    ws = workspace.resolve()
    mine = _load(settings.config_dir / TRUST_FILE)
    if isinstance(mine, dict) and str(ws) in (mine.get("workspaces") or []):
        return True
    claude = _load(_claude_record(settings))
    projects = claude.get("projects") if isinstance(claude, dict) else None
    if not isinstance(projects, dict):
        return False
    for place in (ws, *ws.parents):
        entry = projects.get(str(place))
        if isinstance(entry, dict) and entry.get("hasTrustDialogAccepted") is True:
            return True
    return False


def is_trusted(settings: Settings, workspace: Path) -> bool:
    """Whether the workspace's own loosening settings apply (see the module doc)."""
    return settings.trust_workspace or recorded(settings, workspace) or not needs_trust(workspace)


def needs_trust(workspace: Path) -> list[str]:
    """What the workspace itself would add that only trust lets in, in words."""
    found: list[str] = []
    for rel in PROJECT_SETTINGS:
        doc = _load(workspace / rel)
        if not isinstance(doc, dict):
            continue
        perms = doc.get("permissions")
        if isinstance(perms, dict) and (perms.get("allow") or perms.get("defaultMode")):
            found.append(f"{rel}: allow rules or a permission mode")
        if doc.get("hooks"):
            found.append(f"{rel}: hooks")
    agents = workspace / PROJECT_AGENTS
    if agents.is_dir() and any(p.suffix == ".md" for p in agents.iterdir()):
        found.append(f"{PROJECT_AGENTS}/: agent definitions")
    for rel in PROJECT_DEVCONTAINERS:
        if (workspace / rel).exists():
            found.append(f"{rel}: a dev container (its image, or a Dockerfile warden builds)")
            break
    return found


def remember(settings: Settings, workspace: Path) -> None:
    """Record the person's yes, so the prompt is not shown again (other processes'
    yeses recorded meanwhile are kept: see the module docstring)."""
    path = settings.config_dir / TRUST_FILE
    ws = str(workspace.resolve())
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _locked(path.parent):
            doc = _load(path)
            listed = doc.get("workspaces") if isinstance(doc, dict) else None
            workspaces = [w for w in (listed or []) if isinstance(w, str)]
            if ws in workspaces:
                return
            workspaces.append(ws)
            _replace(path, json.dumps({"workspaces": workspaces}, indent=2) + "\n")
    except OSError as exc:
        raise ConfigError(
            f"cannot record the trusted workspace in {path} ({exc.strerror}); "
            "pass --trust-workspace instead"
        ) from exc


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """An exclusive flock on `directory`, held for the block (waits for other warden
    processes recording at the same time; nothing else takes it)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # lets the lock go


def _replace(path: Path, text: str) -> None:
    """Replace `path` with `text` atomically, through a temporary file of this call's own."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
