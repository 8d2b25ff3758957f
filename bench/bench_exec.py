"""Benchmark of warden's container path, interleaved so all variants see the same noise.

(a) `warden exec -- true` end to end (CLI subprocess) vs bare
    `docker run --rm --network none IMAGE true`;
(b) in-process `DockerBackend.run(spec)`, on the docker SDK and on the thin stdlib
    client (`engine_http`, what `warden exec` uses on a local engine), vs a raw
    low-level SDK create/start/wait/remove with `network_disabled=True`.

Prints medians and ratios. Targets: in-process <= 1.15x raw; CLI <= 1.0x docker run.
Every container is labelled `warden.session=<bench session>` and removed.

The CLI runs as `<this interpreter> -m orchestrator` (or `--warden PATH`, e.g. the
installed console script). Run this file with the real interpreter, not a pyenv shim:
the shim's bash adds ~70 ms to every start of a child that goes through it.

    python bench/bench_exec.py [-n 30] [--image warden-base:bookworm] [--warden PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from orchestrator import labels as wl  # noqa: E402
from orchestrator.backend.base import SandboxSpec  # noqa: E402
from orchestrator.backend.connect import connect, connect_local  # noqa: E402
from orchestrator.backend.docker import DockerBackend  # noqa: E402
from orchestrator.config import Settings  # noqa: E402

DEFAULT_ITERATIONS = 30
DEFAULT_IMAGE = os.environ.get("WARDEN_TEST_IMAGE", "bash")
"""`bash` is warden's restricted image (resolved to its current tag), the one
`warden exec` uses by default."""
IN_PROCESS_TARGET = 1.15
CLI_TARGET = 1.0


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--iterations", type=int, default=DEFAULT_ITERATIONS)
    parser.add_argument("--image", default=DEFAULT_IMAGE, help="agent, bash or an image name")
    parser.add_argument("--warden", help="the warden executable (default: python -m orchestrator)")
    args = parser.parse_args()

    session = f"bench-{uuid.uuid4().hex[:12]}"
    label = f"{wl.SESSION}={session}"
    client = connect()
    api = client.api
    backend = DockerBackend(client, Settings.from_env())
    thin = connect_local()
    if type(thin).__name__ != "EngineClient":
        sys.exit("the thin client needs a local engine (DOCKER_HOST unset or unix://)")
    thin_backend = DockerBackend(thin, Settings.from_env())
    from orchestrator.images import resolve_image

    args.image = resolve_image(client, args.image)
    workspace = Path(tempfile.mkdtemp(prefix="warden-bench-"))
    if os.geteuid() == 0:
        os.chown(workspace, 1000, 1000)  # as a user's workspace would be
    spec = SandboxSpec(
        image=args.image,
        command=["true"],
        workspace=workspace,
        warden_labels=wl.warden_labels(session, exec="bench"),
    )
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    warden = [args.warden] if args.warden else [sys.executable, "-m", "orchestrator"]
    warden_cli = [*warden, "exec", "--image", args.image, "--workspace", str(workspace),
                  "--", "true"]  # fmt: skip
    docker_cli = ["docker", "run", "--rm", "--network", "none", "--label", label,
                  args.image, "true"]  # fmt: skip

    def run_cli(argv: list[str]) -> None:
        subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL)

    def raw_sdk() -> None:
        container: Any = api.create_container(
            args.image, command=["true"], network_disabled=True, labels={wl.SESSION: session}
        )
        api.start(container)
        api.wait(container)
        api.remove_container(container, force=True)

    # What `warden exec` imports before its first API call (no docker SDK any more).
    import_floor = [sys.executable, "-c", "import orchestrator.cli, orchestrator.commands.exec, "
                    "orchestrator.backend.docker, orchestrator.config, orchestrator.provision.engine"]  # fmt: skip

    variants: dict[str, Callable[[], object]] = {
        "python + CLI imports only": lambda: run_cli(import_floor),
        "warden exec (CLI)": lambda: run_cli(warden_cli),
        "docker run --network none": lambda: run_cli(docker_cli),
        "DockerBackend.run (SDK)": lambda: backend.run(spec),
        "DockerBackend.run (thin client)": lambda: thin_backend.run(spec),
        "raw SDK create/start/wait/remove": raw_sdk,
    }
    for action in variants.values():  # warm-up: page cache, image layers, imports
        action()
    samples: dict[str, list[float]] = {name: [] for name in variants}
    try:
        for _ in range(args.iterations):
            for name, action in variants.items():
                samples[name].append(timed(action))
    finally:
        backend.cleanup({wl.SESSION: session})

    medians = {name: statistics.median(values) for name, values in samples.items()}
    print(f"{args.iterations} interleaved iterations, image {args.image}, CLI {' '.join(warden)}")
    for name, value in medians.items():
        print(f"  {name:<34} median {value * 1000:7.1f} ms")
    raw = medians["raw SDK create/start/wait/remove"]
    sdk_ratio = medians["DockerBackend.run (SDK)"] / raw
    thin_ratio = medians["DockerBackend.run (thin client)"] / raw
    cli = medians["warden exec (CLI)"] / medians["docker run --network none"]
    print(f"in-process ratio, SDK         {sdk_ratio:.2f}x (target <= {IN_PROCESS_TARGET}x)")
    print(f"in-process ratio, thin client {thin_ratio:.2f}x (target <= {IN_PROCESS_TARGET}x)")
    print(f"CLI ratio                     {cli:.2f}x (target <= {CLI_TARGET}x)")
    floor = medians["python + CLI imports only"]
    print(
        f"of the CLI's {medians['warden exec (CLI)'] * 1000:.0f} ms, {floor * 1000:.0f} ms is the "
        "interpreter and imports (pydantic, click, warden) before any API call"
    )


if __name__ == "__main__":
    main()
