"""Labels on every container warden creates; cleanup finds orphans by them.

May import: `errors`.
"""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator import __version__
from orchestrator.errors import ConfigError

NAMESPACE = "warden."
SESSION = "warden.session"
"""The orchestrator process (or `warden exec` call) that created the container."""
TASK = "warden.task"
"""The subagent task id (`sa_…`) the container runs."""
EXEC = "warden.exec"
"""Set on one-shot `warden exec` containers."""
VERSION = "warden.version"
RUN = "warden.run"
"""The run (one `warden run` invocation) a task belongs to."""
OWNER_HOST = "warden.owner.host"
"""Machine id and pid namespace of the orchestrator that owns the container."""
OWNER_BOOT = "warden.owner.boot"
"""Kernel boot id when the owner started."""
OWNER_PID = "warden.owner.pid"
OWNER_START = "warden.owner.start"
"""The owner's process start time (clock ticks since boot), so a reused pid is not it."""
OWNER_STATE = "warden.owner.state"
"""Identity of the owner's state dir (`owner.state_id`)."""


def check_user_labels(labels: Mapping[str, str]) -> None:
    """Refuse caller labels in warden's reserved namespace."""
    reserved = sorted(k for k in labels if k.startswith(NAMESPACE))
    if reserved:
        raise ConfigError(
            f"labels {', '.join(reserved)} use the reserved '{NAMESPACE}' namespace; "
            "choose another prefix"
        )


def warden_labels(session: str, **extra: str) -> dict[str, str]:
    """warden's own labels: session and version, plus e.g. task=…, run=…, exec=…."""
    labels = {SESSION: session, VERSION: __version__}
    for key, value in extra.items():
        labels[NAMESPACE + key] = value
    return labels
