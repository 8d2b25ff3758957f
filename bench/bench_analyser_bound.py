"""The analyser's time bound (issue 32): a hostile line never stalls other decisions.

Three tables, every figure a ratio against deciding `git status` in the same run:

1. Worst shapes: each pathological command line decided the way the engine decides it
   (`evaluate`), with its decision and reason: refused unparsed by the shape limits,
   or analysed in a worker under the deadline (killed past it: asks).
2. Stall: a trivial decision timed while another thread decides the worst shape, once
   through the bound (the parse is in a worker) and once with the analyser called in
   this process, as before the bound (the parse holds the interpreter lock).
3. The worker hop: the same long, ordinary lines decided in this process and in a
   worker, and the worst shape found at `INLINE_CHARS` (what stays in-process).

    python3 bench/bench_analyser_bound.py [--repeat 20]

Exits 0 whatever the figures; the tables are the output.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from pathlib import Path
from tempfile import TemporaryDirectory

from orchestrator.permissions import EffectivePolicy, ToolCall, evaluate, parse_rule
from orchestrator.permissions import analyser_bound as bound
from orchestrator.permissions.shell import analysis

WORST: dict[str, str] = {
    "4,700 here-documents, 63 KB": "cat "
    + "".join(f"<<E{i} " for i in range(4700))
    + "\n"
    + "".join(f"E{i}\n" for i in range(4700)),
    "64 here-documents pending, 63 KB": "cat "
    + "".join(f"<<E{i} " for i in range(64))
    + "\n"
    + "".join("y" * 974 + f"\nE{i}\n" for i in range(64)),
    "pipeline of 8,000 commands": ":|" * 8000 + ":",
    "pipeline of 1,000 commands": ":|" * 1000 + ":",
    "5,000 nested subshells": "(" * 5000 + ":" + ")" * 5000,
    "120 nested subshells": "(" * 120 + ":" + ")" * 120,
    "20,000-word list": "echo " + "a " * 20_000,
    "4,000-word list": "echo " + "ab " * 4000,
    "64 KB of one word": "echo " + "a" * 65_000,
    "21,000 quoted words, one word": "echo " + "'a'" * 21_000,
}
ORDINARY: dict[str, str] = {
    "git status": "git status",
    "600-char commit": 'git commit -m "' + "fix things " * 55 + '"',
    "8 KB here-document": "cat > x.py <<'EOF'\n" + "print('hello')\n" * 550 + "EOF",
    "60 KB here-document": "cat > x.js <<'EOF'\n"
    + "function f(a, b) { return (a|b) & 1; };\n" * 1500
    + "EOF",
}


def _policy() -> EffectivePolicy:
    rules = tuple(parse_rule(r, "allow", "bench", "bench") for r in ("Bash(git status)",))
    return EffectivePolicy(rules=rules, mode="default", mode_source="bench", sources=())


def _decide(command: str, host: Path) -> tuple[float, str]:
    call = ToolCall(tool_name="Bash", tool_input={"command": command}, tool_use_id="bench")
    start = time.perf_counter()
    decision = evaluate(_policy(), call, workspace_host=host).decision
    return time.perf_counter() - start, f"{decision.behavior}: {decision.reason}"


def _median(command: str, host: Path, repeat: int) -> float:
    return statistics.median(_decide(command, host)[0] for _ in range(repeat))


def _stall(worst: str, host: Path, in_process: bool) -> tuple[float, float, int]:
    """(longest and median trivial decision, how many) while another thread analyses
    `worst`."""
    done = threading.Event()

    def slow() -> None:
        if in_process:
            analysis._analyse(worst)
        else:
            bound.pool().analyse(worst)
        done.set()

    thread = threading.Thread(target=slow)
    thread.start()
    times: list[float] = []
    while not done.is_set():
        times.append(_decide("git status", host)[0])
    thread.join()
    return max(times, default=0.0), statistics.median(times or [0.0]), len(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    with TemporaryDirectory() as tmp:
        host = Path(tmp)
        bound.pool()  # warm, as a run does at its start
        _decide("x" * 600, host)
        baseline = _median("git status", host, args.repeat)
        print(
            f"deadline {bound.pool().bound.deadline_ms} ms, inline up to "
            f"{bound.INLINE_CHARS} chars; git status decides in {baseline * 1e3:.3f} ms"
        )

        print(f"\n{'worst shape':34} {'chars':>7} {'ms':>8} {'ratio':>7}  decision")
        worst_time = 0.0
        for name, command in WORST.items():
            took, said = _decide(command, host)
            worst_time = max(worst_time, took)
            print(
                f"{name:34} {len(command):>7} {took * 1e3:>8.1f} {took / baseline:>7.0f}  "
                f"{said[:90]}"
            )
        print(f"worst-case decision / trivial decision: {worst_time / baseline:.0f}")

        slowest = "64 here-documents pending, 63 KB"
        print(
            f"\n{'stall while ' + slowest + ' is analysed':48} {'max ms':>8} {'ratio':>7} "
            f"{'median ms':>10} {'n':>5}"
        )
        for label, in_process in (
            ("through the bound (worker)", False),
            ("in-process parse (before the bound)", True),
        ):
            longest, median, count = _stall(WORST[slowest], host, in_process)
            print(
                f"{label:48} {longest * 1e3:>8.1f} {longest / baseline:>7.0f} "
                f"{median * 1e3:>10.3f} {count:>5}"
            )

        print(
            f"\n{'ordinary line':24} {'chars':>7} {'in-process ms':>14} {'worker ms':>10} {'ratio':>6}"
        )
        for name, command in ORDINARY.items():
            here = []
            there = []
            for i in range(args.repeat):
                unique = f"{command} #{i}"  # past both caches
                start = time.perf_counter()
                analysis._analyse(unique)
                here.append(time.perf_counter() - start)
                start = time.perf_counter()
                bound.pool().analyse(unique)
                there.append(time.perf_counter() - start)
            h, t = statistics.median(here), statistics.median(there)
            print(f"{name:24} {len(command):>7} {h * 1e3:>14.3f} {t * 1e3:>10.3f} {t / h:>6.2f}")

        n = bound.INLINE_CHARS
        inline = {
            "list of ';'": ":;" * (n // 2),
            "pipeline": ":|" * (n // 2),
            "nested ()": "(" * (n // 2 - 1) + ":" + ")" * (n // 2 - 1),
            "64 here-documents": "cat " + "".join(f"<<{i} " for i in range(64))[: n - 10],
            "words": "echo " + "a " * (n // 2 - 3),
            "[[ && ]]": "[[ a " + "&& a " * (n // 5 - 2) + "]]",
        }
        print(f"\n{'worst in-process shape at ' + str(n) + ' chars':40} {'ms':>8} {'ratio':>7}")
        for name, command in inline.items():
            times = []
            for i in range(max(3, args.repeat // 4)):
                start = time.perf_counter()
                analysis._analyse(command + f" #{i}")
                times.append(time.perf_counter() - start)
            took = statistics.median(times)
            print(f"{name:40} {took * 1e3:>8.2f} {took / baseline:>7.0f}")


if __name__ == "__main__":
    main()
