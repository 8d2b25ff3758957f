"""The Skill groups: `Skill(name)` rules (exact, `/name`, `name:*`, `name *`, the whole
tool) as allow, ask and deny, in every mode, for a plain skill and for one whose
frontmatter has `allowed-tools` (Claude Code asks before loading that one), and what
the allowed tools do once the skill is loaded (a later Bash call they cover runs).

The calls of a group run in one session, in order: a skill loaded by an earlier call
is active for the later ones, on both sides.
"""

from __future__ import annotations

from typing import Any

from tests.differential.cases import FILES, MODES, Group, _bash, _group

SKILL_FILES = {
    **FILES,
    ".claude/skills/plain/SKILL.md": (
        "---\nname: plain\ndescription: A plain skill with instructions only\n---\n\nSay hello.\n"
    ),
    ".claude/skills/tooly/SKILL.md": (
        "---\nname: tooly\ndescription: A skill that needs chmod\n"
        "allowed-tools: Bash(chmod:*), Read\n---\n\nRun chmod 644 README.md.\n"
    ),
    ".claude/skills/toolbox/SKILL.md": (
        "---\nname: toolbox\ndescription: Another skill whose name starts like tooly's\n---\n\n"
        "Say hello.\n"
    ),
    ".claude/skills/denier/SKILL.md": (
        "---\nname: denier\ndescription: A skill with disallowed tools\n"
        "disallowed-tools: Write\n---\n\nSay hello.\n"
    ),
}
CHMOD = "chmod 644 README.md"


def _skill(name: str) -> dict[str, Any]:
    return {"tool": "Skill", "input": {"skill": name}}


def _calls() -> list[dict[str, Any]]:
    return [_skill("plain"), _skill("toolbox"), _skill("denier"), _skill("tooly"), _bash(CHMOD)]


RULES: list[tuple[str, str]] = [
    ("none", ""),
    ("allow", "Skill(tooly)"),
    ("allow", "Skill(/tooly)"),
    ("allow", "Skill(too:*)"),
    ("allow", "Skill(tool *)"),
    ("allow", "Skill"),
    ("allow", "Skill(denier)"),
    ("deny", "Skill(plain)"),
    ("deny", "Skill(tool:*)"),
    ("deny", "Skill"),
    ("ask", "Skill(plain)"),
    ("ask", "Skill(/plain)"),
    ("ask", "Skill"),
]


def skill_groups() -> list[Group]:
    """Each rule in the default mode; no rule and `Skill(tooly)` allowed in every mode;
    a deny of the tool the skill allows still holds after it is loaded."""
    groups: list[Group] = []
    for i, (behavior, rule) in enumerate(RULES):
        project = {"permissions": {behavior: [rule]}} if rule else None
        g = _group(f"skill{i:02d}", _calls(), project=project)
        g["files"] = SKILL_FILES
        groups.append(g)
    for mode in MODES:
        for rules in ({}, {"allow": ["Skill(tooly)"]}):
            gid = f"skillmode-{mode}-{'allow' if rules else 'none'}"
            g = _group(gid, _calls(), mode=mode, project={"permissions": rules} if rules else None)
            g["files"] = SKILL_FILES
            groups.append(g)
    g = _group("skill-deny-wins", _calls(), project={"permissions": {
        "allow": ["Skill(tooly)"], "deny": ["Bash(chmod:*)"]}})  # fmt: skip
    g["files"] = SKILL_FILES
    groups.append(g)
    g = _group("skill-ask-wins", _calls(), project={"permissions": {
        "allow": ["Skill(tooly)"], "ask": ["Bash(chmod:*)"]}})  # fmt: skip
    g["files"] = SKILL_FILES
    groups.append(g)
    return groups
