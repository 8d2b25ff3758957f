"""The effective policy of one agent: merged rules, the mode, and its tool set."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.permissions.models import Mode
from orchestrator.permissions.rules import Rule
from orchestrator.permissions.skill_rules import SKILL_SOURCE, SkillGrant, grant_rules

AGENT_DEFINITION_SOURCE = "agent definition"


class EffectivePolicy(BaseModel):
    """Rules from every source, highest source first, and the mode that applies."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rules: tuple[Rule, ...] = ()
    """All rules; within one behaviour, earlier (higher) sources explain first."""
    mode: Mode = "default"
    """The permission mode."""
    mode_source: str = "built-in default"
    """Which source set the mode."""
    additional_directories: tuple[str, ...] = ()
    """Container paths besides /workspace that `acceptEdits` treats as the workspace."""
    allowed_tools: frozenset[str] | None = None
    """Tools this agent may use at all (its definition ∩ its parent's); None = no limit."""
    sources: tuple[str, ...] = Field(default_factory=tuple)
    """Every source that was read, highest first (for explanations)."""
    notes: tuple[str, ...] = ()
    """What was read but not applied, and why (unknown keys, untrusted workspace,
    managed-only keys): printed by `warden policy explain` and logged by runs."""
    memory_dir: str | None = None
    """The container path of this agent's own writable memory directory (Claude Code's
    `memory: project`/`local`): a Write or Edit of a `.md` file in it is allowed, as
    Claude Code allows it, unless a deny or a person's ask rule says otherwise. Set
    per agent, never inherited by its children."""
    bypass_disabled: bool = False
    """`disableBypassPermissionsMode` is in force: no agent may enter bypassPermissions."""
    skills: tuple[SkillGrant, ...] = ()
    """The skills this run's agents may load (from trusted text), for deciding `Skill`
    calls: a plain one loads unasked, one with `allowed-tools` asks first."""
    loaded_skills: tuple[str, ...] = ()
    """Skills loaded so far (their `allowed-tools` are among `rules`, source `skill NAME`)."""

    def rules_for(self, behavior: str) -> list[Rule]:
        return [r for r in self.rules if r.behavior == behavior]

    def with_mode(self, mode: Mode, source: str) -> EffectivePolicy:
        return self.model_copy(update={"mode": mode, "mode_source": source})

    def skill(self, name: str) -> SkillGrant | None:
        """The grant of skill `name`, if the run knows it."""
        return next((g for g in self.skills if g.name == name), None)

    def with_skill_loaded(self, name: str) -> EffectivePolicy:
        """This policy once skill `name` is loaded: its `allowed-tools` become allow
        rules, after every other rule (deny and ask rules still win, as in Claude
        Code). A skill the run does not know, or one already loaded, changes nothing."""
        grant = self.skill(name)
        if grant is None or not grant.invocable or name in self.loaded_skills:
            return self
        return self.model_copy(
            update={
                "rules": (*self.rules, *grant_rules(grant)),
                "loaded_skills": (*self.loaded_skills, name),
            }
        )

    def without_loaded_skills(self) -> EffectivePolicy:
        """This policy with no skill loaded (the rules their `allowed-tools` added gone)."""
        if not self.loaded_skills:
            return self
        kept = tuple(r for r in self.rules if not r.source.startswith(f"{SKILL_SOURCE} "))
        return self.model_copy(update={"rules": kept, "loaded_skills": ()})


def effective_tools(
    agent_tools: Sequence[str] | None, parent_policy: EffectivePolicy
) -> EffectivePolicy:
    """A child's policy: its parent's rules and mode, limited to the tools of its agent
    definition (None = the definition lists no tools and inherits the parent's).
    A child never gets more than its parent: every parent rule still holds, and a
    tool outside either tool set is denied."""
    if agent_tools is None:
        return parent_policy
    names = frozenset(t.split("(", 1)[0].strip() for t in agent_tools if t.strip())
    allowed = names if parent_policy.allowed_tools is None else names & parent_policy.allowed_tools
    return parent_policy.model_copy(update={"allowed_tools": allowed})


MODE_STRICTNESS: dict[Mode, int] = {
    "bypassPermissions": 0,
    "acceptEdits": 1,
    "default": 2,
    "dontAsk": 3,
    "plan": 4,
}
"""How much a mode holds back, least first: `dontAsk` turns every ask into a deny,
and `plan` allows only reading."""


def narrow_mode(policy: EffectivePolicy, mode: Mode | None, source: str) -> EffectivePolicy:
    """`policy` under an agent's `permissionMode`: applied when it is stricter than the
    mode in force, ignored when it would widen it (a child never gets more)."""
    if mode is None or MODE_STRICTNESS[mode] <= MODE_STRICTNESS[policy.mode]:
        return policy
    return policy.with_mode(mode, source)
