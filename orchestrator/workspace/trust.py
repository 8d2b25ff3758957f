"""Workspace trust, bound to content: a project's own allow rules, mode,
additional directories, hooks, agent files, dev container and MCP servers take
effect only while the files that carry them are exactly what a person said yes to
(`direnv allow` is the model). Deny and ask rules always apply (they only narrow).

A workspace is trusted when one of these says so:
- `--trust-workspace` (or the API's `trusted=True`), or `WARDEN_TRUST_WORKSPACE=1`
  (`Settings.trust_workspace`, for CI): this checkout as it is now;
- warden's record, `~/.config/warden/trusted-workspaces.json`, holds a yes for
  this exact path (a yes for `/` or a parent trusts no child, as in Claude Code)
  whose fingerprints (`trusted_content`) match every file trust covers now. Any
  file new, changed or removed since, by anyone (a sandbox included), unlocks
  nothing until the person has been shown the change (`warden trust`, or the prompt
  `warden run` shows at a terminal) and said yes again;
- the workspace has nothing to trust (`trusted_content.needs_trust`).
What trust covers includes every workspace script a hook that runs on the host
names, whichever settings layer defines the hook (`host_hook_scripts`): the
person's own hook running `$CLAUDE_PROJECT_DIR/tools/check.sh` makes that script
content to approve, so the host never runs bytes nobody looked at.
Claude Code's own record (`hasTrustDialogAccepted` in `~/.claude.json`) trusts a
directory, not content, so it unlocks nothing here; the prompt mentions it.

The record keeps, per workspace, each covered file's fingerprint, and the text of
small ones under `trusted-content/` (by hash) so the next review is a diff. A record
of the old form (a list of paths) trusts no content: the next run shows everything
as new once. Several warden processes may record a yes at once: `remember` reads,
adds and replaces the record under an exclusive `flock` on the config directory,
through a temporary file of its own, so neither answer is lost and no half-written
record is ever read.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from orchestrator.config import Settings
from orchestrator.errors import ConfigError
from orchestrator.workspace.trusted_content import (
    ContentChange,
    Fingerprint,
    TrustedFile,
    changes,
    fingerprint,
    named_scripts,
    needs_trust,
)

if TYPE_CHECKING:
    from orchestrator.images.devcontext import DevContainerInputs
    from orchestrator.permissions.settings_files import SettingsStack

TRUST_FILE = "trusted-workspaces.json"
CONTENT_DIR = "trusted-content"
"""Beside the record: the text of each file a person said yes to, by its sha256."""
RECORD_VERSION = 2
MAX_TRUST_FILE_BYTES = 16 * 1024 * 1024
"""Largest trust record read (Claude Code's `.claude.json` grows with history)."""
MAX_KEPT_TEXT_BYTES = 1024 * 1024
"""Largest kept text read back for a diff."""

__all__ = [
    "TrustVerdict",
    "host_hook_scripts",
    "is_trusted",
    "needs_trust",
    "recorded",
    "remember",
    "verdict",
]


class TrustVerdict(BaseModel):
    """Whether a workspace's own loosening settings apply, and why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trusted: bool
    reason: str
    """In words, for messages."""
    wants: tuple[str, ...] = ()
    """What the workspace would add that only trust lets in."""
    changes: tuple[ContentChange, ...] = ()
    """New, changed or removed since the last yes (everything, when there is none)."""
    prints: dict[str, TrustedFile] = {}
    """Every covered file's fingerprint, as looked at for this verdict."""
    claude_trusts: bool = False
    """Claude Code's record trusts this exact directory (a hint for the prompt)."""


def _load(path: Path) -> object:
    try:
        if path.stat().st_size > MAX_TRUST_FILE_BYTES:
            return None
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None  # an unreadable record trusts nothing


def claude_record(settings: Settings) -> Path:
    """The person's `.claude.json` (beside `~/.claude`, or in `CLAUDE_CONFIG_DIR`)."""
    if settings.claude_dir.name == ".claude":
        return settings.claude_dir.parent / ".claude.json"
    return settings.claude_dir / ".claude.json"  # CLAUDE_CONFIG_DIR


def _claude_trusts(settings: Settings, ws: Path) -> bool:
    claude = _load(claude_record(settings))
    projects = claude.get("projects") if isinstance(claude, dict) else None
    entry = projects.get(str(ws)) if isinstance(projects, dict) else None
    return isinstance(entry, dict) and entry.get("hasTrustDialogAccepted") is True


def _entries(doc: object) -> dict[str, object]:
    """The record's workspaces: path → {"files": {...}} (old form: path → None)."""
    listed = doc.get("workspaces") if isinstance(doc, dict) else None
    if isinstance(listed, list):  # the old form: paths, no content
        return {w: None for w in listed if isinstance(w, str)}
    if isinstance(listed, dict):
        return {k: v for k, v in listed.items() if isinstance(k, str)}
    return {}


def _kept_text(settings: Settings, digest: str) -> str | None:
    if not digest.startswith("sha256:"):
        return None
    path = settings.config_dir / CONTENT_DIR / digest.removeprefix("sha256:")
    try:
        data = path.read_bytes()[: MAX_KEPT_TEXT_BYTES + 1]
        if hashlib.sha256(data).hexdigest() != digest.removeprefix("sha256:"):
            return None  # not what was seen: no diff from it
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def recorded(settings: Settings, workspace: Path) -> Fingerprint | None:
    """The fingerprints of warden's last yes for exactly `workspace` (None: no yes;
    {} for a yes of the old form, which covered no content)."""
    entry = _entries(_load(settings.config_dir / TRUST_FILE)).get(str(workspace.resolve()), False)
    if entry is False:
        return None
    files = entry.get("files") if isinstance(entry, dict) else None
    out: Fingerprint = {}
    for rel, digest in (files or {}).items() if isinstance(files, dict) else ():
        if isinstance(rel, str) and isinstance(digest, str):
            out[rel] = TrustedFile(digest=digest, text=_kept_text(settings, digest))
    return out


def host_hook_scripts(
    settings: Settings, workspace: Path, stack: SettingsStack | None = None
) -> tuple[str, ...]:
    """Workspace files named by a hook that may run on the host, from whichever
    settings layer (managed, the person's own, the project's): every hook marked
    `"trusted": true` where that counts, and every command `warden.trustedHooks`
    lists (an agent file's hook included, its working directory taken as the
    workspace). An untrusted workspace's `disableAllHooks` does not switch the
    person's hooks off, so it does not hide their scripts either. `stack`: the
    run's settings as read once (None: read now)."""
    from orchestrator.permissions.hooks.definitions import load_hooks

    found = load_hooks(settings, workspace, trusted=False, stack=stack)
    commands = [
        (h.command, h.cwd == "workspace") for h in found.hooks
        if not h.sandbox and (h.trusted or h.command in found.trusted_commands)
    ]  # fmt: skip
    commands += [(c, True) for c in sorted(found.trusted_commands)]
    return tuple(named_scripts(workspace.resolve(), commands))


def verdict(
    settings: Settings,
    workspace: Path,
    *,
    texts: Mapping[str, str] | None = None,
    dev: DevContainerInputs | None = None,
    dev_read: bool = False,
    host_scripts: Sequence[str] | None = None,
) -> TrustVerdict:
    """Whether the workspace's own loosening settings apply (see the module doc).
    `texts`: the project's settings files as already read (`workspace.inputs`);
    `dev` (when `dev_read`): its dev container as already read; `host_scripts`:
    `host_hook_scripts` as already found (None: found now)."""
    ws = workspace.resolve()
    if host_scripts is None:
        host_scripts = host_hook_scripts(settings, ws)
    prints = fingerprint(ws, texts, dev=dev, dev_read=dev_read, host_scripts=host_scripts)
    wants = tuple(needs_trust(ws, prints, host_scripts))
    if settings.trust_workspace:
        return TrustVerdict(
            trusted=True,
            reason="trusted as it is now (--trust-workspace)",
            wants=wants,
            prints=prints,
        )
    if not wants:
        return TrustVerdict(trusted=True, reason="nothing of its own to trust", prints=prints)
    before = recorded(settings, ws)
    found = tuple(changes(before or {}, prints))
    if before is not None and not found:
        return TrustVerdict(
            trusted=True, reason="its content is what you said yes to", wants=wants, prints=prints
        )
    reason = (
        "its content changed since you said yes"
        if before
        else "you have not said yes to its content"
    )
    return TrustVerdict(
        trusted=False,
        reason=reason,
        wants=wants,
        changes=found,
        prints=prints,
        claude_trusts=_claude_trusts(settings, ws),
    )


def is_trusted(settings: Settings, workspace: Path) -> bool:
    """Whether the workspace's own loosening settings apply (see the module doc)."""
    return verdict(settings, workspace).trusted


def remember(settings: Settings, workspace: Path, prints: Fingerprint | None = None) -> None:
    """Record the person's yes to `prints` (what they were shown; default: the
    content now), so it unlocks until it changes. Other processes' yeses recorded
    meanwhile are kept (see the module docstring)."""
    path = settings.config_dir / TRUST_FILE
    ws = workspace.resolve()
    if prints is None:
        prints = fingerprint(ws, host_scripts=host_hook_scripts(settings, ws))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _keep_texts(settings, prints)
        with _locked(path.parent):
            workspaces = _entries(_load(path))
            workspaces[str(ws)] = {"files": {rel: f.digest for rel, f in sorted(prints.items())}}
            doc = {"version": RECORD_VERSION, "workspaces": workspaces}
            _replace(path, json.dumps(doc, indent=2) + "\n")
    except OSError as exc:
        raise ConfigError(
            f"cannot record the trusted workspace in {path} ({exc.strerror}); "
            "pass --trust-workspace instead"
        ) from exc


def _keep_texts(settings: Settings, prints: Fingerprint) -> None:
    directory = settings.config_dir / CONTENT_DIR
    for f in prints.values():
        if f.text is None or not f.digest.startswith("sha256:"):
            continue
        directory.mkdir(mode=0o700, exist_ok=True)
        target = directory / f.digest.removeprefix("sha256:")
        if not target.exists():
            _replace(target, f.text)


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
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
