"""warden beside the tools people would pick instead, interleaved, same command, same image.

1. Command line, one command: `warden exec -- true` vs Anthropic's sandbox-runtime
   (`srt true`, npm @anthropic-ai/sandbox-runtime: bubblewrap namespaces on the host,
   no image) and a bare `docker run --rm --network none IMAGE true`. Target: warden
   no slower than srt (issue 27).
2. Library, one-shot run in a long-lived process: warden's backend
   (`backend.factory.make_backend(...).run(spec)`: the hardened sandbox `warden exec`
   runs) vs epicbox (`epicbox.run`) and llm-sandbox (`SandboxSession` open, one
   command, close), each in its own worker process of its own virtual environment.
   Each sample is timed inside its own process, so the request to the worker is not
   counted. Target: warden no slower than either.

The peers are installed for the benchmark only, never as warden dependencies: srt with
`npm install --prefix` and epicbox / llm-sandbox each in its own venv, all under
PEERS_DIR (default ~/.cache/warden-bench/peers; pinned versions below). Every variant
runs the same image (warden's `bash` image unless --image) with networking off where
the tool allows it. A peer that cannot run here is reported with the reason and left
out; the other figures still print. Containers are labelled with this bench's session
where the tool allows labels, and removed.

    python bench/bench_peers.py [-n 15 | --quick] [--image bash]
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

from orchestrator import labels as wl  # noqa: E402
from orchestrator.backend.connect import connect  # noqa: E402
from orchestrator.backend.contract import SandboxSpec  # noqa: E402
from orchestrator.backend.factory import make_backend  # noqa: E402
from orchestrator.config import Settings  # noqa: E402

DEFAULT_ITERATIONS = 15
QUICK_ITERATIONS = 5
SRT_PACKAGE = "@anthropic-ai/sandbox-runtime@0.0.78"
EPICBOX_PACKAGES = ("epicbox==1.1.0", "urllib3<2")
"""epicbox 1.1.0 (its latest) passes `method_whitelist` to urllib3's Retry, which
urllib3 2 removed: its venv keeps urllib3 1.26."""
LLM_SANDBOX_PACKAGE = "llm-sandbox[docker]==0.3.46"
SRT_NEEDS = ("bwrap", "socat", "rg")
"""What srt checks for on Linux before it runs anything (Debian: bubblewrap, socat, ripgrep)."""
INSTALL_TIMEOUT_S = 600
PEERS_DIR = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "warden-bench/peers"

# One worker per Python peer: reads a line per sample, answers with seconds (or an error).
EPICBOX_WORKER = """
import json, sys, time
import epicbox
epicbox.configure(profiles=[epicbox.Profile("bench", sys.argv[1], user="1000:1000",
                                            read_only=True, network_disabled=True)])
for line in sys.stdin:
    t = time.perf_counter()
    result = epicbox.run("bench", "true", limits={"cputime": 10, "memory": 512})
    elapsed = time.perf_counter() - t
    ok = result.get("exit_code") == 0
    print(json.dumps({"s": elapsed} if ok else {"error": repr(result)}), flush=True)
"""

LLM_SANDBOX_WORKER = """
import json, sys, time
from llm_sandbox import SandboxSession
image, label = sys.argv[1], json.loads(sys.argv[2])
# stop_signal SIGKILL: as shipped, close() stops the container with SIGTERM, which the
# interactive shell it keeps running ignores, so every run waits Docker's 10 s stop
# timeout (measured here: 10.3 s per run).
configs = {"init": True, "stop_signal": "SIGKILL", "network_disabled": True,
           "labels": label, "user": "1000:1000"}
for line in sys.stdin:
    t = time.perf_counter()
    with SandboxSession(image=image, keep_template=True, skip_environment_setup=True,
                        runtime_configs=dict(configs), workdir="/tmp") as session:
        result = session.execute_command("true")
    elapsed = time.perf_counter() - t
    ok = result.exit_code == 0
    print(json.dumps({"s": elapsed} if ok else {"error": repr(result)}), flush=True)
"""


class PeerUnavailable(Exception):
    """A peer cannot run on this machine; the message says why and what would fix it."""


def run_quiet(argv: list[str], timeout_s: float = INSTALL_TIMEOUT_S) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise PeerUnavailable(f"`{' '.join(argv[:4])} ...` failed: {' / '.join(tail)}")


def srt_command(peers: Path, home: Path) -> list[str]:
    """`srt` installed under peers/srt, with a settings file that allows no network and
    writes only in the workspace (as warden exec's sandbox)."""
    missing = [tool for tool in SRT_NEEDS if shutil.which(tool) is None]
    if missing:
        raise PeerUnavailable(
            f"srt needs {', '.join(missing)} on PATH (Debian: apt-get install bubblewrap "
            "socat ripgrep); srt refuses to start without them"
        )
    if shutil.which("npm") is None:
        raise PeerUnavailable("npm is not installed, so srt cannot be installed")
    prefix = peers / "srt"
    binary = prefix / "node_modules/.bin/srt"
    if not binary.exists():
        print(f"installing {SRT_PACKAGE} into {prefix} (for this benchmark only)", flush=True)
        run_quiet(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(prefix),
                   SRT_PACKAGE])  # fmt: skip
    settings = home / "srt-settings.json"
    settings.write_text(json.dumps({
        "network": {"allowedDomains": [], "deniedDomains": []},
        "filesystem": {"denyRead": [], "allowWrite": [str(home)], "denyWrite": []},
    }))  # fmt: skip
    argv = [str(binary), "--settings", str(settings), "true"]
    probe = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False,
                           env=dict(os.environ, HOME=str(home)), cwd=home)  # fmt: skip
    if probe.returncode != 0:
        raise PeerUnavailable(f"srt does not run here: {probe.stderr.strip()[:300]}")
    return argv


def venv_python(peers: Path, name: str, packages: tuple[str, ...]) -> Path:
    venv = peers / name
    python = venv / "bin/python"
    if not python.exists():
        print(f"installing {' '.join(packages)} into {venv} (for this benchmark only)", flush=True)
        run_quiet([sys.executable, "-m", "venv", str(venv)])
        run_quiet([str(python), "-m", "pip", "install", "-q", *packages])
    return python


class Worker:
    """A peer's long-lived process; `sample()` asks it for one timed run."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip

    def sample(self) -> float:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            error = self.proc.stderr.read() if self.proc.stderr else ""
            raise PeerUnavailable(f"worker ended: {error.strip()[-300:]}")
        answer = json.loads(line)
        if "error" in answer:
            raise PeerUnavailable(f"run failed: {answer['error'][:300]}")
        return float(answer["s"])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--iterations", type=int, default=DEFAULT_ITERATIONS)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_ITERATIONS} iterations")
    parser.add_argument("--image", default="bash", help="agent, bash or a local image")
    parser.add_argument("--peers-dir", type=Path, default=PEERS_DIR)
    args = parser.parse_args()
    compile_sources()  # every sample runs warden as an installed one would: from .pyc
    iterations = QUICK_ITERATIONS if args.quick else args.iterations

    session = f"bench-{uuid.uuid4().hex[:12]}"
    label = {wl.SESSION: session}
    settings = Settings.from_env()
    client = connect()
    backend = make_backend(client, settings)
    from orchestrator.images import resolve_image

    image = resolve_image(client, args.image, settings.state_dir)
    workspace = Path(tempfile.mkdtemp(prefix="warden-bench-peers-"))
    atexit.register(shutil.rmtree, workspace, ignore_errors=True)
    if os.geteuid() == 0:
        os.chown(workspace, 1000, 1000)  # as a user's would be
    args.peers_dir.mkdir(parents=True, exist_ok=True)

    spec = SandboxSpec(image=image, command=["true"], workspace=workspace,
                       warden_labels=wl.warden_labels(session, exec="bench"))  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    warden_cli = [sys.executable, "-m", "orchestrator", "exec", "--image", image,
                  "--workspace", str(workspace), "--label", f"bench.session={session}",
                  "--", "true"]  # fmt: skip
    docker_cli = ["docker", "run", "--rm", "--network", "none", "--label",
                  f"{wl.SESSION}={session}", image, "true"]  # fmt: skip

    def run_cli(argv: list[str], **kwargs: object) -> None:
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, **kwargs)  # type: ignore[call-overload]

    cli: dict[str, Callable[[], object]] = {
        "warden exec -- true": lambda: run_cli(warden_cli, env=env),
        "docker run --rm --network none": lambda: run_cli(docker_cli),
    }
    library: dict[str, Callable[[], float]] = {
        "warden backend.run (in-process)": lambda: timed(lambda: backend.run(spec)),
    }
    unavailable: dict[str, str] = {}
    workers: list[Worker] = []
    try:
        # srt's own directory, owned by whoever runs the bench: bubblewrap maps only the
        # caller's uid into its namespace, so root cannot write a directory of uid 1000.
        srt_home = Path(tempfile.mkdtemp(prefix="warden-bench-srt-"))
        atexit.register(shutil.rmtree, srt_home, ignore_errors=True)
        try:
            srt = srt_command(args.peers_dir, srt_home)
            cli["srt true"] = lambda: run_cli(srt, env=dict(os.environ, HOME=str(srt_home)),
                                              cwd=srt_home)  # fmt: skip
        except (PeerUnavailable, OSError, subprocess.TimeoutExpired) as exc:
            unavailable["srt"] = str(exc)
        peers = {
            "epicbox.run": ("epicbox", EPICBOX_PACKAGES, [EPICBOX_WORKER, image]),
            "llm-sandbox session": ("llm-sandbox", (LLM_SANDBOX_PACKAGE,),
                                    [LLM_SANDBOX_WORKER, image, json.dumps(label)]),
        }  # fmt: skip
        for name, (venv, package, worker_args) in peers.items():
            try:
                python = venv_python(args.peers_dir, venv, package)
                worker = Worker([str(python), "-c", *worker_args])
                workers.append(worker)
                worker.sample()  # warm-up, and proof that it runs
                library[name] = worker.sample
            except (PeerUnavailable, OSError, subprocess.TimeoutExpired) as exc:
                unavailable[name] = str(exc)

        for action in cli.values():  # warm-up: page cache, image layers, imports
            action()
        library["warden backend.run (in-process)"]()
        cli_samples: dict[str, list[float]] = {name: [] for name in cli}
        lib_samples: dict[str, list[float]] = {name: [] for name in library}
        for _ in range(iterations):
            for name, action in cli.items():
                cli_samples[name].append(timed(action))
            for name, sample in library.items():
                lib_samples[name].append(sample())
    finally:
        for worker in workers:
            worker.close()
        backend.cleanup({wl.SESSION: session})
        client.close()

    print(f"{iterations} interleaved iterations, image {image}, load {os.getloadavg()[0]:.1f}")
    report("command line (whole process, start to exit)", cli_samples, "warden exec -- true")
    report("library, one-shot run in a long-lived process", lib_samples,
           "warden backend.run (in-process)")  # fmt: skip
    for name, why in unavailable.items():
        print(f"  NOT MEASURED {name}: {why}")
    verdicts(cli_samples, lib_samples)


def report(title: str, samples: dict[str, list[float]], warden: str) -> None:
    print(title)
    ours = statistics.median(samples[warden])
    for name, values in samples.items():
        value = statistics.median(values)
        ratio = "" if name == warden else f"  warden / this = {ours / value:.2f}x"
        print(f"  {name:<34} median {value * 1000:7.1f} ms{ratio}")


def verdicts(cli: dict[str, list[float]], lib: dict[str, list[float]]) -> None:
    """One line per target: warden no slower than each peer (ratio <= 1.0)."""
    rows = [("warden exec / srt", cli, "warden exec -- true", "srt true"),
            ("warden exec / docker run", cli, "warden exec -- true",
             "docker run --rm --network none"),
            ("warden one-shot / epicbox", lib, "warden backend.run (in-process)", "epicbox.run"),
            ("warden one-shot / llm-sandbox", lib, "warden backend.run (in-process)",
             "llm-sandbox session")]  # fmt: skip
    for title, samples, ours, theirs in rows:
        if theirs not in samples:
            continue
        ratio = statistics.median(samples[ours]) / statistics.median(samples[theirs])
        target = 1.3 if "docker run" in title else 1.0
        met = "meets" if ratio <= target else "MISSES"
        print(f"RATIO {title}: {ratio:.2f}x (target <= {target}x) {met}")
        figure(f"peers: {title}", ratio, target,
               floor_note="none: a peer is another tool, not the least the work needs")  # fmt: skip


if __name__ == "__main__":
    main()
