"""Every benchmark, one after another, and one table of every figure beside its target.

Each benchmark measures its figures against a baseline in its own run (interleaved)
and prints one `BENCH-FIGURE` line per figure (`benchlib.figure`), with the figure's
floor where it measures one (the best any program doing the same work does, in the
same run); this script runs
them in turn (never two at once: they would share the machine), collects those lines
and prints the table: under each figure that misses, its floor, so a reader can tell
a floor from a gap. A benchmark that fails is listed with the end of its output;
the others still count.

    python bench/run_all.py --quick          # small samples: a few minutes on 2 cores
    python bench/run_all.py                  # each benchmark's own defaults (long)
    python bench/run_all.py --only exec,permission

Exits 0 whether or not targets are met (1 when a benchmark failed to run); the
table is the output. No figure here is a test: speed is never asserted in the suite.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from benchlib import FIGURE_PREFIX  # noqa: E402

BENCH_TIMEOUT_S = 1800
"""Longest one benchmark may run before it is stopped and reported as failed."""
FAILURE_TAIL_LINES = 8


@dataclass(frozen=True)
class Bench:
    name: str
    script: str
    quick: tuple[str, ...]
    """Arguments for `--quick` (small samples; the figures are noisier)."""
    full: tuple[str, ...] = ()


BENCHES: tuple[Bench, ...] = (
    Bench("exec", "bench_exec.py", ("--quick",)),
    Bench("mcp-start", "bench_mcp_start.py", ("--quick",)),
    Bench("peers", "bench_peers.py", ("--quick",)),
    Bench("run-start", "bench_run_start.py", ("--quick",)),
    Bench("permission", "bench_permission.py", ("-n", "300", "--rounds", "1")),
    Bench("approval-hub", "bench_approval_hub.py", ("-n", "2000")),
    Bench("workcopy", "bench_workcopy.py", ("--files", "1000", "--rounds", "3")),
    Bench("spawn", "bench_spawn.py", ("--quick",)),
    Bench("fanout", "bench_fanout.py", ("--sizes", "20", "--sdk-floor"), ("--sdk-floor",)),
    Bench("egress", "bench_egress.py", ("-n", "10")),
    Bench("hooks", "bench_hooks.py", ("-n", "20")),
    Bench("project-image", "bench_project_image.py", ("-n", "6")),
    Bench("cost", "bench_cost.py", ("--quick",)),
)


@dataclass(frozen=True)
class Figure:
    bench: str
    name: str
    value: float
    target: float
    unit: str
    met: bool
    higher_better: bool
    note: str
    floor: float | None = None
    """The same work's floor, measured in the same run (`benchlib.figure`)."""
    floor_note: str = ""


def run(bench: Bench, quick: bool) -> tuple[list[Figure], str | None, float]:
    """The figures one benchmark printed; the reason when it failed; its seconds."""
    argv = [sys.executable, str(BENCH_DIR / bench.script), *(bench.quick if quick else bench.full)]
    print(f"== {bench.name}: {' '.join(argv[1:])}", flush=True)
    started = time.monotonic()
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=BENCH_TIMEOUT_S, check=False,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return [], f"stopped after {BENCH_TIMEOUT_S} s", time.monotonic() - started
    took = time.monotonic() - started
    figures = []
    for line in proc.stdout.splitlines():
        if line.startswith(FIGURE_PREFIX):
            record = json.loads(line[len(FIGURE_PREFIX) :])
            figures.append(Figure(bench=bench.name, **record))
    failure = None
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-FAILURE_TAIL_LINES:]
        failure = f"exit {proc.returncode}: " + " / ".join(tail)
    elif not figures:
        failure = "printed no figure"
    return figures, failure, took


def show(value: float, unit: str) -> str:
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "%":
        return f"{value:.1f} %"
    return f"{value:.2f} {unit}".rstrip()


def table(figures: list[Figure]) -> None:
    width = max((len(f.name) for f in figures), default=20)
    print(f"\n{'bench':<14}{'figure':<{width + 2}}{'measured':>12}  {'target':<14}verdict")
    for f in figures:
        sign = ">=" if f.higher_better else "<="
        target = f"{sign} {show(f.target, f.unit)}"
        verdict = "meets" if f.met else "MISSES"
        note = f"  ({f.note})" if f.note else ""
        print(f"{f.bench:<14}{f.name:<{width + 2}}{show(f.value, f.unit):>12}  {target:<14}"
              f"{verdict}{note}")  # fmt: skip
        if not f.met:
            print(f"{'':<14}{'  floor, same run:':<{width + 2}}{floor_text(f)}")


def floor_text(f: Figure) -> str:
    """What a missed figure's floor is, so a reader tells a floor from a gap."""
    if f.floor is None:
        return f"{'-':>12}  ({f.floor_note or 'this benchmark measures no floor for it'})"
    what = f"{f.floor_note}; " if f.floor_note else ""
    if f.floor <= 0 or f.unit != "x":  # an amount (ms, MiB): how far above its floor
        return f"{show(f.floor, f.unit):>12}  ({what}warden is {show(f.value - f.floor, f.unit)} above it)"
    return f"{show(f.floor, f.unit):>12}  ({what}warden is {f.value / f.floor:.2f}x its floor)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small samples (noisier figures)")
    parser.add_argument("--only", help="comma-separated bench names: " +
                        ", ".join(b.name for b in BENCHES))  # fmt: skip
    args = parser.parse_args()
    chosen = BENCHES
    if args.only:
        names = set(args.only.split(","))
        unknown = names - {b.name for b in BENCHES}
        if unknown:
            parser.error(f"unknown bench {', '.join(sorted(unknown))}")
        chosen = tuple(b for b in BENCHES if b.name in names)
    figures: list[Figure] = []
    failures: dict[str, str] = {}
    started = time.monotonic()
    for bench in chosen:
        found, failure, took = run(bench, args.quick)
        print(f"   {len(found)} figure(s) in {took:.0f} s" + (f"; FAILED {failure}" if failure
                                                             else ""), flush=True)  # fmt: skip
        figures += found
        if failure is not None:
            failures[bench.name] = failure
    load = os.getloadavg()
    print(f"\nAll figures, {time.monotonic() - started:.0f} s, load average now "
          f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} ({'quick' if args.quick else 'full'} "
          "samples; each ratio against a baseline measured in the same benchmark run)")  # fmt: skip
    table(figures)
    met = sum(f.met for f in figures)
    print(f"\n{met} of {len(figures)} figures meet their target")
    for name, failure in failures.items():
        print(f"NOT MEASURED ({name}): {failure}")
    raise SystemExit(1 if failures else 0)


if __name__ == "__main__":
    main()
