"""The exit codes of `warden run` and `warden resume`: one definition, documented in
the README's exit-code table, so a pipeline can gate on them.

Precedence when several apply: interrupted (or timed out) > run error > `--fail-on` outcome > success.

May import: `errors`.
"""

from __future__ import annotations

import enum
from typing import Literal, get_args


class ExitCode(enum.IntEnum):
    OK = 0
    """The parent agent finished (subagent outcomes do not count unless `--fail-on`)."""
    RUN_ERROR = 1
    """The run itself failed: the parent's model endpoint refused for good, the engine
    failed mid-run, or warden hit an internal error. A result document is still written."""
    USAGE = 2
    """Bad flags, settings, policy, agent files or workspace, or an image that is missing
    or cannot run a subagent (another architecture, no bash): nothing was started."""
    OUTCOME = 3
    """A subagent outcome named in `--fail-on` happened (failed, timed_out, denied, asked,
    rejected, conflict)."""
    INTERRUPTED = 130
    """SIGINT (Ctrl-C): 128 + 2. Other stop signals give 128 + their number
    (SIGTERM 143, SIGHUP 129)."""
    TERMINATED = 143
    """SIGTERM: 128 + 15."""
    HANGUP = 129
    """SIGHUP: 128 + 1."""
    TIMED_OUT = 124
    """The run's own `--timeout` passed: stopped as Ctrl-C stops it (GNU `timeout`'s code)."""


Outcome = Literal["failed", "timed_out", "denied", "asked", "rejected", "conflict"]
"""What `--fail-on` accepts: a task failed, a task ran past its deadline, a tool call
was denied, a tool call needed a person's answer (whatever the answer), an isolated
subagent's change set was rejected (by policy or a person), or it conflicted with the
workspace (`isolation: worktree`)."""
FAIL_ON_OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)
"""The outcomes, in the order help texts and errors list them."""


def is_interrupted(code: int) -> bool:
    """True for the codes of a stopped run: 128 + a signal's number, or the run's timeout."""
    return code in (
        ExitCode.INTERRUPTED,
        ExitCode.TERMINATED,
        ExitCode.HANGUP,
        ExitCode.TIMED_OUT,
    )


def exit_code_for(exc: BaseException) -> int:
    """The exit code of an error raised before or instead of a run: a mistake in what
    the user gave (flags, settings, policy, agent files, workspace, an image that is
    missing or cannot run a subagent) is a usage error, since nothing ran; anything
    else (engine, image builds, model endpoint) is a run error."""
    import click

    from orchestrator.errors import (
        AgentDefinitionError,
        ConfigError,
        ImageNotFoundError,
        PolicyError,
        UnsupportedImageError,
    )

    usage = (click.UsageError, ConfigError, PolicyError, AgentDefinitionError,
             ImageNotFoundError, UnsupportedImageError)  # fmt: skip
    if isinstance(exc, usage):
        return int(ExitCode.USAGE)
    return int(ExitCode.RUN_ERROR)
