"""Benchmark of warden's container path, interleaved so all variants see the same noise.

(a) `warden exec -- true` end to end (CLI subprocess) vs a bare
    `docker run --rm --network none IMAGE true`; target <= 1.5x on a quiet machine
    (issue 39), printed beside the floor. `--image bash` (the default) reaches warden
    exec by name, as a user's `warden exec -- true` resolves it; the baselines run the
    tag it resolves to. (Passing the tag made warden take the project-image path: two
    more engine calls than `warden exec -- true` makes.)
(b) in-process `DockerBackend.run(spec)` vs the same sequence of raw docker SDK
    calls (create with the same hardened HostConfig, start, wait, logs, remove);
    target <= 1.05x. The ratio is warden's own cost on top of the engine's.

Floors, in the same run: a fresh interpreter that imports only the docker SDK and
makes the raw variant's calls (what any Python command on the SDK pays: the CLI
figure's floor, always measured); without --quick also one that only imports what
`warden exec` imports before its first engine call.

Prints medians and both ratios, measured in the same run (the machine is shared:
compare ratios, never absolute times). Every container is labelled
`warden.session=<bench session>` and removed.

The CLI runs as a user runs it: the `warden` console script installed beside this
interpreter (`pip install -e .` puts it there), else `<this interpreter> -m orchestrator`
(which also imports runpy, ~4 ms), or `--warden PATH`. Run this file with the real
interpreter, not a pyenv shim: the shim's bash adds ~70 ms to every start of a child
that goes through it.

    python bench/bench_exec.py [-n 30 | --quick] [--image bash] [--warden PATH]
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "bench"))

from benchlib import compile_sources, figure  # noqa: E402
from docker.types import LogConfig  # noqa: E402

from orchestrator import labels as wl  # noqa: E402
from orchestrator.backend.connect import connect  # noqa: E402
from orchestrator.backend.contract import SandboxSpec  # noqa: E402
from orchestrator.backend.docker import DockerBackend  # noqa: E402
from orchestrator.config import Settings  # noqa: E402

DEFAULT_ITERATIONS = 30
QUICK_ITERATIONS = 8
DEFAULT_IMAGE = os.environ.get("WARDEN_TEST_IMAGE", "bash")
"""`bash` is warden's restricted image (resolved to its current tag), the one
`warden exec` uses by default."""
IN_PROCESS_TARGET = 1.05
CLI_TARGET = 1.5


SDK_FLOOR = """
import gc, json, sys
gc.disable()  # as warden's CLI imports
import docker
image, session, host_config = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
api = docker.from_env(version="auto").api
created = api.create_container(
    image, command=["true"], user="1000:1000", network_disabled=True,
    labels={"warden.session": session}, working_dir="/workspace", host_config=host_config,
)
api.start(created["Id"])
api.wait(created["Id"])
api.logs(created["Id"])
api.remove_container(created["Id"], force=True, v=True)
"""


def installed_warden() -> list[str]:
    """The `warden` console script of this interpreter's environment when it runs this
    checkout's code, else `python -m orchestrator` (the same code, started through runpy)."""
    script = Path(sys.executable).with_name("warden")
    if script.is_file() and os.access(script, os.X_OK):
        where = subprocess.run(
            [sys.executable, "-c", "import orchestrator; print(orchestrator.__file__)"],
            capture_output=True, text=True, check=False, cwd=tempfile.gettempdir(),
        )  # fmt: skip
        if Path(where.stdout.strip()).resolve().is_relative_to(REPO_ROOT):
            return [str(script)]
    return [sys.executable, "-m", "orchestrator"]


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--iterations", type=int, default=DEFAULT_ITERATIONS)
    parser.add_argument(
        "--quick", action="store_true",
        help=f"{QUICK_ITERATIONS} iterations and no import-only variant (a smoke run)",
    )  # fmt: skip
    parser.add_argument("--image", default=DEFAULT_IMAGE, help="agent, bash or an image name")
    parser.add_argument(
        "--warden",
        help="the warden executable (default: the console script beside this interpreter, "
        "else python -m orchestrator)",
    )
    args = parser.parse_args()
    compile_sources()  # every sample runs warden as an installed one would: from .pyc
    iterations = QUICK_ITERATIONS if args.quick else args.iterations

    session = f"bench-{uuid.uuid4().hex[:12]}"
    label = f"{wl.SESSION}={session}"
    client = connect()
    api = client.api
    settings = Settings.from_env()
    backend = DockerBackend(
        client, state_dir=settings.state_dir, fallback_uid=settings.fallback_uid
    )
    from orchestrator.images import resolve_image

    asked = args.image  # what `warden exec --image` gets: `bash` takes exec's own path
    args.image = resolve_image(client, args.image)  # what the baselines run
    workspace = Path(tempfile.mkdtemp(prefix="warden-bench-"))
    atexit.register(shutil.rmtree, workspace, ignore_errors=True)  # however the bench ends
    if os.geteuid() == 0:
        os.chown(workspace, 1000, 1000)  # as a user's would be
    spec = SandboxSpec(
        image=args.image,
        command=["true"],
        workspace=workspace,
        warden_labels=wl.warden_labels(session, exec="bench"),
    )
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    warden = [args.warden] if args.warden else installed_warden()
    warden_cli = [*warden, "exec", "--image", asked, "--workspace", str(workspace),
                  "--", "true"]  # fmt: skip
    docker_cli = ["docker", "run", "--rm", "--network", "none", "--label", label,
                  args.image, "true"]  # fmt: skip

    def run_cli(argv: list[str]) -> None:
        subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL)

    limits = spec.limits
    # The HostConfig DockerBackend sends (see DockerBackend.start), so both variants
    # ask the engine for the same work.
    host_config = api.create_host_config(
        binds=[f"{workspace}:/workspace:rw"], cap_drop=["ALL"],
        security_opt=["no-new-privileges"], read_only=True,
        tmpfs={"/tmp": f"rw,nosuid,nodev,size={limits.tmp_bytes},mode=1777"},
        shm_size=16 * 1024 * 1024, init=True, mem_limit=limits.memory_bytes,
        memswap_limit=limits.memory_bytes, nano_cpus=int(limits.cpus * 1e9),
        pids_limit=limits.pids,
        log_config=LogConfig(type="json-file", config={"max-size": "1m", "max-file": "1"}),
    )  # fmt: skip

    def raw_sdk() -> None:
        created = api.create_container(
            args.image, command=["true"], user="1000:1000", network_disabled=True,
            labels={wl.SESSION: session}, working_dir="/workspace", host_config=host_config,
        )  # fmt: skip
        api.start(created["Id"])
        api.wait(created["Id"])
        api.logs(created["Id"])
        api.remove_container(created["Id"], force=True, v=True)

    variants: dict[str, Callable[[], object]] = {
        "warden exec (CLI)": lambda: run_cli(warden_cli),
        "docker run --network none": lambda: run_cli(docker_cli),
        "DockerBackend.run": lambda: backend.run(spec),
        "raw SDK create/start/wait/logs/remove": raw_sdk,
    }
    # The floor of any Python command on the docker SDK: a fresh interpreter that
    # imports only the SDK and makes the raw variant's engine calls (plus the API
    # version round trip warden's client makes too). Measured in every run: it is the
    # CLI figure's floor.
    sdk_floor = [sys.executable, "-c", SDK_FLOOR, args.image, session, json.dumps(host_config)]
    variants["python + docker SDK, same engine calls"] = lambda: run_cli(sdk_floor)
    if not args.quick:
        # What `warden exec` imports before its first engine call.
        # With the collector off, as `cli.main` imports for exec (else the floor is
        # higher than what the CLI itself pays).
        import_floor = [sys.executable, "-c", "import gc; gc.disable(); import orchestrator.cli, "
                        "orchestrator.commands.exec, orchestrator.backend.docker, "
                        "orchestrator.backend.connect, orchestrator.config"]  # fmt: skip
        variants["python + exec-path imports only"] = lambda: run_cli(import_floor)
    for action in variants.values():  # warm-up: page cache, image layers, imports
        action()
    samples: dict[str, list[float]] = {name: [] for name in variants}
    try:
        for _ in range(iterations):
            for name, action in variants.items():
                samples[name].append(timed(action))
    finally:
        backend.cleanup({wl.SESSION: session})
        client.close()

    medians = {name: statistics.median(values) for name, values in samples.items()}
    print(f"{iterations} interleaved iterations, image {args.image}, CLI {' '.join(warden)}")
    for name, value in medians.items():
        print(f"  {name:<38} median {value * 1000:7.1f} ms")
    in_process = medians["DockerBackend.run"] / medians["raw SDK create/start/wait/logs/remove"]
    cli = medians["warden exec (CLI)"] / medians["docker run --network none"]
    print(f"in-process ratio {in_process:.2f}x (target <= {IN_PROCESS_TARGET}x)")
    print(f"CLI ratio        {cli:.2f}x (target <= {CLI_TARGET}x)")
    sdk = medians["python + docker SDK, same engine calls"]
    figure("warden exec -- true / docker run --rm --network none", cli, CLI_TARGET,
           floor=sdk / medians["docker run --network none"],
           floor_note="python + docker SDK making the same engine calls")  # fmt: skip
    figure("DockerBackend.run / raw SDK calls", in_process, IN_PROCESS_TARGET, floor=1.0,
           floor_note="the raw SDK calls themselves")  # fmt: skip
    if sdk is not None:
        print(
            f"the floor of a Python command on the docker SDK: {sdk * 1000:.0f} ms = "
            f"{sdk / medians['docker run --network none']:.2f}x docker run (warden exec: "
            f"{cli:.2f}x)"
        )
    floor = medians.get("python + exec-path imports only")
    if floor is not None:
        print(
            f"of the CLI's {medians['warden exec (CLI)'] * 1000:.0f} ms, {floor * 1000:.0f} ms "
            "is the interpreter and imports (docker SDK, click, warden) before any "
            "engine call"
        )


if __name__ == "__main__":
    main()
