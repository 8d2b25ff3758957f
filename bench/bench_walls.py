"""What holding deny rules as mounts costs at each sandbox's start (issue 32).

`find_walled` looks through the workspace for what the policy's Read/Edit deny
rules match; the shipped `default` policy's `Read(./.env)` is unanchored (any
depth), so it walks every directory. Measured on synthetic workspaces of n and 4n
files, against a plain `os.walk` of the same tree in the same run (the ratio is
the figure; absolute times vary with the machine's load), and for an anchored
rule (`Read(/config/.env)`), which looks only under its directory.

    python3 bench/bench_walls.py [--files 10000] [--repeat 5]

Exits 0 whatever the figures; the table is the output.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from orchestrator.permissions.policy import EffectivePolicy
from orchestrator.permissions.rules import parse_rule
from orchestrator.workspace.walls import find_walled, walls_of

PER_DIR = 50


def _tree(root: Path, files: int) -> None:
    for i in range(files):
        d = root / f"d{i // PER_DIR // PER_DIR}" / f"e{i // PER_DIR}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}.py").write_bytes(b"")
    (root / "config").mkdir()
    (root / "config" / ".env").write_text("SECRET\n")


def _count(root: Path) -> int:
    return sum(1 for _ in os.walk(root))


def _median(fn: Callable[[], object], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def _policy(*rules: str) -> EffectivePolicy:
    return EffectivePolicy(rules=tuple(parse_rule(r, "deny", "bench", r) for r in rules))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    default = walls_of(_policy("Read(./.env)", "Read(./.env.*)", "Edit(./.git/**)"))
    anchored = walls_of(_policy("Read(/config/.env)"))
    print(f"{'files':>7} {'os.walk ms':>11} {'default ms':>11} {'x walk':>7} {'anchored ms':>12}")
    for n in (args.files, 4 * args.files):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            _tree(root, n)
            walk = _median(partial(_count, root), args.repeat)
            full = _median(partial(find_walled, root, default), args.repeat)
            near = _median(partial(find_walled, root, anchored), args.repeat)
            print(
                f"{n:>7} {walk * 1e3:>11.1f} {full * 1e3:>11.1f} {full / walk:>7.1f} {near * 1e3:>12.2f}"
            )


if __name__ == "__main__":
    main()
