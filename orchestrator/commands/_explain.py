"""What `warden policy explain` decides: the decision the component that really
decides the call would make.

- Sandbox tools (Bash, Read, Write, Edit, Glob, Grep, Task): the permission
  engine's rules and mode (`permissions.evaluate`), hooks aside.
- `WebFetch` / `WebSearch`: the broker's forwarding policy. These are server
  tools: the model API fetches, so no permission mode grants them (not even
  `bypassPermissions`), an `ask` rule counts as no allow (a model request cannot
  wait for a person), and a domain rule limits the tool to its domains.
- `Skill`: the permission engine, with the skills a run would offer (the
  workspace's when it is trusted, as they are on disk now, and the user's).
- `Network` (`host[:port]`): the egress proxy's rules and mode for a connection
  from a sandbox, before DNS (a name it allows is then resolved and its addresses
  checked).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from orchestrator.config import Settings
from orchestrator.errors import PolicyError
from orchestrator.jsontypes import JSONObject
from orchestrator.permissions import Decision, EffectivePolicy, Explanation, ToolCall, explain
from orchestrator.permissions import load_policy as _load_policy

SERVER_TOOLS = frozenset({"WebFetch", "WebSearch"})
SKILL_TOOL = "Skill"
NETWORK_TOOL = "Network"
DEFAULT_PORT = 443


def explain_call(
    settings: Settings,
    workspace: Path,
    tool: str,
    tool_input: JSONObject,
    *,
    policy_name: str | None = None,
    allow: Sequence[str] = (),
    deny: Sequence[str] = (),
    mode: str | None = None,
    trusted: bool = True,
    memory_dir: str | None = None,
) -> tuple[Explanation, EffectivePolicy]:
    """The explanation of one call, and the effective policy it was decided under
    (`memory_dir`: as an agent whose memory directory that is)."""
    effective = _load_policy(
        settings, workspace, policy=policy_name, allow=allow, deny=deny, mode=mode, trusted=trusted
    )
    if memory_dir is not None:
        effective = effective.model_copy(update={"memory_dir": memory_dir})
    if tool in SERVER_TOOLS:
        return server_tool(effective, tool, tool_input), effective
    if tool == NETWORK_TOOL:
        explained = network(settings, workspace, effective, tool_input, policy_name, trusted)
        return explained, effective
    if tool == SKILL_TOOL:  # what loading it means: the skills as a run would read them
        from orchestrator.runtime.subagent_context import ContextSources, skill_grants

        shown = ContextSources(settings.claude_dir, workspace if trusted else None, None)
        effective = effective.model_copy(update={"skills": skill_grants(shown)})
    call = ToolCall(tool_name=tool, tool_input=tool_input, tool_use_id="explain")
    return explain(effective, call, workspace_host=workspace), effective


def _done(
    effective: EffectivePolicy, allowed: bool, reason: str, rule: str | None, source: str
) -> Explanation:
    decision = Decision(
        behavior="allow" if allowed else "deny", reason=reason, rule=rule, source=source
    )
    return Explanation(decision=decision, mode=effective.mode, mode_source=effective.mode_source)


def server_tool(effective: EffectivePolicy, tool: str, tool_input: JSONObject) -> Explanation:
    """The broker's decision on a WebFetch (its `url`) or WebSearch."""
    from orchestrator.broker.forwarding_policy import ForwardingPolicy

    domains: list[str] | None = None
    url = tool_input.get("url")
    if tool == "WebFetch":
        host = urlsplit(url).hostname if isinstance(url, str) else None
        if not host:
            raise PolicyError(f'WebFetch INPUT needs a "url" with a host name, got {url!r}')
        domains = [host]
    rules = ForwardingPolicy.from_rules(effective.rules)
    decided, _, _ = rules.may_forward_domains(tool, domains, {})
    rule = (
        decided.decided_by.removeprefix("rule: ")
        if decided.decided_by.startswith("rule: ")
        else None
    )
    source = next((r.source for r in effective.rules if r.text == rule), "broker")
    why = decided.reason + (
        ""
        if decided.allowed
        else f" (the broker refuses it in every mode, {effective.mode} included: the model API "
        "would fetch, and an ask rule cannot wait for a person in a model request)"
    )
    return _done(effective, decided.allowed, why, rule, source)


def network(
    settings: Settings,
    workspace: Path,
    effective: EffectivePolicy,
    tool_input: JSONObject,
    policy_name: str | None,
    trusted: bool = True,
) -> Explanation:
    """The egress proxy's decision on `host[:port]` (before DNS)."""
    from orchestrator.egress.rules import match, normal_host
    from orchestrator.egress.sources import load_rules
    from orchestrator.egress.verdict import DENY_MODES

    raw = tool_input.get("host")
    if not isinstance(raw, str) or not raw:
        raise PolicyError('Network INPUT is host[:port] or {"host": "example.com", "port": 443}')
    port = tool_input.get("port", DEFAULT_PORT)
    if not isinstance(port, int):
        raise PolicyError(f"Network port must be a number, got {port!r}")
    host = normal_host(raw)
    rules = load_rules(settings, workspace, effective, policy_file=policy_name, trusted=trusted)
    found = match(rules, host, port)
    if found.behavior == "deny":
        text = found.rule.text if found.rule else None
        src = found.rule.source if found.rule else str(found.narrowed_by)
        return _done(effective, False, f"{host}:{port} is denied ({text or src})", text, src)
    if found.behavior == "allow" and found.rule is not None:
        return _done(
            effective, True, f"allowed by {found.rule.text}", found.rule.text, found.rule.source
        )
    why = f"the rule {found.rule.text} asks" if found.rule else f"{host} is in no allowedDomains"
    if found.rule is None and rules.notes:
        why += " (" + "; ".join(rules.notes) + ")"
    m = effective.mode
    if m == "bypassPermissions" and found.rule is None:
        return _done(effective, True, f"{why}; mode bypassPermissions allows it", None, "mode")
    if m in DENY_MODES:
        return _done(effective, False, f"{why} and mode {m} denies it", None, "mode")
    decision = Decision(
        behavior="ask",
        reason=f"{why}; the run's approver is asked",
        rule=found.rule.text if found.rule else None,
        source=found.rule.source if found.rule else "mode",
    )
    return Explanation(decision=decision, mode=m, mode_source=effective.mode_source)
