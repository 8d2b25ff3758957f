"""Permission rules in Claude Code's syntax, and how one rule matches one thing.

`Tool` matches every use of the tool; `Tool(specifier)` narrows it:
- Bash: `Bash(npm run test:*)` (these words, then anything), `Bash(git diff *)`
  (`*` matches any text; a single trailing ` *` is optional), `Bash(git status)`
  (exactly this command). Matching is per simple command (see `shell.py`).
- Read/Edit/Write/Glob/Grep: a path pattern (see `paths.py`). As in Claude Code,
  `Edit` rules cover every tool that edits files (Edit, Write) and `Read` rules every
  tool that reads them (Read, Glob, Grep). `Write(...)` rules cover Write and Edit.
- Task: the subagent type, `Task(code-reviewer)`.
- MCP tools (`mcp__server__tool`): `mcp__server` and `mcp__server__*` match every
  tool of that server, `mcp__server__tool` the one tool, and a `*` in the tool part
  any text (`mcp__db__read*`); the server part is taken as written. These are the
  forms the pinned Claude Code decides calls by (measured: `allow: mcp__x__p*` allowed
  `mcp__x__poke`, `allow: mcp__x*` allowed nothing). A whole-tool deny rule also
  removes what it names from the tools a subagent is offered, where Claude Code
  reads every `*` as any text (`mcp_offer_patterns`).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from functools import lru_cache

from pydantic import BaseModel, ConfigDict

from orchestrator.behavior import Behavior
from orchestrator.errors import PolicyError
from orchestrator.permissions import paths
from orchestrator.permissions.shell import SimpleCommand
from orchestrator.permissions.shell.wrappers import NOT_PROVEN
from sandbox_tools.wire import mcp_name_glob

RuleBehavior = Behavior
"""What a rule says (`behavior.Behavior`)."""

MAX_RULE_CHARS = 4096
"""Longest rule text accepted."""

PATH_TOOLS = frozenset({"Read", "Edit", "Write", "Glob", "Grep", "NotebookEdit"})
APPLIES_TO: dict[str, frozenset[str]] = {
    "Read": frozenset({"Read", "Glob", "Grep"}),
    "Edit": frozenset({"Edit", "Write", "NotebookEdit"}),
    "Write": frozenset({"Write", "Edit", "NotebookEdit"}),
}
"""A rule for the key tool also governs these tools (as in Claude Code, `Edit` rules
hold for every tool that edits files, NotebookEdit included)."""

TOOL_ALIASES = {
    "Agent": "Task",
    "BashOutput": "TaskOutput",
    "KillBash": "TaskStop",
    "KillShell": "TaskStop",
    "ListMcpResources": "ListMcpResourcesTool",
    "ReadMcpResource": "ReadMcpResourceTool",
    "ReadMcpResourceDir": "ReadMcpResourceDirTool",
}
"""Claude Code's other names (newer, or older) for tools warden has under another
name. A rule (`Agent(Explore)`, `KillShell`) and an agent file's `tools` entry name
the tool by either: the pinned Claude Code's alias table maps them the same way, so
a deny rule written with Claude Code's name is never one that matches nothing."""

_RULE = re.compile(
    r"^(?P<tool>mcp__[A-Za-z0-9_*-]+|[A-Za-z][A-Za-z0-9_-]*)(?:\((?P<spec>.*)\))?$", re.DOTALL
)

MCP_PREFIX = "mcp__"


def mcp_rule_covers(rule_tool: str, tool_name: str) -> bool:
    """Whether the rule's tool part names more than one exact MCP tool and `tool_name`
    is one of them: a whole server (`mcp__S`, `mcp__S__*`), or tools of server S whose
    names fit the tool part's `*`s (`mcp__S__read*`). The server part is literal."""
    if not rule_tool.startswith(MCP_PREFIX) or not tool_name.startswith(MCP_PREFIX):
        return False
    server, split, tool = rule_tool[len(MCP_PREFIX) :].partition("__")
    prefix = f"{MCP_PREFIX}{server}__"
    if not tool_name.startswith(prefix) or len(tool_name) == len(prefix) or "*" in server:
        return False
    if not split:
        return True
    return "*" in tool and mcp_name_glob(tool, tool_name[len(prefix) :])


def mcp_offer_patterns(rules: Sequence[Rule]) -> tuple[str, ...]:
    """The `wire.mcp_name_glob` patterns of the MCP tools whole-tool deny rules remove
    from what a subagent is offered, as the pinned Claude Code removes them: `mcp__S`
    a whole server, and otherwise `*` any text over the whole name (`mcp__x*`
    removed the tools of `x` and `xy`, `mcp__*__zap` every server's `zap`). A rule
    with a specifier removes nothing (its call is decided when made)."""
    patterns: list[str] = []
    for rule in rules:
        if rule.behavior != "deny" or not rule.whole_tool or not rule.tool.startswith(MCP_PREFIX):
            continue
        rest = rule.tool[len(MCP_PREFIX) :]
        whole_server = "__" not in rest and "*" not in rest
        patterns.append(f"{rule.tool}__*" if whole_server else rule.tool)
    return tuple(dict.fromkeys(patterns))


def tool_listed(tool_name: str, listed: frozenset[str]) -> bool:
    """Whether an agent's tool list (`allowed_tools`) holds `tool_name`, an MCP tool
    also by its server (`mcp__S`, `mcp__S__*`) or as any MCP tool (`mcp__*`)."""
    if tool_name in listed:
        return True
    if tool_name.startswith(MCP_PREFIX) and f"{MCP_PREFIX}*" in listed:
        return True
    return any(mcp_rule_covers(name, tool_name) for name in listed)


class Rule(BaseModel):
    """One rule, remembering the source it came from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    text: str
    """The rule as written, e.g. `Bash(git diff:*)`."""
    tool: str
    """The tool name part."""
    specifier: str | None
    """What is inside the parentheses; None (or `*`) for the whole tool."""
    behavior: RuleBehavior
    """Which list the rule is in."""
    source: str
    """Where it came from: `managed:PATH`, `cli`, `policy:NAME`, `project:PATH`, `user:PATH`."""

    def applies_to(self, tool_name: str) -> bool:
        return (
            tool_name == self.tool
            or tool_name in APPLIES_TO.get(self.tool, ())
            or mcp_rule_covers(self.tool, tool_name)
        )

    @property
    def whole_tool(self) -> bool:
        return self.specifier is None or self.specifier.strip() in ("", "*")


def split_tool_rules(value: str) -> list[str]:
    """Rules as Claude Code's `--allowedTools`/`--disallowedTools` take them: separated
    by commas or whitespace outside parentheses, so `"Bash(git log:*) Read,Edit"` is
    three rules. An unbalanced `(` keeps the rest as one rule (parse_rule refuses it)."""
    rules: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in value:
        if ch == "(":
            depth += 1
        elif ch == ")" and depth:
            depth -= 1
        if depth == 0 and (ch == "," or ch.isspace()):
            if current:
                rules.append("".join(current))
            current = []
            continue
        current.append(ch)
    if current:
        rules.append("".join(current))
    return rules


def parse_rule(text: object, behavior: RuleBehavior, source: str, where: str) -> Rule:
    """Parse one rule; `where` names the file and key for the error message."""
    if not isinstance(text, str):
        raise PolicyError(f'{where}: a rule must be a string like "Bash(git diff:*)", got {text!r}')
    stripped = text.strip()
    if len(stripped) > MAX_RULE_CHARS:
        raise PolicyError(f"{where}: rule longer than {MAX_RULE_CHARS} characters")
    m = _RULE.match(stripped)
    if not m:
        raise PolicyError(
            f"{where}: {text!r} is not a rule; write a tool name (`Bash`) or a tool with a "
            "specifier (`Bash(npm test:*)`, `Read(./.env)`)"
        )
    spec = m.group("spec")
    if spec is not None and not spec.strip():
        raise PolicyError(f"{where}: {text!r} has an empty specifier; drop the parentheses")
    if spec is not None and m.group("tool") == "Bash" and ":*" in spec[:-2]:
        raise PolicyError(f"{where}: {text!r}: ':*' is only allowed at the end of a Bash rule")
    tool = TOOL_ALIASES.get(m.group("tool"), m.group("tool"))
    return Rule(text=stripped, tool=tool, specifier=spec, behavior=behavior, source=source)


# -- Bash ---------------------------------------------------------------------------


def bash_matches(rule: Rule, command: SimpleCommand, *, strict: bool) -> bool:
    """Whether a Bash rule covers one simple command. `strict` (deny/ask rules) also
    tries the command name without its directory (`/bin/rm` as `rm`)."""
    if rule.whole_tool:
        return True
    assert rule.specifier is not None
    variants = [command.words]
    if strict:
        variants += _strict_variants(command.words)
    return any(
        _bash_spec_matches(rule.specifier, words, command.open_ended, strict) for words in variants
    )


MAX_LOOKED_THROUGH = 64
"""Words after a privilege changer tried as the start of the command it runs."""


def _strict_variants(words: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Other readings a deny or ask rule must also catch: the command name without
    its directory (`/bin/rm` as `rm`), and, after a privilege or root changer whose
    options warden does not read (`sudo`, `doas`, `su`, ...: `shell.wrappers`), every
    later word as the start of the command it may run (`sudo -u x rm ...` as `rm ...`),
    as Claude Code denies `sudo rm` under a deny of `rm`."""
    out: list[tuple[str, ...]] = []
    name = words[0].rsplit("/", 1)[-1]
    if name != words[0]:
        out.append((name, *words[1:]))
    if name in NOT_PROVEN:
        for i in range(1, min(len(words), MAX_LOOKED_THROUGH + 1)):
            rest = words[i:]
            out.append(rest)
            if "/" in rest[0]:
                out.append((rest[0].rsplit("/", 1)[-1], *rest[1:]))
    return out


def _bash_spec_matches(spec: str, words: tuple[str, ...], open_ended: bool, strict: bool) -> bool:
    spec = spec.strip()
    if spec.endswith(":*"):
        prefix = _spec_words(spec[:-2])
        return len(words) >= len(prefix) and list(words[: len(prefix)]) == prefix
    text = " ".join(words)
    if "*" in spec:
        if open_ended and not spec.endswith("*") and not strict:
            return False
        return _bash_glob_matches(spec, text)
    expected = _spec_words(spec)
    if open_ended:  # more arguments come at run time: only a deny/ask may assume a match
        return strict and list(words[: len(expected)]) == expected
    return list(words) == expected


@lru_cache(maxsize=4096)
def _spec_words_cached(spec: str) -> tuple[str, ...]:
    return tuple(_spec_words_uncached(spec))


def _spec_words(spec: str) -> list[str]:
    return list(_spec_words_cached(spec))


def _spec_words_uncached(spec: str) -> list[str]:
    """A rule's command words, with shell quoting removed (`git commit -m "wip"`)."""
    try:
        return shlex.split(spec)
    except ValueError:
        return spec.split()


def _bash_glob_matches(spec: str, text: str) -> bool:
    """Whether `text` matches a rule whose only wildcard is `*` (any text); a single
    trailing ` *` is optional. Matched greedily left to right with `str.find`, which
    is exact for `*`-only patterns and linear in the text: a regular expression
    of several `.*` backtracks polynomially on a long hostile command."""
    normal = " ".join(spec.split())
    if normal.endswith(" *") and normal.count("*") == 1:
        head = normal[:-2]
        return text == head or text.startswith(head + " ")
    first, *middle, last = normal.split("*")
    if not text.startswith(first) or len(text) < len(first) + len(last):
        return False
    pos, end = len(first), len(text) - len(last)
    for part in middle:
        found = text.find(part, pos, end)
        if found < 0:
            return False
        pos = found + len(part)
    return text.endswith(last) and pos <= end


# -- paths --------------------------------------------------------------------------


def path_matches(rule: Rule, spellings: list[str], *, strict: bool) -> bool:
    """Whether a path rule covers a path given in all its spellings: any spelling
    for deny/ask (`strict`), every spelling for allow."""
    if rule.whole_tool:
        return True
    assert rule.specifier is not None
    patterns = paths.rule_patterns(rule.specifier, strict=strict)

    def hit(p: str) -> bool:  # deny and ask rules match in either case (paths.py)
        return any(paths.matches(pat, p, fold=strict) for pat in patterns)

    return any(hit(p) for p in spellings) if strict else all(hit(p) for p in spellings)


def could_reach(rule: Rule, root_spellings: list[str]) -> bool:
    """Whether a search rooted at a directory could read a file the rule names."""
    if rule.whole_tool:
        return True
    assert rule.specifier is not None
    for pattern in paths.rule_patterns(rule.specifier, strict=True):
        prefix = paths.static_prefix(pattern).lower()  # deny/ask rules: either case
        for root in (r.lower() for r in root_spellings):
            if paths.inside(prefix, [root]) or paths.inside(root, [prefix]):
                return True
    return False


WEBFETCH_DOMAIN = "domain:"
"""`WebFetch(domain:HOST)`: the form of a WebFetch rule's specifier."""


def webfetch_matches(specifier: str, url: object) -> bool:
    """Whether a `WebFetch(domain:…)` rule names the host of a WebFetch call's `url`:
    `domain:example.com` that host, `domain:*.example.com` its subdomains (as the
    egress rules read the same text). A url that does not parse matches no rule."""
    from urllib.parse import urlsplit

    spec = specifier.strip()
    if not spec.startswith(WEBFETCH_DOMAIN) or not isinstance(url, str):
        return False
    try:
        host = (urlsplit(url).hostname or "").rstrip(".").lower()
    except ValueError:
        return False
    domain = spec[len(WEBFETCH_DOMAIN) :].strip().rstrip(".").lower()
    if not host or not domain:
        return False
    if domain.startswith("*."):
        return host.endswith(domain[1:])
    return host == domain
