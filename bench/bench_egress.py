"""Benchmark of the egress path: a 10 MB download through the in-container forwarder
and the host proxy, against the same download directly on the host, in one run.

The same client program (Python's urllib, streaming into /dev/null, timing only
the download itself) runs (a) on the host against the test server on 127.0.0.1
directly and (b) inside a real sandbox (agent image, no network interface) against
`bench.test`, which only the proxy's in-process test resolver maps to that server:
(b) crosses the forwarder (TCP on the sandbox's lo → Unix socket) and the host
proxy (decision, resolution, audit-free relay). Container start-up is not timed.
Rounds alternate (a) and (b) so both see the same noise; medians and the ratio are
printed. Target: (b) <= 1.3x (a). Nothing leaves 127.0.0.0/8.

    python bench/bench_egress.py [-n 7] [--megabytes 10]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from orchestrator import labels as wl  # noqa: E402
from orchestrator.backend.base import ResourceLimits, SandboxSpec  # noqa: E402
from orchestrator.backend.connect import connect  # noqa: E402
from orchestrator.backend.docker import DockerBackend  # noqa: E402
from orchestrator.config import Settings  # noqa: E402
from orchestrator.egress.flags import EgressFlags  # noqa: E402
from orchestrator.egress.limits import EgressLimits  # noqa: E402
from orchestrator.egress.oneoff import start_exec_egress  # noqa: E402
from orchestrator.egress.resolver import StaticResolver  # noqa: E402
from orchestrator.images import resolve_image  # noqa: E402
from tests.egress_support import upstream  # noqa: E402

TARGET = 1.3
CPUS = float(__import__("os").environ.get("BENCH_CPUS", "1"))
CLIENT = r"""
import sys, time, urllib.request
url, rounds = sys.argv[1], int(sys.argv[2])
for _ in range(rounds):
    started = time.perf_counter()
    got = 0
    with urllib.request.urlopen(url, timeout=60) as resp:
        while chunk := resp.read(256 * 1024):
            got += len(chunk)
    print(f"{time.perf_counter() - started:.6f} {got}", flush=True)
"""


def host_times(url: str, rounds: int) -> list[float]:
    out = subprocess.run(
        [sys.executable, "-c", CLIENT, url, str(rounds)],
        capture_output=True, text=True, check=True,
        env={"PATH": "/usr/bin:/bin", "NO_PROXY": "*"},
    ).stdout  # fmt: skip
    return [float(line.split()[0]) for line in out.splitlines()]


def sandbox_times(
    backend: DockerBackend, settings: Settings, image: str, url: str, rounds: int, size: int
) -> list[float]:
    workspace = Path(tempfile.mkdtemp(prefix="warden-bench-egress-"))
    session = f"bench-egress-{uuid.uuid4().hex[:8]}"
    spec = SandboxSpec(
        image=image,
        command=["python3", "-c", CLIENT, url, str(rounds)],
        workspace=workspace,
        user="1000:1000",
        warden_labels=wl.warden_labels(session, exec=session),
        timeout_s=300,
        limits=ResourceLimits(cpus=CPUS),
    )
    flags = EgressFlags(("bench.test",), (), EgressLimits(max_bytes_down=0))
    egress = start_exec_egress(
        settings, spec, flags, resolver=StaticResolver({"bench.test": "127.0.0.1"})
    )
    try:
        result = backend.run(egress.sandbox_spec(spec))
    finally:
        egress.close()
        workspace.rmdir()
    if result.exit_code != 0:
        raise SystemExit(f"sandbox client failed: {result.stderr[-2000:]}")
    lines = [ln.split() for ln in result.stdout.splitlines()]
    assert all(int(n) == size for _, n in lines), result.stdout
    return [float(t) for t, _ in lines]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--rounds", type=int, default=7, help="downloads per side")
    parser.add_argument("--megabytes", type=int, default=10)
    args = parser.parse_args()
    size = args.megabytes * 1000 * 1000
    settings = Settings.from_env()
    client = connect()
    backend = DockerBackend(client, settings)
    image = resolve_image(client, "agent")
    host: list[float] = []
    proxied: list[float] = []
    with upstream() as port:
        for _ in range(args.rounds):  # alternate, one download each, after a warm-up
            host += host_times(f"http://127.0.0.1:{port}/bytes/{size}", 2)[1:]
            proxied += sandbox_times(
                backend, settings, image, f"http://bench.test:{port}/bytes/{size}", 2, size
            )[1:]
    client.close()
    h, p = statistics.median(host), statistics.median(proxied)
    ratio = p / h
    print(f"{args.megabytes} MB download, {args.rounds} rounds (medians)")
    print(f"  host, direct:                     {h * 1000:8.1f} ms")
    print(f"  sandbox, forwarder + host proxy:  {p * 1000:8.1f} ms")
    print(f"  ratio: {ratio:.2f}x (target <= {TARGET}x) {'OK' if ratio <= TARGET else 'OVER'}")


if __name__ == "__main__":
    main()
