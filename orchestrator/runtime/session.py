"""Wiring for one run: engine, images, store, registry, upstream, events, the
TaskManager and the parent agent, torn down in the right order whatever happens."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator import labels, owner
from orchestrator.agents.mcp import MCP_JSON, ProjectMcp, project_mcp
from orchestrator.agents.person_mcp import MANAGED_MCP, read_person_mcp
from orchestrator.broker import PendingClient, Upstream
from orchestrator.config import DEFAULT_MODEL, Settings
from orchestrator.egress.setup import EgressRequest, run_egress
from orchestrator.errors import ConfigError
from orchestrator.lifecycle import leftovers, socket_dirs
from orchestrator.lifecycle.recovery import recover
from orchestrator.permissions import analyser_bound, load_hooks, load_policy
from orchestrator.permissions.always_allow import settings_base
from orchestrator.permissions.approvers import NonInteractiveApprover
from orchestrator.permissions.sources import PolicyDocument, find_policy
from orchestrator.results.parent_transcript import ObservedClient, ParentTranscript, transcript_path
from orchestrator.runtime.caps import TaskManagerConfig
from orchestrator.runtime.events import EventLog
from orchestrator.runtime.gate import PolicyGate
from orchestrator.runtime.hook_sandbox import HookSandboxPool, hook_sandbox_pool
from orchestrator.runtime.manager import TaskManager
from orchestrator.runtime.parent import ParentAgent, ParentOptions
from orchestrator.runtime.protocols import PermissionGate
from orchestrator.runtime.sandbox import sandbox_identity, warn_if_root_owned
from orchestrator.runtime.subagent_context import ContextSources, skill_grants, trusted_skills
from orchestrator.runtime.tasks import TaskContext, TaskStatus
from orchestrator.tracing import run_tracer
from orchestrator.workspace import WorkspaceGuard
from orchestrator.workspace.held import WorkspaceHold
from orchestrator.workspace.inputs import PolicyInputs, read_policy_inputs
from orchestrator.workspace.report import ExecutedPathsWatch
from orchestrator.workspace.settings import apply_caps, protected_paths
from orchestrator.workspace.trust import claude_record
from orchestrator.workspace.walls import walls_of

if TYPE_CHECKING:
    from collections.abc import Callable

    from opentelemetry.sdk.trace import TracerProvider

    from orchestrator.agents.registry import AgentRegistry
    from orchestrator.apply.review import ApplySettings
    from orchestrator.backend.contract import ContainerBackend
    from orchestrator.permissions.approvers import Approver
    from orchestrator.permissions.hooks import HookSet
    from orchestrator.permissions.policy import EffectivePolicy
    from orchestrator.store import Store
    from orchestrator.tracing.spans import RunTracer

log = logging.getLogger(__name__)

WORKSPACE_CHECK_S = 1.0
"""How often a run checks that its workspace's path still names the directory its
sandboxes write to (`workspace.held`)."""


def new_run_id() -> str:
    return "run_" + time.strftime("%Y%m%d%H%M%S") + "_" + secrets.token_hex(4)


def check_workspace(workspace: Path) -> Path:
    resolved = workspace.expanduser().resolve()
    if not resolved.is_dir():
        raise ConfigError(
            f"workspace {workspace} is not a directory; create it or pass --workspace"
        )
    return resolved


def prepare_guard(
    settings: Settings,
    workspace: Path,
    protect: tuple[str, ...],
    policy: str | PolicyDocument | None = None,
    rules: EffectivePolicy | None = None,
    inputs: PolicyInputs | None = None,
) -> WorkspaceGuard:
    """The run's workspace protections (`--protect` paths must exist; those from
    settings files are skipped when missing). A `--policy` file inside the workspace
    is protected too: a subagent must not rewrite the rules the next run follows; so
    are the workspace scripts the hooks name (`PolicyInputs.hook_scripts`): a hook
    must not run what a subagent wrote. `rules`' deny rules become mounts in every
    sandbox (`workspace.walls`)."""
    return WorkspaceGuard.prepare(
        workspace,
        protect=(*protect, *policy_inside(settings, workspace, policy)),
        optional=(
            *protected_paths(settings, workspace, inputs.stack if inputs else None),
            *(inputs.hook_scripts if inputs else ()),
        ),
        walls=walls_of(rules) if rules is not None else (),
    )


def held_apply_caps(
    apply: ApplySettings, settings: Settings, workspace: Path, inputs: PolicyInputs
) -> ApplySettings:
    """`apply`'s size caps held to the settings files' `warden.apply` caps (the
    stricter of each wins), as the run read those files."""
    policy = apply.policy
    max_file, max_binary = apply_caps(settings, workspace, inputs.stack).hold(
        policy.max_file_bytes, policy.max_binary_bytes
    )
    held = policy.model_copy(update={"max_file_bytes": max_file, "max_binary_bytes": max_binary})
    return dataclasses.replace(apply, policy=held)


def policy_inside(
    settings: Settings, workspace: Path, policy: str | PolicyDocument | None
) -> tuple[str, ...]:
    """The `--policy` file's path in the workspace, when it lies there (none else)."""
    if policy is None:
        return ()
    found = policy.path if isinstance(policy, PolicyDocument) else find_policy(settings, policy)
    path = Path(os.path.realpath(found))
    try:
        return (str(path.relative_to(workspace)),)
    except ValueError:
        return ()


@dataclass
class Run:
    run_id: str
    session: str
    workspace: Path
    model: str
    settings: Settings
    store: Store
    events: EventLog
    manager: TaskManager
    parent: ParentAgent
    watch: ExecutedPathsWatch | None = None
    """Snapshot of executed paths taken before the first sandbox (the end-of-run report)."""
    tracer: RunTracer | None = None
    """The run's OpenTelemetry spans, when tracing is on."""
    hold: WorkspaceHold | None = None
    """The workspace, held by a descriptor; `hold.lost` says when and how it went."""

    @property
    def events_path(self) -> Path:
        return self.events.jsonl_path


@asynccontextmanager
async def open_run(
    settings: Settings,
    *,
    workspace: Path,
    prompt: str,
    model: str | None = None,
    gate: PermissionGate | None = None,
    approver: Approver | None = None,
    policy: str | None = None,
    allow: tuple[str, ...] = (),
    deny: tuple[str, ...] = (),
    mode: str | None = None,
    config: TaskManagerConfig | None = None,
    backend: ContainerBackend | None = None,
    registry: AgentRegistry | None = None,
    runner_command: tuple[str, ...] | None = None,
    protect: tuple[str, ...] = (),
    tracer_provider: TracerProvider | None = None,
    egress: EgressRequest | None = None,
    image: str | None = None,
    bash_image: str | None = None,
    devcontainer: bool | None = None,
    trusted: bool | None = None,
    parent_options: ParentOptions | None = None,
) -> AsyncIterator[Run]:
    """Everything a run needs, started; on exit every container of this run is gone.

    Tool calls are decided by the workspace's effective policy (managed policy,
    `policy`/`allow`/`deny`/`mode`, `.claude/settings.json`, user settings) and its
    PreToolUse hooks; questions go to `approver` (default: deny, no human). A caller's
    own `gate` decides them instead, and says what egress follows and whom it asks
    (`PermissionGate.policy`, `.asker`).
    Sandboxes get network egress only as `egress` and the domain rules allow
    (`orchestrator.egress.setup`). Subagents run in the image the precedence of
    `agents.images` picks (`image`: `--image`; `bash_image`: `--bash-image`;
    `devcontainer`: use the workspace's dev container, None: the setting). Raises
    PolicyError/ConfigError, ImageNotFoundError/UnsupportedImageError/ImageBuildError
    before anything starts when they are invalid. `trusted` (None: as
    recorded, see `workspace.trust`): whether the workspace's own allow rules,
    mode, hooks and agent files apply. `parent_options`: how the run's parent loop runs
    (None: its defaults)."""
    from orchestrator.agents.registry import AgentRegistry
    from orchestrator.apply.policy import edit_rules
    from orchestrator.apply.review import ReviewedApply, audit_to
    from orchestrator.backend.connect import connect, pool_size
    from orchestrator.backend.factory import guarded, make_backend
    from orchestrator.runtime.run_images import (
        prepare_run_images,
        run_build_egress,
        untrusted_devcontainer,
    )
    from orchestrator.store import Store

    workspace = check_workspace(workspace)
    socket_dirs.check_workspace_excludes(workspace, settings)
    # The run's policy inputs, read once: every part below decides from this snapshot.
    inputs = await asyncio.to_thread(
        partial(read_policy_inputs, settings, workspace, trusted=trusted, policy=policy)
    )
    trusted = inputs.trusted
    read_once = inputs.stack
    model = settings.resolve_model(model or DEFAULT_MODEL)
    if config is None:  # a library caller gets the environment's limits, as the CLI does
        config = TaskManagerConfig.from_settings(settings)
    # skills are instructions a subagent follows: only the text the person trusted;
    # a managed strictPluginOnlyCustomization locking skills leaves the project's and
    # the user's out (as Claude Code does; warden loads no managed or plugin skills)
    locked = "skills" in read_once.managed.plugin_only
    config = dataclasses.replace(
        config,
        project_skills={} if locked else trusted_skills(inputs),
        user_skills=not locked,
        apply=held_apply_caps(config.apply, settings, workspace, inputs),
    )
    # What egress (and a dev container build) decides by: the run's policy, or the
    # one a caller's own gate says it follows (`PermissionGate.policy`).
    own_hooks: HookSet | None = None  # a caller's own gate runs its own hooks (none of the run's)
    if gate is not None:
        gate_policy = gate.policy
    else:
        gate_policy = load_policy(
            settings,
            workspace,
            policy=inputs.policy,
            allow=allow,
            deny=deny,
            mode=mode,
            trusted=trusted,
            stack=read_once,
        )
        # what loading each skill means (`Skill` calls; its `allowed-tools`), from the
        # same trusted text the subagents' Skill tool loads
        grants = skill_grants(
            ContextSources(config.claude_dir, workspace, config.project_skills, config.user_skills)
        )
        gate_policy = gate_policy.model_copy(update={"skills": grants})
        gate_hooks = load_hooks(settings, workspace, trusted=trusted, stack=read_once)
        gate_hooks = dataclasses.replace(gate_hooks, script_prints=inputs.hook_script_prints)
        own_hooks = gate_hooks
        for note in gate_policy.notes:
            log.warning("policy: %s", note)
        for refusal in inputs.refused_scripts:  # the run's start says which, why, the fix
            log.warning("hooks: %s", refusal)
    # Off the loop: a lock a sandbox holds on the workspace can make this wait (bounded).
    guard = await asyncio.to_thread(
        prepare_guard, settings, workspace, protect, inputs.policy, gate_policy, inputs
    )
    run_id = new_run_id()
    session = run_id
    api_key = settings.anthropic_api_key.get_secret_value() if settings.anthropic_api_key else None
    base_url = settings.anthropic_base_url or "https://api.anthropic.com"

    async with AsyncExitStack() as stack:
        stack.callback(guard.release)
        # The orchestrator's one model client (the key is only here): the parent's
        # calls and every broker's go through the SDK, its retries bounded in time.
        # Built in the background (the SDK's import takes a second): the store, the
        # broker and the first sandboxes start meanwhile; the first call waits for it.
        anthropic_client = PendingClient(
            base_url,
            api_key,
            max_retries=settings.model_max_retries,
            retry_total_s=settings.model_retry_total_s,
        )
        stack.push_async_callback(anthropic_client.close)
        # Held for the whole run: a rename or removal of the workspace stops the run.
        hold = await asyncio.to_thread(WorkspaceHold, workspace)
        stack.callback(hold.close)
        watch = await asyncio.to_thread(
            partial(
                ExecutedPathsWatch,
                workspace,
                guard.protected,
                inputs.trust.prints,
                hooks=(inputs.hooks_path,) if inputs.hooks_path else (),
                held_dir=settings.state_dir / "runs" / run_id / "held",
                hook_scripts=inputs.hook_scripts,
                host_scripts=inputs.host_scripts,
            )
        )
        # Pools sized to the wait threads of every subagent at once (see backend.connect).
        calls = config.max_concurrent_total * config.max_depth
        client = await asyncio.to_thread(partial(connect, max_pool_size=pool_size(calls)))
        stack.callback(client.close)
        # A dev container is workspace content a subagent may have written: used by
        # default only where the person trusted the workspace (or asked for it).
        if devcontainer is None and not trusted:
            devcontainer = untrusted_devcontainer(inputs.devcontainer)
        # The uid:gid of every sandbox of the run: its broker, hook sandboxes and
        # egress proxies (a dev container build's too) admit only it.
        identity = sandbox_identity(workspace, config.fallback_uid, config.user)
        warn_if_root_owned(workspace, config.fallback_uid, config.user)
        # Images first: an unusable one (or a dev container that does not build)
        # stops the run before it is recorded or any sandbox starts. A build reaches
        # the network only through the run's egress rules.
        build_egress = run_build_egress(
            settings,
            workspace,
            egress or EgressRequest(),
            gate_policy,
            policy_file=inputs.policy,
            identity=identity,
            trusted=trusted,
            stack=read_once,
        )
        image_for = await asyncio.to_thread(
            partial(
                prepare_run_images,
                client,
                settings,
                workspace,
                image=image,
                bash_image=bash_image,
                devcontainer=devcontainer,
                build_egress=build_egress,
                dev=inputs.devcontainer,
                dev_read=True,
            )
        )
        # One backend for every sandbox of the run (tasks, warm pool, hook sandboxes),
        # each watched for its disk limits.
        backend = make_backend(client, settings) if backend is None else guarded(backend)
        if registry is None:
            registry = AgentRegistry.load(
                settings, workspace, trusted=trusted, stack=read_once, prints=inputs.digests
            )
        store = await asyncio.to_thread(Store.open, settings.state_dir / "warden.db")
        stack.callback(store.close)
        recovered = await asyncio.to_thread(recover, store, backend)
        if recovered.runs:
            log.warning(
                "an earlier orchestrator died: marked %d task(s) of %s interrupted "
                "(resumable) and removed %d container(s)",
                len(recovered.tasks),
                ", ".join(recovered.runs),
                recovered.containers,
            )
        # A W3C trace id: the run's span and every event of the run carry it.
        trace_id = secrets.token_hex(16)
        tracer = run_tracer(run_id, trace_id, tracer_provider)
        if tracer is not None:
            trace_id = tracer.trace_id  # the same id also under a caller's own provider
            stack.callback(tracer.finish)  # after the manager has ended every task
        # Before the run is recorded: an unwritable events file is one clear error.
        # A run that can no longer record what it does stops (`EventLog.failure`).
        events = EventLog(
            run_id,
            settings.state_dir / "runs" / run_id / "events.jsonl",
            store,
            listeners=[tracer] if tracer is not None else [],
            on_failure=[_cancel_on_failure(asyncio.current_task())],
        )
        stack.push_async_callback(events.flush)  # queued progress, before the store closes
        watching = asyncio.ensure_future(_watch_workspace(hold, asyncio.current_task()))
        stack.callback(watching.cancel)
        me = await asyncio.to_thread(owner.current, settings.state_dir)
        await asyncio.to_thread(
            store.create_run,
            run_id,
            prompt=prompt,
            workspace=str(workspace),
            model=model,
            pid=os.getpid(),
            owner=me.to_json(),
        )
        hook_pool: HookSandboxPool | None = None
        # Every task of the run, by id: the manager records them, the gate reads them.
        tasks: dict[str, TaskContext] = {}
        if gate is None:
            for warning in gate_hooks.warnings:
                log.warning("%s", warning)
            hook_pool = hook_sandbox_pool(
                backend=backend,
                image_for=lambda name: image_for.named(name).ref,
                workspace=workspace,
                guard=guard,
                identity=identity,
                disk=config.disk,
                session=session,
                run_id=run_id,
            )
            if gate_hooks.needs_sandbox():
                hook_pool.warm()
            # Long Bash lines are analysed in worker processes under a deadline. They
            # start at the run's first tool call (`warm_up`), not now: two fresh
            # interpreters importing the analyser would take CPU from the imports and
            # sandbox starts on the way to the run's first model requests.
            analyser_bound.configure(settings.analyser_bound())
            gate = PolicyGate(
                policy=gate_policy,
                hooks=gate_hooks,
                workspace_host=workspace,
                approver=approver or NonInteractiveApprover(),
                store=store,
                events=events,
                hook_sandbox=hook_pool,
                known_tasks=tasks,  # questions name every ancestor
                settings_base=settings_base(read_once),  # "always" adds to what was read
                warm_up=analyser_bound.pool,
            )
        run_egress_service = run_egress(
            egress or EgressRequest(),
            settings,
            workspace,
            gate_policy,
            policy_file=inputs.policy,
            asker=gate.asker,  # questions reach the run's approver through its gate
            store=store,
            events=events,
            sandbox_uid=identity.uid,
            trusted=trusted,
            stack=read_once,
        )
        reviewed_apply = ReviewedApply(
            workspace=workspace,
            state_dir=settings.state_dir,
            # A change set may touch no protected path, one missing at the start too.
            settings=dataclasses.replace(
                config.apply,
                policy=config.apply.policy.model_copy(update={"protect": guard.named}),
            ),
            approver=approver or NonInteractiveApprover(),
            edit=edit_rules(gate.policy, workspace),
            recorder=audit_to(store),
            hooks=own_hooks,
            hook_sandbox=hook_pool,
        )
        manager = TaskManager(
            apply=reviewed_apply,
            backend=backend,
            registry=registry,
            upstream=Upstream(anthropic_client),
            events=events,
            store=store,
            workspace=workspace,
            session=session,
            run_id=run_id,
            trace_id=trace_id,
            default_model=model,
            image_resolver=image_for,
            gate=gate,
            config=config,
            guard=guard,
            tasks=tasks,
            egress=run_egress_service,
            upstream_for=tracer.upstream_for if tracer is not None else None,
            identity=identity,
            mcp=run_mcp(inputs, settings),
            **({"runner_command": runner_command} if runner_command else {}),
        )
        # Whatever happens, no container of this run outlives it: the reaper runs
        # last, after the manager has stopped its tasks and emptied its warm pool.
        stack.push_async_callback(_reap, backend, session)
        # After every sandbox has gone: what Write/Edit calls killed midway left.
        stack.push_async_callback(_sweep_if_killed, manager, workspace)
        stack.push_async_callback(manager.close)
        if hook_pool is not None:  # before the reaper: it removes its own sandboxes
            stack.push_async_callback(hook_pool.close)
        # The parent's conversation is kept for `warden logs RUN` (and traced).
        observed = ObservedClient(
            anthropic_client,
            [
                ParentTranscript(transcript_path(settings.state_dir, run_id)),
                *([tracer.parent_model_call] if tracer is not None else []),
            ],
        )
        options = parent_options or ParentOptions()
        parent = ParentAgent(
            client=observed,
            model=model,
            manager=manager,
            max_turns=options.max_turns,
            background_default=options.background_default,
            fork=options.fork,
        )
        yield Run(
            run_id, session, workspace, model, settings, store, events, manager, parent, watch,
            tracer, hold,
        )  # fmt: skip


def run_mcp(inputs: PolicyInputs, settings: Settings) -> ProjectMcp:
    """The MCP servers this run may start: the person's own (`~/.claude.json`) and the
    enterprise's (`managed-mcp.json`), read once here, and `.mcp.json` as the trust
    verdict read it (so what starts is what the person said yes to), under the settings
    files' `disabledMcpjsonServers` and managed locks (`agents.mcp`); what is left out
    is logged."""
    seen = inputs.trust.prints.get(MCP_JSON)
    text = seen.text if seen is not None and seen.digest.startswith("sha256:") else None
    if seen is not None and text is None:
        log.warning("%s: not read (%s): no MCP server of it starts", MCP_JSON,
                    "a link or not a regular file" if not seen.digest.startswith("sha256:")
                    else "not UTF-8 text, or too large")  # fmt: skip
    person = read_person_mcp(
        claude_record(settings),
        settings.claude_managed_settings.parent / MANAGED_MCP,
        inputs.workspace,
    )
    found = project_mcp(
        text,
        trusted=inputs.trusted,
        settings_docs=[f.doc for f in inputs.stack.files],
        locked="mcp" in inputs.stack.managed.plugin_only,
        person=person,
    )
    for warning in found.warnings:
        log.warning("%s", warning)
    return found


async def _watch_workspace(hold: WorkspaceHold, main: asyncio.Task[object] | None) -> None:
    """Stop the run (as a failed one: `hold.lost`) once the workspace is gone."""
    while True:
        await asyncio.sleep(WORKSPACE_CHECK_S)
        lost = await asyncio.to_thread(hold.check)
        if lost is not None:
            log.debug("stopping the run: %s", lost)
            if main is not None and not main.done():
                main.cancel()
            return


async def _sweep_if_killed(manager: TaskManager, workspace: Path) -> None:
    """A run whose sandboxes did not all end on their own removes the temporary files
    a Write/Edit killed midway left in the workspace (`lifecycle.leftovers`)."""
    ended_on_their_own = (TaskStatus.COMPLETED, TaskStatus.NO_OUTPUT)
    if any(c.status not in ended_on_their_own for c in manager.tasks.values()):
        await asyncio.to_thread(leftovers.remove_quietly, [str(workspace)])


def _cancel_on_failure(main: asyncio.Task[object] | None) -> Callable[[Exception], None]:
    def cancel(exc: Exception) -> None:
        log.debug("stopping the run: %s", exc)
        if main is not None and not main.done():
            main.cancel()

    return cancel


async def _reap(backend: ContainerBackend, session: str) -> None:
    removed = await asyncio.to_thread(backend.cleanup, {labels.SESSION: session})
    if removed:
        log.warning("removed %d leftover container(s) of session %s", removed, session)
