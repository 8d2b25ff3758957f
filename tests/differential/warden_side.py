"""warden's decisions for a group: the same settings files laid out where warden
reads them, each call put to `warden policy explain`'s decision function
(`commands._explain.explain_call`) with `{ws}` read as `/workspace` and `{home}`
as `/root` (the sandbox's paths)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from orchestrator.commands._explain import explain_call
from orchestrator.config import Settings
from orchestrator.errors import PolicyError
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
                )
            except PolicyError as exc:
                out.append({"id": call["id"], "warden": "refused", "reason": str(exc)})
                continue
            out.append(
                {"id": call["id"], "warden": exp.decision.behavior, "reason": exp.decision.reason}
            )
        return out
