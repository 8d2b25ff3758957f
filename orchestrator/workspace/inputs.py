"""One run's policy inputs, read once: `PolicyInputs`.

Every part of a run that decides by the settings files (the permission policy,
its hooks, the agent registry, the egress rules, warden's `protect` paths) decides
from the one `SettingsStack` read here, and by the one trust verdict computed from
those same bytes (`workspace.trust`), so a file that changes while a run starts is
never seen two ways. `open_run` builds it before anything else and passes it down.

The dev container is part of it (`images.devcontext`): its devcontainer.json's
bytes, parsed once, and for a Dockerfile build the hash of the context tar (the
tar itself is made only if the run builds, and sent only with that hash). Trust
is decided from those bytes, and the run builds only that content: a root
`.devcontainer.json` or a Dockerfile a concurrent run's sandbox writes after this
read is neither trusted nor built. So are the `--policy` file (the permission
policy and the egress rules decide from one parse of it) and `.git/config`'s
`core.hooksPath` (which the end-of-run report watches). The workspace scripts the
hooks name are made read-only in every sandbox of the run (`hook_scripts`): a
hook, on the host or in a sandbox, runs the content trust covered at the start.
Trust covers every workspace script a host hook names, whichever settings layer
(the person's own, managed) or agent file defines the hook (`host_scripts`): a
host hook runs only the bytes of the person's last yes, so a script a sandbox of
an earlier run rewrote is denied, and the run's start says which and why
(`refused_scripts`). One that does not exist is recorded as absent
(`hook_script_prints`): a host hook is denied when it appears
(`permissions.hooks.scripts`).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from orchestrator.config import Settings
from orchestrator.images.devcontext import DevContainerInputs, read_devcontainer
from orchestrator.permissions.executed_paths import hooks_path_pattern
from orchestrator.permissions.hooks.scripts import ABSENT, UNAPPROVED
from orchestrator.permissions.settings_files import SettingsStack, load_stack
from orchestrator.permissions.sources import (
    MAX_POLICY_BYTES,
    PROJECT_KINDS,
    PolicyDocument,
    read_policy_document,
)
from orchestrator.workspace.trust import TrustVerdict, host_hook_scripts, recorded, verdict
from orchestrator.workspace.trusted_content import hook_scripts

__all__ = ["UNAPPROVED", "PolicyInputs", "read_policy_inputs"]


@dataclass(frozen=True)
class PolicyInputs:
    """The settings files of one run as read once, their hashes, and the trust verdict."""

    workspace: Path
    stack: SettingsStack
    """Every settings file that exists, highest first, parsed once."""
    hashes: tuple[tuple[str, str], ...]
    """(path, `sha256:HEX` of the text read) for each file of `stack`."""
    trust: TrustVerdict
    """Computed from the same text for the project's settings files."""
    devcontainer: DevContainerInputs | None = None
    """The dev container as read once (None: the workspace has none)."""
    policy: PolicyDocument | None = None
    """The `--policy` file as read once (None: none given)."""
    hooks_path: str | None = None
    """`core.hooksPath` of the workspace's `.git/config` as a report pattern, when it
    points inside the workspace (`permissions.executed_paths`)."""
    hook_scripts: tuple[str, ...] = ()
    """Workspace files the hooks of any settings file name, and those of the
    commands `warden.trustedHooks` lists (relative), existing or not: read-only in
    the run's sandboxes when they exist, so a hook runs the script trust saw, not
    one a sandbox wrote."""

    hook_script_prints: tuple[tuple[str, str], ...] = ()
    """(relative path, digest) of each of `hook_scripts` as trust was decided on (the
    person's last yes, even when the workspace is not trusted now: `UNAPPROVED`
    when there is none; `absent` for one not there). Trust covers every script a
    host hook names (`host_scripts`); one it does not cover is named only by
    sandboxed hooks and is `UNAPPROVED`, never the bytes found. A host hook runs
    only while its scripts still match, from a private copy of the bytes compared."""

    host_scripts: tuple[str, ...] = ()
    """The workspace files named by hooks that may run on the host, from any
    settings layer or agent file (`workspace.trust.host_hook_scripts`): trust
    covers them, so the host runs only bytes a person approved."""
    refused_scripts: tuple[str, ...] = ()
    """One sentence per host script that is not the approved content (changed,
    new, removed, never approved): its hook will be denied; said at the run's start."""

    @property
    def trusted(self) -> bool:
        return self.trust.trusted

    @property
    def digests(self) -> dict[str, str]:
        """Path relative to the workspace → digest, for every file the verdict covered."""
        return {rel: f.digest for rel, f in self.trust.prints.items()}


def read_policy_inputs(
    settings: Settings,
    workspace: Path,
    *,
    trusted: bool | None = None,
    policy: str | None = None,
) -> PolicyInputs:
    """Read the run's settings (and `policy`, a `--policy` name or path) once and
    decide trust from them. `trusted` (a flag, an API caller's choice) overrides
    the recorded verdict; None: as recorded. Raises PolicyError when a settings or
    policy file cannot be read completely."""
    document = None if policy is None else read_policy_document(settings, policy)
    stack = load_stack(settings, workspace, MAX_POLICY_BYTES)
    texts = {
        os.path.relpath(f.path, workspace): f.text for f in stack.files if f.kind in PROJECT_KINDS
    }
    dev = read_devcontainer(workspace)
    host = host_hook_scripts(settings, workspace, stack)
    found = verdict(settings, workspace, texts=texts, dev=dev, dev_read=True, host_scripts=host)
    if trusted is not None and trusted != found.trusted:
        why = "trusted by the caller" if trusted else "not trusted, as the caller says"
        found = found.model_copy(update={"trusted": trusted, "reason": why})
    hashes = tuple(
        (str(f.path), "sha256:" + hashlib.sha256(f.text.encode("utf-8")).hexdigest())
        for f in stack.files
    )
    root = workspace.resolve()
    named = hook_scripts(root, {str(f.path): f.doc for f in stack.files})
    scripts = tuple(dict.fromkeys([*named, *host]))
    prints = {rel: f.digest for rel, f in found.prints.items()}
    if not found.trusted:
        # Not the content a person said yes to: a host hook runs only the script
        # of the last yes (whichever settings layer or agent file names it).
        yes = recorded(settings, workspace) or {}
        prints = {rel: yes[rel].digest if rel in yes else UNAPPROVED for rel in prints}
    return PolicyInputs(
        workspace=workspace,
        stack=stack,
        hashes=hashes,
        trust=found,
        devcontainer=dev,
        policy=document,
        hooks_path=hooks_path_pattern(workspace),
        hook_scripts=scripts,
        # A script trust does not cover is named only by hooks that run in a
        # sandbox: a host hook never runs it (`UNAPPROVED`).
        hook_script_prints=tuple((rel, prints.get(rel, UNAPPROVED)) for rel in scripts),
        host_scripts=host,
        refused_scripts=tuple(
            refusal
            for rel in host
            if (refusal := _refusal(rel, prints.get(rel, UNAPPROVED), found)) is not None
        ),
    )


def _refusal(rel: str, expected: str, found: TrustVerdict) -> str | None:
    """Why a host hook naming `rel` will not run this run (None: it will), for the
    run's start: the script, why, and the command that fixes it."""
    now = found.prints[rel].digest if rel in found.prints else ABSENT
    if now == expected:
        return None
    why = (
        "has never been approved" if expected == UNAPPROVED
        else "was removed since you approved it" if now == ABSENT
        else "was not there when you approved this workspace" if expected == ABSENT
        else "changed since you approved it"
    )  # fmt: skip
    return (
        f"the workspace script {rel}, which a hook runs on the host, {why}: that hook "
        f"is not run on the host and the calls it decides are denied. Review {rel} and "
        "run `warden trust`"
    )
