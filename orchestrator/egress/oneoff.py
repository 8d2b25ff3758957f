"""Egress for `warden exec --allow-domain`: one command, one proxy, no questions.

The command is wrapped in the in-container forwarder
(`python3 -m sandbox_tools.egress_forward -- CMD...`, which execs CMD with the
proxy variables set), and the proxy's socket directory is mounted at
`/run/warden`. Rules: the managed policy's `sandbox.network` (its denies hold
here too) and the command line's domains; anything else is denied, since a
one-off command has no one to ask. Decisions are reported on stderr (and in
`--json`), not in the run store: `warden exec` opens no store.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from orchestrator.backend.contract import Mount, SandboxSpec, parse_user
from orchestrator.broker.listener import SandboxIdentity, groups_for, make_socket_dir
from orchestrator.config import Settings
from orchestrator.egress.background import BackgroundEgress, EventRecorder, OneOffTask
from orchestrator.egress.flags import EgressFlags
from orchestrator.egress.limits import EgressLimits
from orchestrator.egress.resolver import Resolver
from orchestrator.egress.rules import RuleSet
from orchestrator.egress.service import EgressService
from orchestrator.egress.sources import exec_rules
from orchestrator.untrusted_text import printable
from sandbox_tools import wire

FORWARDER = ("python3", "-m", "sandbox_tools.egress_forward", "--")
SOCKET_DIR_IN_SANDBOX = wire.BROKER_SOCKET_DIR


@dataclass
class ExecEgress:
    """A running proxy for one `warden exec` command."""

    socket_dir: Path
    user: str
    """`uid:gid` the sandbox must run as (the proxy admits only it)."""
    background: BackgroundEgress

    def sandbox_spec(self, spec: SandboxSpec) -> SandboxSpec:
        """`spec` with the command wrapped in the forwarder and the socket mounted."""
        return replace(
            spec,
            command=[*FORWARDER, *spec.command],
            mounts=[
                *spec.mounts,
                Mount(source=self.socket_dir, target=SOCKET_DIR_IN_SANDBOX, read_only=True),
            ],
            user=self.user,
            groups=[*spec.groups, *groups_for(self.socket_dir)],
        )

    def close(self, as_json: bool = False) -> dict[str, object]:
        """Stop the proxy; report refusals and a cut on stderr (plain text)."""
        try:
            summary = self.background.close()
        finally:
            shutil.rmtree(self.socket_dir, ignore_errors=True)
        for denial in self.background.denials():
            reason = printable(str(denial.get("reason", "")), 300)
            sys.stderr.write(f"warden: egress refused: {reason}\n")
        if summary.get("cut"):
            sys.stderr.write(f"warden: egress cut: {printable(str(summary['cut']), 300)}\n")
        return summary


def identity_for(workspace: Path, user: str | None, fallback_uid: int) -> SandboxIdentity:
    """The uid:gid the sandbox will run as (as the Docker backend chooses it)."""
    if user is not None:
        uid, gid = parse_user(user)
        return SandboxIdentity(uid, gid)
    owner = workspace.stat()
    if owner.st_uid == 0:
        return SandboxIdentity(fallback_uid, fallback_uid)
    return SandboxIdentity(owner.st_uid, owner.st_gid or fallback_uid)


def start_exec_egress(
    settings: Settings,
    spec: SandboxSpec,
    flags: EgressFlags,
    *,
    socket_root: Path,
    resolver: Resolver | None = None,
) -> ExecEgress:
    """Start the proxy for one command, its socket directory under `socket_root`
    (`lifecycle.socket_dirs.socket_root()`). PolicyError for a malformed domain."""
    rules = exec_rules(settings, flags.allow_domains, flags.deny_domains)
    for note in rules.notes:
        sys.stderr.write(f"warden: egress: {printable(note, 300)}\n")
    workspace = (spec.workspace or Path.cwd()).resolve()
    identity = identity_for(workspace, spec.user, settings.fallback_uid)
    return start_oneoff_egress(
        rules,
        flags.limits,
        identity,
        socket_root=socket_root,
        resolver=resolver,
        task_id=f"exec-{os.getpid()}",
    )


def start_oneoff_egress(
    rules: RuleSet,
    limits: EgressLimits,
    identity: SandboxIdentity,
    *,
    socket_root: Path,
    resolver: Resolver | None = None,
    task_id: str,
) -> ExecEgress:
    """A proxy with `rules` and no one to ask (what is not allowed is refused), for
    one command or one image build running as `identity`."""
    recorder = EventRecorder()
    service = EgressService(
        rules=rules,
        mode="dontAsk",
        limits=limits,
        resolver=resolver or Resolver(),
        events=recorder,
        sandbox_uid=identity.uid,
    )
    socket_dir = make_socket_dir(identity, socket_root)
    background = BackgroundEgress(service, OneOffTask(task_id=task_id), socket_dir, recorder)
    try:
        background.start()
    except BaseException:
        shutil.rmtree(socket_dir, ignore_errors=True)
        raise
    return ExecEgress(socket_dir, f"{identity.uid}:{identity.gid}", background)
