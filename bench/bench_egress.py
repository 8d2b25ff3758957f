"""Benchmark of the egress path against the same traffic sent directly on the host,
in one run: a 10 MB download, and 100 small requests (one connection each).

The upstream (tests/egress_support's HTTP server) runs in a process of its own, so
no side shares an interpreter lock with it. One client program (Python's urllib,
streaming into /dev/null) is started once per side and kept running; each transfer
is one command to it, and the clients take turns, one transfer at a time:
(a) on the host against the server on 127.0.0.1 directly;
(b) inside a real sandbox (agent image, no network interface, 1 CPU) against
    `bench.test`, which only the proxy's test resolver maps to that server: it crosses
    the in-container forwarder (TCP on the sandbox's lo -> Unix socket) and the host
    proxy (head parse, decision, connect, kernel relay), as `warden exec
    --allow-domain` does (no store);
(c) the same in a second sandbox whose proxy writes each connection's audit record
    to a run store, durably, before the connection goes on, as `warden run` does.
The sandbox clients take their commands over two FIFOs in their workspace, so no
process starts and nothing is imported inside a timed transfer. Each round runs
the download on (a), (b), (c) back to back, then the small requests in turns of
`--burst` (10) per side, the order rotating, so all three see the same moments of
a shared machine's load (whole batches per side, as before, let one side's batch
meet a burst of load the other's missed: per-round ratios spread 1.1-3.6x). The
ratio is the median of the rounds' own ratios ((b) or (c) over the (a) measured
beside it); the middle half of the rounds' ratios is printed beside it to show how
noisy the run was, with the load average and the CPU pressure (PSI).
Targets (issue 27): 10 MB <= 1.3x, 100 small requests <= 1.5x. Nothing leaves 127.0.0.0/8.

    python bench/bench_egress.py [-n 20] [--megabytes 10] [--small 100] [--burst 10]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "bench"))

from benchlib import UNPRIVILEGED, chown_tree, figure  # noqa: E402

from orchestrator import labels as wl  # noqa: E402
from orchestrator.backend.connect import connect  # noqa: E402
from orchestrator.backend.contract import ResourceLimits, SandboxSpec  # noqa: E402
from orchestrator.backend.docker import DockerBackend  # noqa: E402
from orchestrator.broker.listener import SandboxIdentity, make_socket_dir  # noqa: E402
from orchestrator.config import Settings  # noqa: E402
from orchestrator.egress.background import (  # noqa: E402
    BackgroundEgress,
    EventRecorder,
    OneOffTask,
)
from orchestrator.egress.limits import EgressLimits  # noqa: E402
from orchestrator.egress.oneoff import ExecEgress  # noqa: E402
from orchestrator.egress.resolver import StaticResolver  # noqa: E402
from orchestrator.egress.rules import RuleSet, parse_rule  # noqa: E402
from orchestrator.egress.service import EgressService  # noqa: E402
from orchestrator.images import resolve_image  # noqa: E402
from orchestrator.lifecycle import socket_dirs  # noqa: E402
from orchestrator.store import Store  # noqa: E402
from orchestrator.store.records import TaskRecord  # noqa: E402

TARGET_DOWNLOAD = 1.3
TARGET_SMALL = 1.5
CPUS = float(os.environ.get("BENCH_CPUS", "1"))
ANSWER_TIMEOUT_S = 120.0
"""Longest one transfer may take before the benchmark gives up on a client."""
SERVER = r"""
import sys
sys.path.insert(0, sys.argv[1])
from tests.egress_support import upstream
with upstream() as port:
    print(port, flush=True)
    sys.stdin.read()  # serve until the benchmark closes our stdin
"""
CLIENT = r"""
import sys, time, urllib.request
big_url, small_url = sys.argv[1], sys.argv[2]
commands = open(sys.argv[3]) if len(sys.argv) > 3 else sys.stdin
answers = open(sys.argv[4], "w") if len(sys.argv) > 4 else sys.stdout
for line in commands:
    what = line.strip()
    started = time.perf_counter()
    got = 0
    if what == "big":
        with urllib.request.urlopen(big_url, timeout=60) as resp:
            while chunk := resp.read(256 * 1024):
                got += len(chunk)
    elif what.startswith("small"):
        for _ in range(int(what.split()[1])):
            with urllib.request.urlopen(small_url, timeout=60) as resp:
                got += len(resp.read())
    else:
        break
    print(f"{time.perf_counter() - started:.6f} {got}", file=answers, flush=True)
"""
SIDES = ("direct", "sandbox", "sandbox+store")


def client_argv(host: str, port: int, size: int) -> list[str]:
    return ["-c", CLIENT, f"http://{host}:{port}/bytes/{size}", f"http://{host}:{port}/hello"]


class Client:
    """One long-lived client: `transfer("big" | "small N")` -> (seconds, bytes)."""

    def __init__(self, to_client: int, from_client: int, alive: threading.Event) -> None:
        self._to, self._from, self._alive = to_client, from_client, alive
        self._buffer = b""

    def transfer(self, what: str) -> tuple[float, int]:
        os.write(self._to, f"{what}\n".encode())
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        while b"\n" not in self._buffer:
            if not self._alive.is_set() or time.monotonic() > deadline:
                raise SystemExit(f"a benchmark client stopped answering ({what})")
            if select.select([self._from], [], [], 1.0)[0]:
                self._buffer += os.read(self._from, 4096)
        line, _, self._buffer = self._buffer.partition(b"\n")
        seconds, got = line.split()
        return float(seconds), int(got)

    def quit(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._to, b"quit\n")


@contextlib.contextmanager
def host_client(port: int, size: int) -> Iterator[Client]:
    proc = subprocess.Popen(
        [sys.executable, *client_argv("127.0.0.1", port, size)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        env={"PATH": "/usr/bin:/bin", "NO_PROXY": "*"},
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    alive = threading.Event()
    alive.set()
    client = Client(proc.stdin.fileno(), proc.stdout.fileno(), alive)
    try:
        yield client
    finally:
        client.quit()
        proc.stdin.close()
        proc.wait(60)


def start_egress(workspace: Path, with_store: bool) -> tuple[ExecEgress, Store | None]:
    """`warden exec --allow-domain bench.test`'s proxy, or (`with_store`) the same
    proxy writing each connection's audit record to a run store, as in `warden run`."""
    recorder = EventRecorder()
    task = OneOffTask(task_id="exec-bench")
    store = None
    if with_store:
        store = Store.open(workspace.parent / "state" / "warden.db")
        store.create_run("run_bench", prompt="bench", workspace=str(workspace), model="m",
                         pid=os.getpid())  # fmt: skip
        store.create_task(TaskRecord(task_id="sa_bench", run_id="run_bench",
                                     agent_type="general-purpose", prompt="bench"))  # fmt: skip
        task = OneOffTask(task_id="sa_bench", run_id="run_bench", agent="general-purpose")
    identity = SandboxIdentity(UNPRIVILEGED, UNPRIVILEGED)
    service = EgressService(
        rules=RuleSet((parse_rule("bench.test", "allow", "bench", "command line"),)),
        mode="dontAsk",
        limits=EgressLimits(max_bytes_down=0, max_connections=0),
        resolver=StaticResolver({"bench.test": "127.0.0.1"}),
        events=recorder,
        store=store,
        sandbox_uid=identity.uid,
    )
    socket_dir = make_socket_dir(identity, socket_dirs.socket_root())
    background = BackgroundEgress(service, task, socket_dir, recorder)
    background.start()
    return ExecEgress(socket_dir, f"{identity.uid}:{identity.gid}", background), store


@contextlib.contextmanager
def sandbox_client(
    backend: DockerBackend, image: str, port: int, size: int, with_store: bool
) -> Iterator[Client]:
    """A sandbox whose client takes commands over FIFOs in its workspace."""
    root = Path(tempfile.mkdtemp(prefix="warden-bench-egress-"))
    workspace = root / "workspace"
    workspace.mkdir()
    (root / "state").mkdir()
    for name in ("commands", "answers"):
        os.mkfifo(workspace / name, 0o600)
        if os.geteuid() == 0:
            os.chown(workspace / name, UNPRIVILEGED, UNPRIVILEGED)
    chown_tree(workspace)
    session = f"bench-egress-{uuid.uuid4().hex[:8]}"
    spec = SandboxSpec(
        image=image,
        command=[
            "python3",
            *client_argv("bench.test", port, size),
            "/workspace/commands",
            "/workspace/answers",
        ],
        workspace=workspace,
        user=f"{UNPRIVILEGED}:{UNPRIVILEGED}",
        warden_labels=wl.warden_labels(session, exec=session),
        timeout_s=1800,
        limits=ResourceLimits(cpus=CPUS),
    )
    egress, store = start_egress(workspace, with_store)
    # O_RDWR: opening never waits for the sandbox, and neither FIFO ever reads as ended.
    to_client = os.open(workspace / "commands", os.O_RDWR)
    from_client = os.open(workspace / "answers", os.O_RDWR)
    alive = threading.Event()
    alive.set()
    failure: list[str] = []

    def run() -> None:
        try:
            result = backend.run(egress.sandbox_spec(spec))
            if result.exit_code != 0:
                failure.append(result.stderr[-2000:])
        finally:
            alive.clear()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    client = Client(to_client, from_client, alive)
    try:
        yield client
    except SystemExit:
        if failure:
            raise SystemExit(f"sandbox client failed: {failure[0]}") from None
        raise
    finally:
        client.quit()
        thread.join(120)
        os.close(to_client)
        os.close(from_client)
        egress.close()
        if store is not None:
            store.close()
        shutil.rmtree(root, ignore_errors=True)


def cpu_pressure() -> str:
    """The share of the last 10 s in which some task waited for a CPU (Linux PSI)."""
    try:
        line = Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except (OSError, IndexError):
        return "?"
    return line.split()[1].removeprefix("avg10=") + "%"


def rotated(n: int) -> tuple[str, ...]:
    return SIDES[n % len(SIDES) :] + SIDES[: n % len(SIDES)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "-n", "--rounds", type=int, default=20, help="rounds (each side's transfers, in turns)"
    )
    parser.add_argument("--megabytes", type=int, default=10)
    parser.add_argument("--small", type=int, default=100, help="small requests per round")
    parser.add_argument(
        "--burst", type=int, default=10, help="small requests per turn (sides take turns)"
    )
    args = parser.parse_args()
    size = args.megabytes * 1000 * 1000
    settings = Settings.from_env()
    docker = connect()
    backend = DockerBackend(
        docker, state_dir=settings.state_dir, fallback_uid=settings.fallback_uid
    )
    image = resolve_image(docker, "agent")
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(REPO_ROOT)], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    times: dict[tuple[str, str], list[float]] = {}
    load_before, pressure_before = os.getloadavg()[0], cpu_pressure()
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        with (
            host_client(port, size) as direct,
            sandbox_client(backend, image, port, size, False) as proxied,
            sandbox_client(backend, image, port, size, True) as stored,
        ):
            clients = dict(zip(SIDES, (direct, proxied, stored), strict=True))
            expected = {}  # bytes per transfer, from the warm-up (imports, first connections)
            for side, client in clients.items():
                assert client.transfer("big")[1] == size, side
                expected[side] = client.transfer("small 1")[1]
            for r in range(args.rounds):
                for side in rotated(r):
                    seconds, got = clients[side].transfer("big")
                    assert got == size, (side, got)
                    times.setdefault((side, "big"), []).append(seconds)
                spent = dict.fromkeys(SIDES, 0.0)
                for i in range(args.small // args.burst):  # a burst per side in turn
                    for side in rotated(r + i):
                        seconds, got = clients[side].transfer(f"small {args.burst}")
                        assert got == expected[side] * args.burst, (side, got)
                        spent[side] += seconds
                for side, seconds in spent.items():
                    times.setdefault((side, "small"), []).append(seconds)
    finally:
        server.communicate("", timeout=30)
        docker.close()
    load = (
        f"load {load_before:.1f} -> {os.getloadavg()[0]:.1f}, CPU pressure "
        f"{pressure_before} -> {cpu_pressure()}"
    )
    print(
        f"egress vs direct on the host, {args.rounds} rounds (a 10 MB download, then "
        f"{args.small} requests in turns of {args.burst}, per side), long-lived clients "
        f"(ratio: median of per-round ratios; {load})"
    )
    rows = [
        (f"{args.megabytes} MB download", "big", "sandbox", TARGET_DOWNLOAD),
        (f"{args.small} small requests", "small", "sandbox", TARGET_SMALL),
        (f"{args.megabytes} MB download, run store", "big", "sandbox+store", TARGET_DOWNLOAD),
        (f"{args.small} small requests, run store", "small", "sandbox+store", TARGET_SMALL),
    ]
    for label, what, side, target in rows:
        base = times[("direct", what)]
        mine = times[(side, what)]
        ratios = sorted(b / a for a, b in zip(base, mine, strict=True))
        ratio = statistics.median(ratios)
        low, high = ratios[len(ratios) // 4], ratios[-1 - len(ratios) // 4]
        figure(f"egress {label} / direct", ratio, target, note=f"rounds {low:.2f}-{high:.2f}x",
               floor_note="none measured: no other relay doing the same checks runs here")  # fmt: skip
        print(
            f"  {label:34} direct {statistics.median(base) * 1000:7.1f} ms   sandbox "
            f"{statistics.median(mine) * 1000:7.1f} ms   ratio {ratio:.2f}x (middle half "
            f"{low:.2f}-{high:.2f}x; target <= {target}x) {'OK' if ratio <= target else 'OVER'}"
        )


if __name__ == "__main__":
    main()
