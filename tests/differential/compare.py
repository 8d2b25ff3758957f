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

from orchestrator.permissions.shell import analyse
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
NOT_DECIDED = ("No such tool available",)
"""Tool results that show Claude Code made no permission decision (the tool is absent)."""
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
    # Removed when the child is gone: its files too (made under `tmp`, which Claude
    # Code, run unprivileged in it, must be able to pass through).
    with tempfile.TemporaryDirectory(prefix="warden-diff-g-") as tmp:
        os.chmod(tmp, 0o711)
        gfile, ofile = Path(tmp) / "group.json", Path(tmp) / "out.json"
        gfile.write_text(json.dumps(group))
        proc = subprocess.run(
            ["unshare", "-n", "-m", "--", sys.executable, "-m",
             "tests.differential.claude_side", str(gfile), str(ofile), claude, tmp],
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


CLAUDE_READ_ONLY = frozenset(
    {
        "echo",
        "ls",
        "cat",
        "head",
        "tail",
        "wc",
        "grep",
        "find",
        "pwd",
        "git",
        "sort",
        "uniq",
        "cut",
        "tr",
        "printf",
        "true",
        "date",
        "which",
        "file",
        "stat",
        "du",
        "df",
        "less",
        "more",
        "diff",
        "tree",
    }
)
"""Commands Claude Code (2.1.x) runs without a rule when it judges them read-only."""
CLAUDE_ACCEPT_EDITS = frozenset({"mkdir", "touch", "rm", "rmdir", "mv", "cp", "sed"})
"""File commands Claude Code's acceptEdits mode runs without a rule in the workspace."""


def _names(call: dict[str, Any]) -> set[str] | None:
    command = call["input"].get("command")
    if call["tool"] != "Bash" or not isinstance(command, str):
        return None
    found = analyse(command)
    return {c.words[0].rsplit("/", 1)[-1] for c in [*found.commands, *found.wrappers] if c.words}


def _read_only(group: dict[str, Any], call: dict[str, Any], w: str, cl: str) -> bool:
    names = _names(call)
    if names is None or cl != "allow":
        return False
    allowed = CLAUDE_READ_ONLY | {"timeout", "nice", "nohup", "stdbuf", "time"}
    if group.get("mode") == "acceptEdits":
        allowed |= CLAUDE_ACCEPT_EDITS
    return names <= allowed


def _workspace_hooks(group: dict[str, Any]) -> bool:
    return any("hooks" in (group.get(level) or {}) for level in ("project", "local"))


def _reads_denied_file(group: dict[str, Any], call: dict[str, Any], w: str, cl: str) -> bool:
    reason = call.get("_reason", "")
    if call["tool"] != "Bash":
        return False
    if w == "deny":
        return "read '" in reason or "may read" in reason
    return w == "ask" and ("may read files under" in reason or "may match files that" in reason)


KNOWN: list[Known] = [
    Known(
        "webfetch-needs-allow",
        "WebFetch and WebSearch are server tools: the model API fetches, so the broker "
        "forwards them only under an allow rule, in every mode, and refuses what an ask "
        "rule of any scope covers (an ask cannot wait inside a model request).",
        lambda g, c, w, cl: _tool(c) in ("WebFetch", "WebSearch") and w == "deny",
    ),
    Known(
        "read-only-commands",
        "Claude Code runs commands it judges read-only (ls, cat, echo, git status, ...) and, "
        "in acceptEdits, file commands (touch, rm, mkdir, ...) without a rule; warden runs "
        "a command only when a rule allows every part of it.",
        _read_only,
    ),
    Known(
        "bash-reads-a-denied-file",
        "A command that reads a file a Read rule denies is denied (or asked about when its "
        "paths are only known at run time: a recursive read or copy of a tree that holds "
        "one, `cp -r sub x`, a glob that may name one), also through an input redirection "
        "or a command substitution; Claude Code lets some of these run.",
        _reads_denied_file,
    ),
    Known(
        "bash-writes-a-protected-file",
        "A command that writes a path an Edit rule denies or asks about (`tee FILE`, and "
        "`cp`, `touch`, `mv`, `sed -i` under an ask rule) is denied or asked about; Claude "
        "Code checks only some of these commands, and only against deny rules.",
        lambda g, c, w, cl: (
            _tool(c) == "Bash"
            and (
                c.get("_reason", "").startswith("write '")
                or "may write files under" in c.get("_reason", "")
            )
        ),
    ),
    Known(
        "unproven-commands-ask",
        "A command the analyser cannot prove (an environment prefix such as FOO=1, a link "
        "made and then used, git -c/--output/--no-index, a line past the analyser's time "
        "bound, ...) is asked about whatever rule names it, a whole-tool `Bash` allow too.",
        lambda g, c, w, cl: _tool(c) == "Bash" and "cannot prove" in c.get("_reason", ""),
    ),
    Known(
        "wrapped-commands-need-their-rule",
        "`timeout 5 X` allowed by `Bash(timeout:*)` alone in Claude Code; warden also needs "
        "a rule for X.",
        lambda g, c, w, cl: (
            _tool(c) == "Bash"
            and "no allow rule covers" in c.get("_reason", "")
            and bool((_names(c) or set()) & {"timeout", "sh", "bash", "xargs", "env", "find"})
        ),
    ),
    Known(
        "plan-mode-denies-changes",
        "In plan mode warden denies writes and commands (a plan is read-only); Claude Code "
        "asks, since approving ends its plan.",
        lambda g, c, w, cl: (
            g.get("mode") == "plan" and "plan mode is read-only" in c.get("_reason", "")
        ),
    ),
    Known(
        "hook-ask-in-dontAsk",
        "A PreToolUse hook that asks is refused in dontAsk mode: the mode promises that "
        "nothing waits for a person; Claude Code asks.",
        lambda g, c, w, cl: (
            g.get("mode") == "dontAsk" and "the dontAsk mode never asks" in c.get("_reason", "")
        ),
    ),
    Known(
        "untrusted-workspace-hooks-only-restrict",
        "The hooks of a workspace the person has not trusted may deny or ask, never allow "
        "(as its rules); Claude Code's -p runs them with full effect without a trust dialog.",
        lambda g, c, w, cl: g.get("trusted") is False and _workspace_hooks(g),
    ),
    Known(
        "untrusted-workspace-drops-every-widening-key",
        "In a workspace the person has not trusted, warden applies none of the project's "
        "allow rules, modes or additionalDirectories, from settings.local.json as from "
        "settings.json; Claude Code drops only settings.json's allow rules.",
        lambda g, c, w, cl: g.get("trusted") is False and bool(g.get("local") or g.get("project")),
    ),
    Known(
        "trust-binds-to-content",
        "Claude Code's trust record names a directory; warden's trust covers the content "
        "a person said yes to, so Claude Code's record alone unlocks nothing.",
        lambda g, c, w, cl: "ws" in g.get("trust_record", []) and not g.get("warden_record"),
    ),
    Known(
        "notebook-edit-under-edit-rules",
        "NotebookEdit edits a file: Edit deny and ask rules hold for it in every mode; "
        "Claude Code 2.1.197 runs it under a deny of `Edit(./nb/**)` (measured).",
        lambda g, c, w, cl: _tool(c) == "NotebookEdit" and "Edit(" in c.get("_reason", ""),
    ),
    Known(
        "write-rules-apply",
        "`Write(path)` rules hold for Write and Edit in warden; Claude Code reads path rules "
        "only for Read and Edit, so it ignores them.",
        lambda g, c, w, cl: "Write(" in c.get("_reason", ""),
    ),
    Known(
        "agent-memory-own-only",
        "Write/Edit of a `.md` file is allowed unasked only in the agent's own memory "
        "directory (the only one its sandbox may write); Claude Code allows it in any "
        "agent's project or local memory directory.",
        lambda g, c, w, cl: (
            _tool(c) in ("Write", "Edit")
            and "/.claude/agent-memory" in str(c["input"].get("file_path", ""))
            and "(built-in)" in c.get("_reason", "")
        ),
    ),
    Known(
        "skill-ask-rules-hold",
        "An ask rule naming a skill (`Skill(lint)`, `Skill(git:*)`) asks before it is "
        "loaded; Claude Code 2.1.197 ignores ask rules with a skill name and loads a plain "
        "skill unasked (measured).",
        lambda g, c, w, cl: (
            _tool(c) == "Skill"
            and w == "ask"
            and "asks for approval" in c.get("_reason", "")
            and c.get("_reason", "").startswith("Skill(")
        ),
    ),
]
"""Where warden is stricter than Claude Code, and why (policies/README.md has the same
table)."""
KNOWN_LOOSER: list[Known] = [
    Known(
        "webfetch-subdomains",
        "WebFetch runs on the model API's servers: the broker can only pass the allowed "
        "domains on, and the API's `allowed_domains` include subdomains; Claude Code asks "
        "for a subdomain that no rule names.",
        lambda g, c, w, cl: (
            _tool(c) == "WebFetch"
            and w == "allow"
            and "example.com" in str(c["input"].get("url", ""))
        ),
    ),
    Known(
        "write-allow-rules",
        "An allow rule `Write(path)` allows Write and Edit in warden (a rule that names a "
        "tool is read as meaning it); Claude Code ignores Write path rules and asks.",
        lambda g, c, w, cl: "allowed by Write(" in c.get("_reason", ""),
    ),
    Known(
        "workspace-spelled-out",
        "A path rule naming `/workspace/...` (warden's mount point spelled out) is read as "
        "that absolute container path; Claude Code reads `/x` relative to the project "
        "root, so for it the rule names `<project>/workspace/...` and does not match.",
        lambda g, c, w, cl: (
            "(/workspace/" in c.get("_reason", "") or "(//workspace/" in c.get("_reason", "")
        ),
    ),
]
"""Where warden cannot be as strict as Claude Code (reported apart, never hidden)."""


@dataclass
class Summary:
    cases: int = 0
    compared: int = 0
    agree: int = 0
    documented: dict[str, int] = field(default_factory=dict)
    fail_open: list[dict[str, Any]] = field(default_factory=list)
    looser: list[dict[str, Any]] = field(default_factory=list)
    """warden allows what Claude Code asks or denies, documented in KNOWN_LOOSER."""
    other: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)

    @property
    def undocumented(self) -> int:
        return self.compared - sum(self.documented.values()) - len(self.looser)

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
            f"warden allows what Claude Code denies or asks: {len(self.fail_open)} "
            f"(and {len(self.looser)} documented: "
            f"{', '.join(sorted({r['known'] for r in self.looser})) or 'none'})",
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
            row = {
                "id": call["id"],
                "tool": call["tool"],
                "input": call["input"],
                "claude": cl,
                "warden": w,
                "reason": ours[call["id"]]["reason"],
                "text": outcome["text"],
            }
            if cl not in STRICTNESS or any(m in outcome["text"] for m in NOT_DECIDED):
                summary.skipped.append(row)
                continue
            summary.compared += 1
            if w == cl:
                summary.agree += 1
                continue
            probe = {**call, "_reason": row["reason"]}
            known = next(
                (
                    k
                    for k in KNOWN
                    if w in STRICTNESS
                    and STRICTNESS[w] > STRICTNESS[cl]
                    and k.applies(group, probe, w, cl)
                ),
                None,
            )
            looser = next((k for k in KNOWN_LOOSER if k.applies(group, probe, w, cl)), None)
            if looser is not None and w == "allow":
                summary.looser.append({**row, "known": looser.name})
            elif known is not None:
                summary.documented[known.name] = summary.documented.get(known.name, 0) + 1
            elif w == "allow":
                summary.fail_open.append(row)
            else:
                summary.other.append(row)
    return summary
