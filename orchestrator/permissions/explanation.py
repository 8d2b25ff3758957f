"""What a permission decision says: the decision, which rule and source took it,
and for Bash how each part fared.

Owns the vocabulary `evaluate` and `bash_decision` answer in (and `warden policy
explain` prints), and the `Decider` seam between them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.behavior import Behavior
from orchestrator.permissions.models import Decision, Mode, ToolCall
from orchestrator.permissions.policy import EffectivePolicy
from orchestrator.permissions.rules import Rule

MODE_SOURCE = "mode"
MEMORY_SOURCE = "agent memory"
BUILT_IN_ASK_SOURCE = "built-in"
"""The source of the executed-paths ask rules (`sources.BUILT_IN_SOURCE`)."""
FAILURE_SOURCE = "evaluation"
"""The source of a decision taken because a call could not be evaluated (it asks)."""


class SubcommandVerdict(BaseModel):
    """How one piece of a Bash command (a simple command or a redirect) fared."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["command", "write", "read"]
    """A simple command, an output redirection (a write) or an input redirection."""
    text: str
    """The command or path."""
    verdict: Behavior | None
    """The rule list it matched; None when no rule matched it."""
    rule: str | None = None
    """The rule that matched."""
    source: str | None = None
    """That rule's source."""


class Explanation(BaseModel):
    """Which rule from which source decides a call, and why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    decision: Decision
    """The decision from rules and mode alone."""
    mode: str
    """The mode in force, and"""
    mode_source: str
    """where it came from."""
    fallback: bool = False
    """True when no rule decided and the mode's default (or an analyser fallback) did."""
    subcommands: tuple[SubcommandVerdict, ...] = Field(default_factory=tuple)
    """For Bash: each simple command and redirect target and what it matched."""
    problems: tuple[str, ...] = Field(default_factory=tuple)
    """What the shell analyser did not understand."""


class Decider(Protocol):
    """One call being decided: what `bash_decision` needs from `evaluate`'s evaluator."""

    policy: EffectivePolicy
    call: ToolCall
    host: Path | None
    """The workspace on the host (links are resolved there), if known."""
    cwd: str
    mode: Mode

    def done(
        self, behavior: Behavior, reason: str, rule: Rule | None = None, **extra: Any
    ) -> Explanation:
        """The explanation for a decision (an ask becomes a deny in dontAsk)."""
        ...

    def mode_default(self, tool: str, in_workspace: bool, why: str = "") -> Explanation:
        """What the mode decides when no rule does."""
        ...

    def in_memory(self, spellings: list[str]) -> bool:
        """Every spelling is a `.md` file in the agent's own memory directory."""
        ...

    def edit_roots(self) -> list[str]:
        """The workspace and the additional directories."""
        ...
