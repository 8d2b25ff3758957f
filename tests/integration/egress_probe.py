"""Runs a probe script in a real sandbox behind its own egress proxy, as `warden exec
--allow-domain` does, with test domains pointed at local upstreams through the
proxy's in-process resolver (nothing leaves 127.0.0.0/8). The probe prints one
line `PROBE <json>`; the caller gets that document and the proxy's summary."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestrator import labels as wl
from orchestrator.backend.connect import connect
from orchestrator.backend.contract import SandboxSpec
from orchestrator.backend.docker import DockerBackend
from orchestrator.config import Settings
from orchestrator.egress.flags import EgressFlags
from orchestrator.egress.oneoff import start_exec_egress
from orchestrator.egress.resolver import StaticResolver
from orchestrator.images import resolve_image
from orchestrator.lifecycle import socket_dirs

PROBE_PREFIX = "PROBE "


def run_probe(
    settings: Settings, workspace: Path, session: str, name: str, code: str,
    args: Sequence[str], flags: EgressFlags, hosts: Mapping[str, str],
) -> tuple[dict[str, Any], dict[str, object]]:  # fmt: skip
    """`python3 -c code *args` in a sandbox labelled for `session` (`name` tells its
    exec label apart), behind a proxy with `flags`, resolving `hosts`; (the probe's
    document, the proxy's summary). Fails the test unless the probe exited 0."""
    client = connect()
    try:
        backend = DockerBackend(
            client, state_dir=settings.state_dir, fallback_uid=settings.fallback_uid
        )
        spec = SandboxSpec(
            image=resolve_image(client, "agent"),
            command=["python3", "-c", code, *args],
            workspace=workspace,
            warden_labels=wl.warden_labels(session, exec=f"{session}-{name}"),
            timeout_s=300,
        )
        egress = start_exec_egress(
            settings, spec, flags, socket_root=socket_dirs.socket_root(),
            resolver=StaticResolver(dict(hosts)),
        )  # fmt: skip
        try:
            result = backend.run(egress.sandbox_spec(spec))
        finally:
            summary = egress.close()
    finally:
        client.close()
    line = next((ln for ln in result.stdout.splitlines() if ln.startswith(PROBE_PREFIX)), None)
    assert result.exit_code == 0 and line is not None, result.stderr[-3000:]
    out: dict[str, Any] = json.loads(line.removeprefix(PROBE_PREFIX))
    return out, summary
