"""What one permission decision costs as a hostile input grows (issue 19).

For each family of inputs that was once super-linear (a long redirection target, a
long Read path, `[ … -a … ]` and `[[ … && … ]]` chains, a long command against a
`Bash(x * y * z)` rule), the decision (`evaluate`, the function the engine and
`warden policy explain` use) is timed at input size n and 4n, in the same run; the
ratio is printed. Linear cost gives a ratio near 4; quadratic near 16. Inputs past
the caps (PATH_MAX, the analyser's command and word limits) ask without being
resolved, so their time stays flat.

    python3 bench/bench_decision_cost.py [--repeat 5]

A second table gives the worst shapes found for one decision within the caps
(issue 32: 4,700 here-documents pending on one 63 KB line took 7 s of tree-sitter
holding the interpreter; past `MAX_HEREDOCS` such a line asks unparsed), as a
median in ms and as a ratio to deciding `git status` in the same run.

Exits 0 whatever the figures; the table is the output.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from orchestrator.jsontypes import JSONObject
from orchestrator.permissions import EffectivePolicy, ToolCall, evaluate, parse_rule

FAMILIES: dict[str, tuple[str, Callable[[int], JSONObject], int]] = {
    "redirect target (components)": (
        "Bash",
        lambda n: {"command": "echo x > " + "a/" * n + "b"},
        500,
    ),
    "Read file_path (components)": ("Read", lambda n: {"file_path": "a/" * n + "b"}, 500),
    "[ -n a -a … ] (operators)": (
        "Bash",
        lambda n: {"command": "[ -n a " + "-a -n a " * n + "]"},
        150,
    ),
    "[[ a && … ]] (operators)": ("Bash", lambda n: {"command": "[[ a " + "&& a " * n + "]]"}, 60),
    "glob rule, long command (words)": ("Bash", lambda n: {"command": "echo " + "a b " * n}, 1000),
}


def _heredocs(n: int, size: int = 63_000) -> str:
    """`n` here-documents pending on one line, bodies padded to about `size` bytes."""
    pad = max(1, size // n - 10)
    return (
        "cat "
        + "".join(f"<<E{i} " for i in range(n))
        + "\n"
        + "".join("y" * pad + f"\nE{i}\n" for i in range(n))
    )


WORST: dict[str, str] = {
    "4,700 here-documents, 63 KB (refused)": "cat "
    + "".join(f"<<E{i} " for i in range(4700))
    + "\n"
    + "".join(f"E{i}\n" for i in range(4700)),
    "64 here-documents pending, 63 KB": _heredocs(64),
    "32 here-documents pending, 63 KB": _heredocs(32),
    "pipeline of 8,000 commands (16 KB)": ":|" * 8000 + ":",
    "5,000 nested subshells": "(" * 5000 + ":" + ")" * 5000,
    "64 KB of one word": "echo " + "a" * 65_000,
}
"""The slowest inputs found for one decision (fuzzing and issue reports)."""


def _policy() -> EffectivePolicy:
    rules = tuple(
        parse_rule(r, "allow", "bench", "bench") for r in ("Bash(echo * a * b * z)", "Bash(ls:*)")
    )
    return EffectivePolicy(rules=rules, mode="acceptEdits", mode_source="bench", sources=())


def _time(tool: str, tool_input: JSONObject, host: Path, repeat: int) -> float:
    policy = _policy()
    call = ToolCall(tool_name=tool, tool_input=tool_input, tool_use_id="bench")
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        evaluate(policy, call, workspace_host=host)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as host:
        print(f"{'family':34} {'n':>6} {'t(n) ms':>9} {'t(4n) ms':>9} {'ratio':>6}  decision at 4n")
        for name, (tool, make, n) in FAMILIES.items():
            small = _time(tool, make(n), Path(host), args.repeat)
            large = _time(tool, make(4 * n), Path(host), args.repeat)
            decision = evaluate(
                _policy(),
                ToolCall(tool_name=tool, tool_input=make(4 * n), tool_use_id="b"),
                workspace_host=Path(host),
            ).decision
            print(
                f"{name:34} {n:>6} {small * 1e3:>9.2f} {large * 1e3:>9.2f} "
                f"{large / small:>6.1f}  {decision.behavior}: {decision.reason[:60]}"
            )

        baseline = _time("Bash", {"command": "git status"}, Path(host), args.repeat)
        print(f"\n{'worst shape':40} {'ms':>9} {'x git status':>13}  decision")
        for name, command in WORST.items():
            took = _time("Bash", {"command": command}, Path(host), args.repeat)
            decision = evaluate(
                _policy(),
                ToolCall(tool_name="Bash", tool_input={"command": command}),
                workspace_host=Path(host),
            ).decision
            print(
                f"{name:40} {took * 1e3:>9.1f} {took / baseline:>13.0f}  "
                f"{decision.behavior}: {decision.reason[:50]}"
            )


if __name__ == "__main__":
    main()
