"""Skill: load one of the skills the host listed into the conversation, as Claude Code
does: the tool result says `Launching skill: NAME`, and a text block after it in the
same message holds the skill's base directory and its instructions (`$ARGUMENTS`
replaced by the call's `args`). The skills come in the spec: the host read them from
trusted content only (a workspace's skills are in its trust record); nothing here
reads the workspace's `.claude/skills`, which a sandbox could not change anyway."""

from __future__ import annotations

from sandbox_tools.jsontypes import JSONObject
from sandbox_tools.tools.base import ToolOutput
from sandbox_tools.tools.more_inputs import SkillInput

ARGUMENTS = "$ARGUMENTS"


def load_skill(
    inp: SkillInput, skills: tuple[JSONObject, ...]
) -> tuple[ToolOutput, JSONObject | None]:
    """The tool's answer and the block that follows it (None for an unknown skill)."""
    name = inp.skill.strip().lstrip("/")
    found = next((s for s in skills if s.get("name") == name), None)
    if found is None:
        known = ", ".join(str(s.get("name")) for s in skills) or "none"
        return (
            ToolOutput(
                f"<tool_use_error>Unknown skill: {name[:200]}</tool_use_error> "
                f"(available: {known})",
                is_error=True,
                summary="unknown skill",
            ),
            None,
        )
    if found.get("invocable") is False:  # Claude Code's words
        return (
            ToolOutput(
                f"<tool_use_error>Skill {name} cannot be used with Skill tool due to "
                "disable-model-invocation</tool_use_error>",
                is_error=True,
                summary="skill not invocable",
            ),
            None,
        )
    text = str(found.get("text", ""))
    if inp.args:
        text = (
            text.replace(ARGUMENTS, inp.args)
            if ARGUMENTS in text
            else f"{text}\n\nARGUMENTS: {inp.args}"
        )
    body = f"Base directory for this skill: {found.get('directory', '')}\n\n{text.strip()}\n"
    return ToolOutput(f"Launching skill: {name}", summary=name), {"type": "text", "text": body}
