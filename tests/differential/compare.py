"""Run groups on both sides, compare, and sum up.

Claude Code runs one group per `unshare -n -m` child (`claude_side`), two at a
time; its outcomes are cached by the group's content and the CLI version, so a
re-run after a change to warden only re-asks warden. A disagreement is either
*documented* (warden is stricter for a reason in `policies/README.md`, listed in
`KNOWN`), or counted: `fail_open` when warden allows what Claude Code denies or
asks, `other` for every other difference.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.differential.warden_side import decide_group

CLAUDE_CODE_VERSION = "2.1.197"
"""The pinned Claude Code CLI (npm: @anthropic-ai/claude-code)."""
CACHE = Path(os.environ.get("WARDEN_DIFF_CACHE", "/var/tmp/warden-differential"))
"""The CLI install and Claude Code's cached outcomes; outside /root, which the child
hides (`claude_side.python_for_everyone`), and readable by the unprivileged user."""
GROUP_TIMEOUT_S = 600
WORKERS = 2
HARNESS = "2"
"""Bumped when `claude_side` changes what it measures (invalidates the cache)."""
RETRIES = 3
MCP_RACE = "passed via --permission-prompt-tool) not found"
STRICTNESS = {"allow": 0, "ask": 1, "deny": 2}


def claude_binary() -> str:
    """The pinned CLI, installed from npm into the cache on first use."""
    if os.environ.get("WARDEN_CLAUDE_CODE"):
        return os.environ["WARDEN_CLAUDE_CODE"]
    prefix = CACHE / f"claude-code-{CLAUDE_CODE_VERSION}"
    binary = prefix / "node_modules/.bin/claude"
    if not binary.exists():
        npm = shutil.which("npm")
        if npm is None:
            raise RuntimeError("npm is missing: apt-get install -y nodejs npm (or run .ci/setup)")
        subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(prefix),
             f"@anthropic-ai/claude-code@{CLAUDE_CODE_VERSION}"],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
    return str(binary)


def _key(group: dict[str, Any]) -> str:
    text = json.dumps(group, sort_keys=True) + CLAUDE_CODE_VERSION + HARNESS
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def claude_group(group: dict[str, Any], claude: str, use_cache: bool = True) -> dict[str, Any]:
    """Claude Code's outcomes for one group (from the cache when it has them)."""
    cached = CACHE / "outcomes" / f"{group['id']}-{_key(group)}.json"
    if use_cache and cached.exists():
        result: dict[str, Any] = json.loads(cached.read_text())
        return result
    for attempt in range(RETRIES + 1):
        result = _run_child(group, claude)
        # Claude Code gives the prompt server a few seconds to start; on a busy
        # machine it may lose that race. Nothing was decided then: run it again.
        if result["exit"] == 0 or MCP_RACE not in result["stderr"] or attempt == RETRIES:
            break
    if result["exit"] != 0:
        raise RuntimeError(
            f"group {group['id']}: Claude Code exited {result['exit']}: {result['stderr'][-1500:]}"
        )
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps(result, indent=1))
    return result


def _run_child(group: dict[str, Any], claude: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="warden-diff-g-") as tmp:
        gfile, ofile = Path(tmp) / "group.json", Path(tmp) / "out.json"
        gfile.write_text(json.dumps(group))
        proc = subprocess.run(
            ["unshare", "-n", "-m", "--", sys.executable, "-m",
             "tests.differential.claude_side", str(gfile), str(ofile), claude],
            cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True,
            timeout=GROUP_TIMEOUT_S, check=False,
        )  # fmt: skip
        if proc.returncode != 0 or not ofile.exists():
            raise RuntimeError(f"group {group['id']}: claude side failed:\n{proc.stderr[-3000:]}")
        result: dict[str, Any] = json.loads(ofile.read_text())
        return result


@dataclass(frozen=True)
class Known:
    """A documented difference: warden is stricter here, for `reason`."""

    name: str
    reason: str
    applies: Callable[[dict[str, Any], dict[str, Any], str, str], bool]


def _tool(call: dict[str, Any]) -> str:
    return str(call["tool"])


KNOWN: list[Known] = [
    Known(
        "webfetch-needs-allow",
        "WebFetch and WebSearch are server tools: the model API fetches, so the broker "
        "forwards them only under an allow rule, in every mode (an ask cannot wait inside "
        "a model request).",
        lambda g, c, w, cl: _tool(c) in ("WebFetch", "WebSearch") and w == "deny",
    ),
    Known(
        "bash-reads-under-a-denied-tree",
        "A command that may read under a directory holding a file a Read rule denies "
        "(a glob, a variable, `grep -r`, `xargs`) is asked about: warden cannot name the "
        "files it will read.",
        lambda g, c, w, cl: _tool(c) == "Bash" and w == "ask" and cl == "allow",
    ),
]


@dataclass
class Summary:
    cases: int = 0
    compared: int = 0
    agree: int = 0
    documented: dict[str, int] = field(default_factory=dict)
    fail_open: list[dict[str, Any]] = field(default_factory=list)
    other: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)

    @property
    def undocumented(self) -> int:
        return self.compared - sum(self.documented.values())

    @property
    def agreement(self) -> float:
        return self.agree / self.undocumented if self.undocumented else 1.0

    def lines(self) -> list[str]:
        out = [
            f"cases: {self.cases}; compared: {self.compared} (skipped: {len(self.skipped)}, "
            "where Claude Code made no permission decision)",
            f"agree: {self.agree} of {self.undocumented} not in the documented table "
            f"= {100 * self.agreement:.1f}%",
            f"documented (warden stricter): {sum(self.documented.values())} "
            + json.dumps(self.documented),
            f"warden allows what Claude Code denies or asks: {len(self.fail_open)}",
            f"other differences: {len(self.other)}",
        ]
        for row in [*self.fail_open, *self.other][:60]:
            out.append(
                f"  {row['id']}: {row['tool']} {json.dumps(row['input'])[:90]} "
                f"claude={row['claude']} warden={row['warden']} ({row['reason'][:120]})"
            )
        return out


def compare(groups: Iterable[dict[str, Any]], claude: str, use_cache: bool = True) -> Summary:
    groups = list(groups)
    with ThreadPoolExecutor(WORKERS) as pool:
        claude_results = list(pool.map(lambda g: claude_group(g, claude, use_cache), groups))
    summary = Summary()
    for group, theirs in zip(groups, claude_results, strict=True):
        ours = {o["id"]: o for o in decide_group(group)}
        for call, outcome in zip(group["calls"], theirs["outcomes"], strict=True):
            summary.cases += 1
            cl, w = outcome["claude"], ours[call["id"]]["warden"]
            row = {"id": call["id"], "tool": call["tool"], "input": call["input"], "claude": cl,
                   "warden": w, "reason": ours[call["id"]]["reason"], "text": outcome["text"]}
            if cl not in STRICTNESS:
                summary.skipped.append(row)
                continue
            summary.compared += 1
            if w == cl:
                summary.agree += 1
                continue
            known = next((k for k in KNOWN if w in STRICTNESS and STRICTNESS[w] >
                          STRICTNESS[cl] and k.applies(group, call, w, cl)), None)
            if known is not None:
                summary.documented[known.name] = summary.documented.get(known.name, 0) + 1
            elif w == "allow":
                summary.fail_open.append(row)
            else:
                summary.other.append(row)
    return summary
