"""What a run or a one-off command asks of egress, and the service it gets.

Egress is off unless asked for: a run gets a proxy when some source allows a
domain (`--allow-domain`, `sandbox.network.allowedDomains`, a
`WebFetch(domain:…)` allow rule) or `--egress` says so (then every destination is
a question, or a denial in `dontAsk`). With egress off, sandboxes get neither
the socket nor the proxy variables: nothing changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.egress.limits import EgressLimits
from orchestrator.egress.resolver import Resolver
from orchestrator.egress.service import EgressService
from orchestrator.egress.sources import load_rules

if TYPE_CHECKING:
    from orchestrator.config import Settings
    from orchestrator.event_sink import EventSink
    from orchestrator.permissions import EffectivePolicy
    from orchestrator.permissions.approvers import Asker
    from orchestrator.permissions.settings_files import SettingsStack
    from orchestrator.permissions.sources import PolicyDocument
    from orchestrator.store import Store


@dataclass(frozen=True)
class EgressRequest:
    """Egress flags of `warden run` / `warden exec` (and the Python API)."""

    allow_domains: tuple[str, ...] = ()
    deny_domains: tuple[str, ...] = ()
    enabled: bool = False
    """Give sandboxes egress even when no rule allows a domain (everything asks)."""
    limits: EgressLimits = field(default_factory=EgressLimits)
    resolver: Resolver | None = None
    """In-process only (tests, benchmarks); None is the system resolver."""


def run_egress(
    request: EgressRequest,
    settings: Settings,
    workspace: Path,
    policy: EffectivePolicy,
    *,
    policy_file: str | PolicyDocument | None,
    asker: Asker | None,
    store: Store | None,
    events: EventSink | None,
    sandbox_uid: int,
    trusted: bool = False,
    stack: SettingsStack | None = None,
) -> EgressService | None:
    """The run's egress service, or None when egress is off. `trusted`: the person
    trusted the workspace, so its allowed domains count (its denies always do).
    Raises PolicyError for a malformed domain rule in any source."""
    rules = load_rules(
        settings,
        workspace,
        policy,
        allow_domains=request.allow_domains,
        deny_domains=request.deny_domains,
        policy_file=policy_file,
        trusted=trusted,
        stack=stack,
    )
    if not (request.enabled or rules.any_allow):
        return None
    return EgressService(
        rules=rules,
        mode=policy.mode,
        limits=request.limits,
        resolver=request.resolver or Resolver(),
        asker=asker,
        store=store,
        events=events,
        workspace=workspace,
        settings_base=_settings_base(stack),
        sandbox_uid=sandbox_uid,
    )


def _settings_base(stack: SettingsStack | None) -> str | None:
    from orchestrator.permissions.always_allow import settings_base

    return settings_base(stack)
