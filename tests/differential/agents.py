"""The request-level differential of subagents: for each case (agent files, a
project with or without CLAUDE.md, skills, memory, git, each model alias), the
pinned Claude Code's subagent's first model request (`agent_side`, run offline in
a network namespace) against warden's subagent's first request for the same
inputs (a real run: containers, runner, broker, scripted model).

Each request is cut into *parts*: the model, the system prompt's parts in order
(the agent's prompt, the memory section, the environment details, the git
snapshot), the first message's parts in order (the user's CLAUDE.md, the
project's, the date, the task, the preloaded skills), where the skill listing
stands (message index and role, string or blocks, wrapped or not), and every tool (name, and
its input schema's property names, types and required list). A part agrees when
both sides have it or both lack it (and, for an ordered location, the parts both
have come in the same order). Tools in `DOCUMENTED_TOOLS` are not checked:
docs/agents.md says why each differs. The run and the figure (parts agreeing /
checked, printed with `-s`): tests/integration/test_agent_differential.py.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHILD_MARK = "AGENTDIFF-CHILD"
DOCUMENTED_TOOLS = frozenset(
    {
        # Claude Code's, not run in a warden subagent (docs/agents.md, docs/tools.md)
        "Agent", "CronCreate", "CronDelete", "CronList", "EnterWorktree", "ExitWorktree",
        "ReportFindings", "SendMessage", "TaskCreate", "TaskGet", "TaskList",
        "TaskUpdate", "WebFetch", "WebSearch", "Monitor", "PushNotification",
        # warden's own search tools (the pinned CLI searches from Bash)
        "Glob", "Grep",
        # warden's background-shell reader and todo list (docs/tools.md); the pinned
        # CLI's subagents read shell output with Read and keep tasks with Task*
        "TaskOutput", "TodoWrite",
    }
)  # fmt: skip

AGENT_REV = (
    "---\nname: rev\ndescription: Reviews code\nmemory: project\nskills: [greet]\n"
    "color: blue\n---\nYou are REVBODY, a reviewer.\n"
)
AGENT_PLAIN = "---\nname: plain\ndescription: Plain helper\ntools: Bash, Read, Edit, Write\n---\nYou are PLAINBODY.\n"
AGENT_OMIT = (
    "---\nname: quiet\ndescription: No CLAUDE.md\nomitClaudeMd: true\nmodel: haiku\n"
    "---\nYou are QUIETBODY.\n"
)
AGENT_USERMEM = (
    "---\nname: keeper\ndescription: Keeps user memory\nmemory: user\nmodel: sonnet\n"
    "skills: greet, style\n---\nYou are KEEPERBODY.\n"
)
AGENT_EFFORT = (
    "---\nname: thinker\ndescription: Thinks hard\neffort: {level}\nmodel: sonnet\n"
    "---\nYou are THINKERBODY.\n"
)
SKILL = "---\nname: greet\ndescription: Greets people\n---\nSKILLBODY say hi.\n"
USER_SKILL = "---\nname: style\ndescription: House style\n---\nUSERSKILLBODY be terse.\n"
SKILLS_META = {
    ".claude/skills/hidden/SKILL.md": "---\nname: hidden\ndescription: Hidden one\n"
    "disable-model-invocation: true\n---\nHIDDENBODY\n",
    ".claude/skills/when/SKILL.md": "---\nname: when\ndescription: Has a when\n"
    'when_to_use: Use it when asked about WHENX\nargument-hint: "[file]"\n---\nWHENBODY\n',
    ".claude/skills/nodesc/SKILL.md": "---\nname: nodesc\n---\nFirst line of NODESC body.\nmore\n",
}
"""Skills whose frontmatter changes the listing or the tool's answer (`skill-meta`)."""
PROJECT_MD = "Project rule: PROJECTMD.\n"
USER_MD = "User rule: USERMD.\n"

MCP_FILES = {
    # a stdio MCP server (the tests' stdlib probe) and two agent files that narrow it
    "tools/probe.py": (Path(__file__).resolve().parents[1] / "fixtures" / "mcp_probe_server.py")
    .read_text(),
    ".mcp.json": json.dumps({"mcpServers": {"x": {"command": "python3",
                                                  "args": ["tools/probe.py"]}}}),
    ".claude/agents/mcpless.md": "---\nname: mcpless\ndescription: Without one MCP tool\n"
    "disallowedTools: mcp__x__crash\n---\nYou are MCPLESSBODY.\n",
    ".claude/agents/mcpone.md": "---\nname: mcpone\ndescription: One MCP tool\n"
    "tools: Read, mcp__x__where\n---\nYou are MCPONEBODY.\n",
}  # fmt: skip
"""Claude Code offers a subagent the MCP tools of `.mcp.json` less what its
`disallowedTools` names, or only those its `tools` list names."""

BASE_FILES = {
    ".claude/agents/rev.md": AGENT_REV,
    ".claude/agents/plain.md": AGENT_PLAIN,
    ".claude/agents/quiet.md": AGENT_OMIT,
    ".claude/agents/keeper.md": AGENT_USERMEM,
    ".claude/skills/greet/SKILL.md": SKILL,
    "README.md": "hello\n",
}


DOCUMENTED_PROPERTIES = frozenset(
    {
        # the model cannot turn warden's sandbox off: there is no such switch
        ("Bash", "dangerouslyDisableSandbox"),
        # warden's Read reads text files, not PDF pages
        ("Read", "pages"),
    }
)
"""Input fields of a checked tool that differ on purpose (docs/agents.md)."""

PARENT_MODEL = "sonnet"
"""Both parents run on Sonnet, so `inherit` means the same family on both sides."""


def _task(subagent_type: str, **extra: Any) -> dict[str, Any]:
    return {"description": "diff task", "prompt": "Do the task", "subagent_type": subagent_type,
            **extra}  # fmt: skip


def all_cases() -> list[dict[str, Any]]:
    """Agent files and projects: with and without CLAUDE.md, skills, memory, git,
    and each model alias."""
    with_md = {**BASE_FILES, "CLAUDE.md": PROJECT_MD}
    memory = {".claude/agent-memory/rev/MEMORY.md": "- [x](x.md) MEMORYBODY\n"}
    home = {".claude/CLAUDE.md": USER_MD, ".claude/skills/style/SKILL.md": USER_SKILL,
            ".claude/agent-memory/keeper/MEMORY.md": "USERMEMBODY\n"}  # fmt: skip
    cases: list[dict[str, Any]] = [
        {"id": "rev-git-md-mem", "git": True, "files": {**with_md, **memory},
         "dirty_files": {"README.md": "changed\n"}, "home_files": home, "task": _task("rev")},
        {"id": "rev-nogit-nomd", "files": BASE_FILES, "task": _task("rev")},
        {"id": "plain-git-md", "git": True, "files": with_md, "home_files": home,
         "task": _task("plain")},
        {"id": "plain-haiku", "files": with_md, "task": _task("plain", model="haiku")},
        {"id": "plain-sonnet", "files": with_md, "task": _task("plain", model="sonnet")},
        {"id": "plain-opus", "files": with_md, "task": _task("plain", model="opus")},
        {"id": "quiet-omit", "git": True, "files": with_md, "home_files": home,
         "task": _task("quiet")},
        {"id": "keeper-user-mem", "files": with_md, "home_files": home, "task": _task("keeper")},
        {"id": "gp-git-md", "git": True, "files": with_md, "home_files": home,
         "task": _task("general-purpose")},
        {"id": "explore", "git": True, "files": with_md, "home_files": home,
         "task": _task("Explore")},
        {"id": "plan", "git": True, "files": with_md, "home_files": home, "task": _task("Plan")},
        {"id": "rev-haiku", "files": with_md, "home_files": home,
         "task": _task("rev", model="haiku")},
        {"id": "rev-opus", "files": with_md, "home_files": home,
         "task": _task("rev", model="opus")},
        {"id": "skill-call", "files": BASE_FILES, "task": _task("rev"),
         "child_turns": [{"content": [{"type": "tool_use", "name": "Skill",
                                       "input": {"skill": "greet"}}]},
                         {"content": [{"type": "text", "text": "child done"}]}]},
        {"id": "mcp-disallowed", "files": {**BASE_FILES, **MCP_FILES}, "task": _task("mcpless")},
        {"id": "mcp-tools-list", "files": {**BASE_FILES, **MCP_FILES}, "task": _task("mcpone")},
        {"id": "skill-meta", "files": {**BASE_FILES, **SKILLS_META}, "task": _task("rev"),
         "child_turns": [{"content": [{"type": "tool_use", "name": "Skill",
                                       "input": {"skill": "hidden"}}]},
                         {"content": [{"type": "text", "text": "child done"}]}]},
        *({"id": f"effort-{level}", "files": {**BASE_FILES,
           ".claude/agents/thinker.md": AGENT_EFFORT.format(level=level)},
           "task": _task("thinker")} for level in ("low", "max", "7")),
    ]  # fmt: skip
    return [{**case, "parent_model": PARENT_MODEL} for case in cases]


# -- cutting a request into parts ---------------------------------------------


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [str(b.get("text", "")) for b in content or [] if isinstance(b, dict)]


def _ordered(text: str, markers: dict[str, list[str]]) -> list[str]:
    """The part names whose markers occur in `text`, in the order they occur."""
    found = []
    for name, options in markers.items():
        positions = [text.find(m) for m in options if m in text]
        if positions:
            found.append((min(positions), name))
    return [name for _, name in sorted(found)]


SYSTEM_MARKERS = {
    "agent prompt": ["REVBODY", "PLAINBODY", "QUIETBODY", "KEEPERBODY", "MCPLESSBODY", "MCPONEBODY",
                     "THINKERBODY", "general-purpose subagent", "search subagent", "planning subagent",
                     "file search specialist", "software architect",
                     "an agent for Claude Code"],
    "memory section": ["MEMORY.md"],
    "environment": ["Is directory a git repo"],
    "git snapshot": ["gitStatus"],
}  # fmt: skip
MESSAGE_MARKERS = {
    "user CLAUDE.md": ["USERMD"],
    "project CLAUDE.md": ["PROJECTMD"],
    "date": ["{today}"],
    "task": [CHILD_MARK],
    "skill greet": ["SKILLBODY"],
    "skill style": ["USERSKILLBODY"],
}
SKILL_LISTING = "- greet: Greets people"
"""How the project's skill `greet` is listed for the Skill tool (both sides)."""
LISTING_HEADER = "The following skills are available for use with the Skill tool:"
LISTING_PARTS = {
    "listed: when_to_use": "- when: Has a when - Use it when asked about WHENX",
    "listed: first line": "- nodesc: First line of NODESC body.",
    "listed: hidden": "- hidden:",
}
"""How skills with `when_to_use`, no description, `disable-model-invocation` are
listed (or not), looked for in any message."""
VALUE_PARTS = {
    "memory index": "MEMORYBODY",
    "user memory index": "USERMEMBODY",
    "git repo: Yes": "Is directory a git repo: Yes",
}


def _family(model: str) -> str:
    for family in ("haiku", "sonnet", "opus"):
        if family in model:
            return family
    return model


def _schema_shape(schema: Any) -> Any:
    props = schema.get("properties", {}) if isinstance(schema, dict) else {}
    return {
        "properties": {k: (v.get("type"), tuple(v.get("enum", ()))) for k, v in props.items()},
        "required": sorted(schema.get("required", [])) if isinstance(schema, dict) else [],
    }


def _skill_load(requests: list[dict[str, Any]] | None) -> str | None:
    """What the second request shows of a Skill call in the first turn: the tool
    result's text and whether the skill's directory and text follow it."""
    if not requests or len(requests) < 2:
        return None
    # the user message with the results (Claude Code may add a system message after it)
    users = [m for m in requests[1]["messages"] if m.get("role") == "user"]
    content = users[-1].get("content", []) if users else []
    blocks = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
    result = next((b for b in blocks if b.get("type") == "tool_result"), None)
    if result is None:
        return None
    follows = "\n".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
    text = "".join(_texts(result.get("content")))
    return f"{text} | body: {'Base directory for this skill' in follows and 'SKILLBODY' in follows}"


def _listing_place(request: dict[str, Any]) -> str | None:
    """Where the skill listing stands: the index and role of the message holding it,
    whether that message's content is a string, which of its blocks, and whether the
    listing is wrapped (Claude Code: a `system`-role message right after the first
    user message, a string that starts with the listing's header; to a model without
    mid-conversation system messages, Haiku 4.5, a reminder as the first block of the
    first user message)."""
    for index, message in enumerate(request["messages"]):
        content = message.get("content")
        texts = _texts(content)
        for at, text in enumerate(texts):
            if SKILL_LISTING in text:
                shape = "string" if isinstance(content, str) else "blocks"
                block = "first" if at == 0 else "last" if at == len(texts) - 1 else str(at)
                bare = text.startswith(LISTING_HEADER)
                return (f"message {index}, role {message.get('role')}, {shape}, {block} block, "
                        + ("unwrapped" if bare else "wrapped"))  # fmt: skip
    return None


def parts(
    request: dict[str, Any], today: str, requests: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The parts of a subagent's first request (`requests`: all of its requests, for
    what a first-turn Skill call brought back)."""
    system = "\n".join(_texts(request.get("system")))
    first = request["messages"][0]
    message = "\n".join(_texts(first.get("content")))
    # the listing's lines are looked for in any message; where it stands is a part
    # of its own ("skill listing place")
    everywhere = "\n".join(t for m in request["messages"] for t in _texts(m.get("content")))
    markers = {k: [m.replace("{today}", today) for m in v] for k, v in MESSAGE_MARKERS.items()}
    tools = {t["name"]: _schema_shape(t.get("input_schema")) for t in request.get("tools", [])}
    # Claude Code's Task tool is `Agent`; warden's names it `Task`
    if "Task" in tools:
        tools["Agent"] = tools.pop("Task")
    return {
        "model": _family(str(request.get("model"))),
        "system": _ordered(system, SYSTEM_MARKERS),
        "message": _ordered(message, markers),
        "values": sorted(k for k, v in VALUE_PARTS.items() if v in system + message)
        + (["skill listing"] if SKILL_LISTING in everywhere else [])
        + [k for k, v in LISTING_PARTS.items() if v in everywhere],
        "skill load": _skill_load(requests),
        "skill listing place": _listing_place(request),
        # no effort is the API's default, `high`, which Claude Code sends explicitly
        # (docs/agents.md)
        "effort": (request.get("output_config") or {}).get("effort") or "high",
        "tools": tools,
    }


@dataclass
class CaseResult:
    id: str
    checked: int = 0
    agreed: int = 0
    differences: list[str] = field(default_factory=list)

    def check(self, what: str, same: bool, detail: str = "") -> None:
        self.checked += 1
        if same:
            self.agreed += 1
        else:
            self.differences.append(f"{what}{': ' + detail if detail else ''}")


def compare_parts(case_id: str, claude: dict[str, Any], warden: dict[str, Any]) -> CaseResult:
    result = CaseResult(case_id)
    result.check("model", claude["model"] == warden["model"],
                 f"{claude['model']} / {warden['model']}")  # fmt: skip
    for where in ("system", "message"):
        names = set(claude[where]) | set(warden[where])
        for name in sorted(names):
            c, w = name in claude[where], name in warden[where]
            result.check(f"{where}: {name}", c == w, f"claude {c}, warden {w}")
        common_c = [n for n in claude[where] if n in warden[where]]
        common_w = [n for n in warden[where] if n in claude[where]]
        result.check(f"{where}: order", common_c == common_w, f"{common_c} / {common_w}")
    result.check("effort", claude.get("effort") == warden.get("effort"),
                 f"{claude.get('effort')} / {warden.get('effort')}")  # fmt: skip
    result.check("skill load", claude.get("skill load") == warden.get("skill load"),
                 f"{claude.get('skill load')} / {warden.get('skill load')}")  # fmt: skip
    c_place, w_place = claude.get("skill listing place"), warden.get("skill listing place")
    result.check("skill listing place", c_place == w_place, f"{c_place} / {w_place}")
    for name in sorted({*VALUE_PARTS, "skill listing", *LISTING_PARTS}):
        c, w = name in claude["values"], name in warden["values"]
        result.check(name, c == w, f"claude {c}, warden {w}")
    names = (set(claude["tools"]) | set(warden["tools"])) - DOCUMENTED_TOOLS
    for name in sorted(names):
        c, w = claude["tools"].get(name), warden["tools"].get(name)
        result.check(f"tool {name}", c is not None and w is not None, f"claude {c is not None}, warden {w is not None}")  # fmt: skip
        if c is not None and w is not None:
            kept = {p for p in set(c["properties"]) | set(w["properties"])
                    if (name, p) not in DOCUMENTED_PROPERTIES}  # fmt: skip
            cp, wp = set(c["properties"]) & kept, set(w["properties"]) & kept
            same = cp == wp and c["required"] == w["required"]
            detail = f"{sorted(cp ^ wp)} {c['required']} / {w['required']}"
            result.check(f"tool {name} schema", same, detail)
    return result


# -- the Claude Code side -------------------------------------------------------


def claude_request(case: dict[str, Any], claude: str) -> dict[str, Any]:
    """Claude Code's child and parent requests for `case` (a child process in a
    network namespace with only `lo` and a private mount namespace)."""
    with tempfile.TemporaryDirectory(prefix="warden-adiff-") as tmp:
        os.chmod(tmp, 0o711)
        cfile, ofile = Path(tmp) / "case.json", Path(tmp) / "out.json"
        cfile.write_text(json.dumps(case))
        proc = subprocess.run(
            ["unshare", "-n", "-m", "--", sys.executable, "-m", "tests.differential.agent_side",
             str(cfile), str(ofile), claude, tmp],
            cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True,
            timeout=300, check=False,
        )  # fmt: skip
        if proc.returncode != 0 or not ofile.exists():
            raise RuntimeError(f"case {case['id']}: claude side failed:\n{proc.stderr[-3000:]}")
        out: dict[str, Any] = json.loads(ofile.read_text())
    if out["child"] is None:
        raise RuntimeError(f"case {case['id']}: Claude Code's subagent made no request: {out}")
    return out


def today() -> str:
    return datetime.datetime.now(datetime.UTC).date().isoformat()
