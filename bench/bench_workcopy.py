"""What `isolation: worktree` costs at a task's start and end (issue 36).

A working copy is a no-follow copy of the workspace whose every file is also hashed
into the content store; at the task's end the copy is read again (no-follow) into
a change set. This times, interleaved in rounds over one generated workspace
(`--files` small files in nested directories plus a few 1 MiB ones):

- `cp -a` of the same tree: the baseline (a plain copy, nothing hashed or stored);
- `make_working_copy`: the copy, the base tree's hashes and the content store;
- `compute_change_set` of a copy with a few files edited.

Targets: a working copy within 4x `cp -a` (it reads every byte twice and writes it
twice, copy and store), a change set within 3x.

    python3 bench/bench_workcopy.py [--files 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import figure

from orchestrator.apply.compute import compute_change_set
from orchestrator.apply.workcopy import content_store, make_working_copy

COPY_TARGET = 4.0
CHANGES_TARGET = 3.0
SMALL_BYTES = 4096
LARGE_FILES = 4
LARGE_BYTES = 1 << 20


def workspace(root: Path, files: int) -> Path:
    ws = root / "ws"
    for i in range(files):
        path = ws / f"d{i % 20}" / f"e{i % 7}" / f"f{i}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes((f"line {i}\n" * (SMALL_BYTES // 8))[:SMALL_BYTES].encode())
    for i in range(LARGE_FILES):
        (ws / f"big{i}.bin").write_bytes(bytes(range(256)) * (LARGE_BYTES // 256))
    return ws


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-workcopy-") as tmp:
        root = Path(tmp)
        ws = workspace(root, args.files)
        cp: list[float] = []
        copy_t: list[float] = []
        change_t: list[float] = []
        for r in range(args.rounds):
            target = root / f"cp{r}"
            started = time.perf_counter()
            subprocess.run(["cp", "-a", str(ws), str(target)], check=True)
            cp.append(time.perf_counter() - started)
            shutil.rmtree(target)
            state = root / f"state{r}"
            started = time.perf_counter()
            copy = make_working_copy(ws, state, run_id="r", task_id=f"sa_{r}", agent="a",
                                     session="bench")  # fmt: skip
            copy_t.append(time.perf_counter() - started)
            for i in range(5):
                (copy.work / f"d{i}" / f"e{i}" / f"edited{i}.txt").write_text("new\n")
            started = time.perf_counter()
            change_set, _ = compute_change_set(copy, content_store(state))
            change_t.append(time.perf_counter() - started)
            assert len(change_set.changes) == 5
            shutil.rmtree(state)
    base = statistics.median(cp)
    print(f"cp -a              {base * 1000:8.1f} ms (median of {args.rounds})")
    print(f"make_working_copy  {statistics.median(copy_t) * 1000:8.1f} ms")
    print(f"compute_change_set {statistics.median(change_t) * 1000:8.1f} ms")
    figure("working copy vs cp -a", statistics.median(copy_t) / base, COPY_TARGET, floor=1.0,
           floor_note="cp -a of the same tree, same run")  # fmt: skip
    figure("change set vs cp -a", statistics.median(change_t) / base, CHANGES_TARGET,
           floor_note="none measured: no other program computes the same change set")  # fmt: skip


if __name__ == "__main__":
    main()
