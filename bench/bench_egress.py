"""Benchmark of the egress path against the same traffic sent directly on the host,
in one run: a 10 MB download, and 100 small requests (one connection each).

The upstream (tests/egress_support's HTTP server) runs in a process of its own, so
neither side shares an interpreter lock with it. The same client program
(Python's urllib, streaming into /dev/null, timing only the transfers) runs
(a) on the host against the server on 127.0.0.1 directly, and (b) inside a real
sandbox (agent image, no network interface) against `bench.test`, which only the
proxy's in-process test resolver maps to that server: (b) crosses the in-container
forwarder (TCP on the sandbox's lo → Unix socket) and the host proxy (head parse,
decision, connect, kernel relay). Container start-up is not timed. Rounds
alternate (a) and (b) so both see the same noise. In each round a client process
repeats the transfers (`--repeat`, after one warm-up) and the round's figure is
their median: one 10 MB download takes a few ms, so a single one is mostly
scheduling noise on a shared 2-core machine. Medians are printed, and the ratio is
the median of the rounds' own ratios (each (b) against the (a) measured just
before it), which a shared machine's drifting load disturbs least; the middle
half of the rounds' ratios is printed beside it, to show how noisy the run was.
Targets (issue 27): 10 MB <= 1.3x, 100 small requests <= 1.5x. Nothing leaves 127.0.0.0/8.

    python bench/bench_egress.py [-n 15] [--repeat 5] [--megabytes 10] [--small 100]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "bench"))

from benchlib import figure  # noqa: E402

from orchestrator import labels as wl  # noqa: E402
from orchestrator.backend.connect import connect  # noqa: E402
from orchestrator.backend.contract import ResourceLimits, SandboxSpec  # noqa: E402
from orchestrator.backend.docker import DockerBackend  # noqa: E402
from orchestrator.config import Settings  # noqa: E402
from orchestrator.egress.flags import EgressFlags  # noqa: E402
from orchestrator.egress.limits import EgressLimits  # noqa: E402
from orchestrator.egress.oneoff import start_exec_egress  # noqa: E402
from orchestrator.egress.resolver import StaticResolver  # noqa: E402
from orchestrator.images import resolve_image  # noqa: E402
from orchestrator.lifecycle import socket_dirs  # noqa: E402

TARGET_DOWNLOAD = 1.3
TARGET_SMALL = 1.5
CPUS = float(os.environ.get("BENCH_CPUS", "1"))
SERVER = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
from tests.egress_support import upstream
with upstream() as port:
    print(port, flush=True)
    sys.stdin.read()  # serve until the benchmark closes our stdin
"""
CLIENT = r"""
import sys, time, urllib.request
big_url, small_url, small, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for _ in range(rounds):
    started = time.perf_counter()
    got = 0
    with urllib.request.urlopen(big_url, timeout=60) as resp:
        while chunk := resp.read(256 * 1024):
            got += len(chunk)
    big = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(small):
        with urllib.request.urlopen(small_url, timeout=60) as resp:
            resp.read()
    print(f"{big:.6f} {time.perf_counter() - started:.6f} {got}", flush=True)
"""
Times = list[tuple[float, float]]


def client_argv(host: str, port: int, size: int, small: int, rounds: int) -> list[str]:
    return [
        "-c", CLIENT, f"http://{host}:{port}/bytes/{size}", f"http://{host}:{port}/hello",
        str(small), str(rounds),
    ]  # fmt: skip


def parse(out: str, size: int) -> tuple[float, float]:
    """One round's figures: the median of the client's transfers after its warm-up."""
    rows = [line.split() for line in out.splitlines() if line.strip()]
    assert all(int(n) == size for _, _, n in rows), out
    timed = [(float(big), float(small)) for big, small, _ in rows[1:]]
    return statistics.median(t[0] for t in timed), statistics.median(t[1] for t in timed)


def host_times(port: int, size: int, small: int, rounds: int) -> tuple[float, float]:
    out = subprocess.run(
        [sys.executable, *client_argv("127.0.0.1", port, size, small, rounds)],
        capture_output=True, text=True, check=True,
        env={"PATH": "/usr/bin:/bin", "NO_PROXY": "*"},
    ).stdout  # fmt: skip
    return parse(out, size)


def sandbox_times(
    backend: DockerBackend, settings: Settings, image: str, port: int, size: int, small: int,
    rounds: int,
) -> tuple[float, float]:  # fmt: skip
    workspace = Path(tempfile.mkdtemp(prefix="warden-bench-egress-"))
    session = f"bench-egress-{uuid.uuid4().hex[:8]}"
    spec = SandboxSpec(
        image=image,
        command=["python3", *client_argv("bench.test", port, size, small, rounds)],
        workspace=workspace,
        user="1000:1000",
        warden_labels=wl.warden_labels(session, exec=session),
        timeout_s=300,
        limits=ResourceLimits(cpus=CPUS),
    )
    flags = EgressFlags(("bench.test",), (), EgressLimits(max_bytes_down=0, max_connections=0))
    egress = start_exec_egress(
        settings,
        spec,
        flags,
        socket_root=socket_dirs.socket_root(),
        resolver=StaticResolver({"bench.test": "127.0.0.1"}),
    )
    try:
        result = backend.run(egress.sandbox_spec(spec))
    finally:
        egress.close()
        shutil.rmtree(workspace, ignore_errors=True)
    if result.exit_code != 0:
        raise SystemExit(f"sandbox client failed: {result.stderr[-2000:]}")
    return parse(result.stdout, size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--rounds", type=int, default=15, help="rounds per side")
    parser.add_argument(
        "--repeat", type=int, default=5, help="transfers per client process (after a warm-up)"
    )
    parser.add_argument("--megabytes", type=int, default=10)
    parser.add_argument("--small", type=int, default=100, help="small requests per round")
    args = parser.parse_args()
    size = args.megabytes * 1000 * 1000
    settings = Settings.from_env()
    client = connect()
    backend = DockerBackend(
        client, state_dir=settings.state_dir, fallback_uid=settings.fallback_uid
    )
    image = resolve_image(client, "agent")
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(REPO_ROOT)], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    host: Times = []
    proxied: Times = []
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        for _ in range(args.rounds):  # alternate; each client process warms up first
            host.append(host_times(port, size, args.small, 1 + args.repeat))
            proxied.append(
                sandbox_times(backend, settings, image, port, size, args.small, 1 + args.repeat)
            )
    finally:
        server.communicate("", timeout=30)
        client.close()
    rows = [
        (f"{args.megabytes} MB download", 0, TARGET_DOWNLOAD),
        (f"{args.small} small requests", 1, TARGET_SMALL),
    ]
    print(
        f"egress vs direct on the host, {args.rounds} rounds of {args.repeat} transfers "
        "(medians; ratio: median of per-round ratios; upstream in its own process)"
    )
    for label, i, target in rows:
        h = statistics.median(t[i] for t in host)
        p = statistics.median(t[i] for t in proxied)
        ratios = sorted(b[i] / a[i] for a, b in zip(host, proxied, strict=True))
        ratio = statistics.median(ratios)
        low, high = ratios[len(ratios) // 4], ratios[-1 - len(ratios) // 4]
        verdict = "OK" if ratio <= target else "OVER"
        figure(f"egress {label} / direct", ratio, target, note=f"rounds {low:.2f}-{high:.2f}x")
        print(
            f"  {label:22} direct {h * 1000:8.1f} ms   sandbox {p * 1000:8.1f} ms   "
            f"ratio {ratio:.2f}x (middle half of rounds {low:.2f}-{high:.2f}x; "
            f"target <= {target}x) {verdict}"
        )


if __name__ == "__main__":
    main()
