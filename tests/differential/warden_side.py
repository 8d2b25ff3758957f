"""warden's decisions for a group: the same settings files laid out where warden
reads them, each call put to `warden policy explain`'s decision function
(`commands._explain.explain_call`) with `{ws}` read as `/workspace` and `{home}`
as `/root` (the sandbox's paths).

A group whose settings configure hooks is decided by the permission engine
itself (rules and PreToolUse hooks, `PermissionEngine.decide`), as a run decides
it. Its hooks run on the host, as Claude Code runs them: warden's own user
settings list their commands under `warden.trustedHooks` (where a hook runs is
warden's choice, not part of the decision; Claude Code's files stay as they are)."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from orchestrator.commands._explain import explain_call
from orchestrator.config import Settings
from orchestrator.errors import PolicyError
from orchestrator.permissions import (
    CallContext,
    PermissionEngine,
    ToolCall,
    load_hooks,
    load_policy,
)
from orchestrator.workspace.trust import is_trusted, remember
from tests.differential.claude_side import fill

WS = "/workspace"
HOME = "/root"


def _write(path: Path, doc: dict[str, Any] | None) -> None:
    if doc is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(fill(doc, WS, HOME), indent=2))


def decide_group(group: dict[str, Any]) -> list[dict[str, Any]]:
    """[{id, warden, reason}] for every call of the group."""
    with tempfile.TemporaryDirectory(prefix="warden-diff-w-") as tmp:
        root = Path(tmp)
        ws = root / "ws"
        ws.mkdir()
        for rel, content in group.get("files", {}).items():
            (ws / rel).parent.mkdir(parents=True, exist_ok=True)
            (ws / rel).write_text(content)
        settings = Settings(
            state_dir=root / "state",
            config_dir=root / "config",
            claude_dir=root / "claude",
            claude_managed_settings=root / "managed-settings.json",
        )
        _write(settings.claude_managed_settings, group.get("managed"))
        _write(settings.claude_dir / "settings.json", group.get("user"))
        _write(ws / ".claude" / "settings.json", group.get("project"))
        _write(ws / ".claude" / "settings.local.json", group.get("local"))
        group = {**group, "trusted": _trusted(group, settings, ws)}
        if _hook_commands(group):
            trusting = {"warden": {"trustedHooks": sorted(_hook_commands(group))}}
            _write(settings.config_dir / "settings.json", trusting)
            return _engine_decisions(group, settings, ws)
        out = []
        for call in group["calls"]:
            tool_input = fill(call["input"], WS, HOME)
            try:
                exp, _ = explain_call(
                    settings,
                    ws,
                    call["tool"],
                    tool_input,
                    allow=fill(group.get("cli_allow", []), WS, HOME),
                    deny=fill(group.get("cli_deny", []), WS, HOME),
                    mode=group.get("mode"),
                    trusted=group.get("trusted", True),
                    memory_dir=group.get("memory_dir"),
                )
            except PolicyError as exc:
                out.append({"id": call["id"], "warden": "refused", "reason": str(exc)})
                continue
            out.append(
                {"id": call["id"], "warden": exp.decision.behavior, "reason": exp.decision.reason}
            )
        return out


LEVELS = ("managed", "user", "project", "local")


def _trusted(group: dict[str, Any], settings: Settings, ws: Path) -> bool:
    """The group's `trusted`, or, for a group with `trust_record`, what warden makes
    of the same Claude Code record (and of its own yes, with `warden_record`)."""
    if "trust_record" not in group:
        return bool(group.get("trusted", True))
    places = {"ws": str(ws), "parent": str(ws.parent), "root": "/"}
    projects = {places[p]: {"hasTrustDialogAccepted": True} for p in group["trust_record"]}
    settings.claude_dir.mkdir(parents=True, exist_ok=True)
    (settings.claude_dir / ".claude.json").write_text(json.dumps({"projects": projects}))
    if group.get("warden_record"):
        remember(settings, ws)
    return is_trusted(settings, ws)


def _hook_commands(group: dict[str, Any]) -> set[str]:
    found: set[str] = set()
    for level in LEVELS:
        events = (group.get(level) or {}).get("hooks", {})
        for entry in events.get("PreToolUse", []):
            found.update(h["command"] for h in entry.get("hooks", []))
    return found


def _engine_decisions(group: dict[str, Any], settings: Settings, ws: Path) -> list[dict[str, Any]]:
    trusted = group.get("trusted", True)
    try:
        policy = load_policy(
            settings,
            ws,
            allow=fill(group.get("cli_allow", []), WS, HOME),
            deny=fill(group.get("cli_deny", []), WS, HOME),
            mode=group.get("mode"),
            trusted=trusted,
        )
        hooks = load_hooks(settings, ws, trusted=trusted)
    except PolicyError as exc:
        return [{"id": c["id"], "warden": "refused", "reason": str(exc)} for c in group["calls"]]
    engine = PermissionEngine(policy, hooks, workspace_host=ws)
    ctx = CallContext(session_id="differential", permission_mode=policy.mode)
    out = []
    for call in group["calls"]:
        tool_call = ToolCall(
            tool_name=call["tool"], tool_input=fill(call["input"], WS, HOME), tool_use_id=call["id"]
        )
        decision = asyncio.run(engine.evaluate(tool_call, ctx))
        out.append({"id": call["id"], "warden": decision.behavior, "reason": decision.reason})
    return out
