"""Benchmark of warden's container path, interleaved so all variants see the same noise.

(a) `warden exec -- true` end to end (CLI subprocess) vs bare
    `docker run --rm --network none IMAGE true`;
(b) in-process `DockerBackend.run(spec)` vs a raw low-level SDK
    create/start/wait/remove with `network_disabled=True`.

Prints medians and ratios. Targets: in-process <= 1.15x raw; CLI <= 1.0x docker run.
Every container is labelled `warden.session=<bench session>` and removed.

    python3 bench/bench_exec.py [-n 30] [--image warden-base:bookworm]
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
from orchestrator.backend.docker import DockerBackend  # noqa: E402
from orchestrator.config import Settings  # noqa: E402
from orchestrator.engine import connect  # noqa: E402

DEFAULT_ITERATIONS = 30
DEFAULT_IMAGE = os.environ.get("WARDEN_TEST_IMAGE", "warden-base:bookworm")
IN_PROCESS_TARGET = 1.15
CLI_TARGET = 1.0


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--iterations", type=int, default=DEFAULT_ITERATIONS)
    parser.add_argument("--image", default=DEFAULT_IMAGE)
    args = parser.parse_args()

    session = f"bench-{uuid.uuid4().hex[:12]}"
    label = f"{wl.SESSION}={session}"
    client = connect()
    api = client.api
    backend = DockerBackend(client, Settings.from_env())
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
    warden_cli = [sys.executable, "-m", "orchestrator", "exec", "--image", args.image,
                  "--workspace", str(workspace), "--", "true"]  # fmt: skip
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

    import_floor = [sys.executable, "-c", "import orchestrator.cli, orchestrator.commands.exec, "
                    "orchestrator.backend.docker, orchestrator.config, docker"]  # fmt: skip

    variants: dict[str, Callable[[], object]] = {
        "python + CLI imports only": lambda: run_cli(import_floor),
        "warden exec (CLI)": lambda: run_cli(warden_cli),
        "docker run --network none": lambda: run_cli(docker_cli),
        "DockerBackend.run": lambda: backend.run(spec),
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
    print(f"{args.iterations} interleaved iterations, image {args.image}")
    for name, value in medians.items():
        print(f"  {name:<34} median {value * 1000:7.1f} ms")
    in_process = medians["DockerBackend.run"] / medians["raw SDK create/start/wait/remove"]
    cli = medians["warden exec (CLI)"] / medians["docker run --network none"]
    print(f"in-process ratio {in_process:.2f}x (target <= {IN_PROCESS_TARGET}x)")
    print(f"CLI ratio        {cli:.2f}x (target <= {CLI_TARGET}x)")
    floor = medians["python + CLI imports only"]
    print(
        f"of the CLI's {medians['warden exec (CLI)'] * 1000:.0f} ms, {floor * 1000:.0f} ms is the "
        "interpreter and imports (docker SDK, pydantic, click) before any API call"
    )


if __name__ == "__main__":
    main()
