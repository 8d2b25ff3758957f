"""What a skill means to the permission engine, as the pinned Claude Code decides it:
`Skill(name)` rules, which skills load without a question, and the tools a loaded
skill's `allowed-tools` allow for the rest of the agent's conversation.

Claude Code (2.1.197, measured by the decision differential):
- a `Skill(spec)` rule names a skill exactly (`Skill(lint)`, a leading `/` ignored), or
  by prefix with `name:*` or `name *` (`Skill(git:*)` covers `git-commit` and `gitx`);
  `Skill` alone is every skill;
- a deny rule refuses the load, an allow rule allows it;
- a skill whose frontmatter has `allowed-tools`, `disallowed-tools` or `hooks` asks
  before it is loaded (the mode decides as for any question: bypassPermissions
  allows, dontAsk denies); any other skill loads without a question;
- a skill with `disable-model-invocation: true` is not listed and the Skill tool
  refuses it before any permission is asked (it grants nothing);
- once a skill is loaded, its `allowed-tools` are allow rules for the rest of that
  agent's conversation (and of the subagents it starts afterwards); deny and ask
  rules still win over them.

A grant is read from skill text the host trusts (the workspace's skills only as
the person's trust covered them; see `runtime.subagent_context`), never from a
sandbox.
"""

from __future__ import annotations

import logging

import yaml
from pydantic import BaseModel, ConfigDict

from orchestrator.errors import PolicyError
from orchestrator.permissions.rules import Rule, parse_rule, split_tool_rules

log = logging.getLogger(__name__)

SKILL_TOOL = "Skill"
SKILL_SOURCE = "skill"
"""The source of the rules a loaded skill adds: `skill NAME`."""
MAX_SKILL_RULES = 64
"""Most `allowed-tools` entries one skill grants (the rest are dropped, with a warning)."""
UNPLAIN_KEYS = ("allowed-tools", "disallowed-tools", "disallowedTools", "hooks")
"""Frontmatter keys that make Claude Code ask before loading a skill."""


class SkillGrant(BaseModel):
    """One skill as the permission engine sees it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    """The skill's name (its directory under `skills/`)."""
    allowed_tools: tuple[str, ...] = ()
    """Its `allowed-tools`: allow rules while it is loaded."""
    plain: bool = True
    """No `allowed-tools`, `disallowed-tools` or `hooks`: it loads without a question."""
    invocable: bool = True
    """False for `disable-model-invocation: true`: the Skill tool refuses to load it
    (only a person's `/name` may), so it grants nothing."""


def skill_frontmatter(text: str) -> dict[str, object]:
    """A SKILL.md's frontmatter as YAML; {} when there is none or it does not parse
    (Claude Code then ignores it)."""
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        return {}
    end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
    if end is None:
        return {}
    try:
        found = yaml.safe_load("\n".join(lines[1:end]))
    except yaml.YAMLError:
        return {}  # as Claude Code: a frontmatter that does not parse is ignored
    return found if isinstance(found, dict) else {}


def _tool_entries(value: object) -> list[str]:
    """`allowed-tools` as Claude Code reads it: a string split at commas and spaces
    outside parentheses, or a list of such strings."""
    if isinstance(value, str):
        items = [value]
    elif isinstance(value, list):
        items = [v for v in value if isinstance(v, str)]
    else:
        return []
    return [rule for item in items for rule in split_tool_rules(item)]


def skill_grant(name: str, text: str) -> SkillGrant:
    """The grant of skill `name` from its SKILL.md text. An entry that is not a rule
    is dropped with a warning (it could only ever allow, never restrict)."""
    front = skill_frontmatter(text)
    plain = not any(front.get(key) for key in UNPLAIN_KEYS)
    entries = _tool_entries(front.get("allowed-tools"))
    if len(entries) > MAX_SKILL_RULES:
        log.warning("skill %s: only the first %d allowed-tools are used", name, MAX_SKILL_RULES)
        entries = entries[:MAX_SKILL_RULES]
    kept: list[str] = []
    for entry in entries:
        try:
            kept.append(parse_rule(entry, "allow", f"{SKILL_SOURCE} {name}", "").text)
        except PolicyError:
            log.warning("skill %s: allowed-tools entry %r is not a rule; ignored", name, entry)
    invocable = front.get("disable-model-invocation") not in (True, "true")
    return SkillGrant(name=name, allowed_tools=tuple(kept), plain=plain, invocable=invocable)


def skill_rule_matches(rule: Rule, skill: str) -> bool:
    """Whether a `Skill` rule names this skill (the whole tool names every skill)."""
    if rule.whole_tool:
        return True
    spec = (rule.specifier or "").strip().removeprefix("/")
    name = skill.strip().removeprefix("/")
    if spec == name:
        return True
    if spec.endswith((":*", " *")):
        return name.startswith(spec[:-2])
    return False


def grant_rules(grant: SkillGrant) -> tuple[Rule, ...]:
    """The allow rules a loaded skill adds."""
    source = f"{SKILL_SOURCE} {grant.name}"
    return tuple(parse_rule(t, "allow", source, source) for t in grant.allowed_tools)
