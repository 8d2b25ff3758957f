"""One fuzz run: generate, ask the analyser, run allowed cases in the oracle, judge,
minimise and record each bypass.

Only cases the analyser allows go to the oracle: an ask or a deny can never be a
bypass, and the oracle is the expensive step.
"""

from __future__ import annotations

import json
import math
import random
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, cast

from tests.fuzz.generate import generate
from tests.fuzz.judge import ALLOW_RULES, Violation, decide, violations
from tests.fuzz.mutate import evolve
from tests.fuzz.netrule import net_safe
from tests.fuzz.oracle import Observation, OracleError

REGRESSIONS = Path(__file__).resolve().parent / "regressions.jsonl"
"""Every bypass the fuzzer ever found, minimised; replayed by the regression tests."""
EVOLVE_SHARE = 0.5
"""With `evolving`, the share of cases that edit an earlier allowed case."""
POOL_SIZE = 500
"""Allowed cases kept for evolving (a fixed-size ring)."""
MINIMISE_BUDGET = 250
"""Most oracle runs one minimisation may spend."""


class Observer(Protocol):
    def observe(self, command: str) -> Observation: ...


@dataclass
class Finding:
    command: str
    """The minimised case."""
    original: str
    saw: list[str]
    reason: str
    where: str
    """`seed:index` of the generated case."""

    def as_json(self) -> dict[str, object]:
        return {
            "command": self.command,
            "saw": self.saw,
            "reason": self.reason,
            "original": self.original,
            "found": self.where,
            "rules": list(ALLOW_RULES),
        }


@dataclass
class Report:
    cases: int = 0
    seconds: float = 0.0
    decisions: Counter[str] = field(default_factory=Counter)
    oracle_runs: int = 0
    bypasses: int = 0
    findings: list[Finding] = field(default_factory=list)
    """Minimised bypasses (new or already known)."""
    oracle_errors: list[str] = field(default_factory=list)
    """Cases the oracle could not run (its container was restarted; not findings)."""
    crashes: list[str] = field(default_factory=list)
    """Cases the analyser raised on (not bypasses: the engine would not allow them)."""

    @property
    def rate(self) -> float:
        return self.cases / self.seconds if self.seconds else 0.0

    def summary(self) -> str:
        d = self.decisions
        return (
            f"{self.cases} cases in {self.seconds:.1f} s ({self.rate:.1f} cases/s); "
            f"allow {d['allow']}, ask {d['ask']}, deny {d['deny']}, analyser errors "
            f"{len(self.crashes)}; oracle runs {self.oracle_runs} ({len(self.oracle_errors)} "
            f"failed); bypasses {self.bypasses} "
            f"({len({f.command for f in self.findings})} distinct minimised)"
        )


BENIGN_CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "bash_benign.yaml"
"""Realistic agent commands (the benign corpus); the allowed ones seed `--evolve`."""


def benign_commands(path: Path = BENIGN_CORPUS) -> list[str]:
    """The benign corpus's commands, or none when it is not there."""
    if not path.exists():
        return []
    import yaml

    entries = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("commands") or []
    return [e if isinstance(e, str) else str(e.get("cmd", "")) for e in entries if e]


def known_records(path: Path = REGRESSIONS) -> list[dict[str, object]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def known_commands(path: Path = REGRESSIONS) -> list[str]:
    return [str(r["command"]) for r in known_records(path)]


Decider = Callable[[str], tuple[str, str]]


def bypass_of(
    command: str,
    oracle: Observer,
    kinds: frozenset[str] | None = None,
    decider: Decider = decide,
) -> list[Violation] | None:
    """The violations when the analyser allows `command` and bash does something no rule
    allows (of one of `kinds`, when given); None when it is no bypass."""
    if not net_safe(command):
        return None
    try:
        behavior, _reason = decider(command)
    except Exception:
        return None
    if behavior != "allow":
        return None
    try:
        seen = oracle.observe(command)
    except OracleError:
        return None
    found = [v for v in violations(seen) if kinds is None or v.kind in kinds]
    return found or None


def _observe_or_empty(oracle: Observer, command: str) -> Observation:
    try:
        return oracle.observe(command)
    except OracleError:
        return Observation(root=None)


def minimise(
    command: str,
    oracle: Observer,
    kinds: frozenset[str],
    budget: int = MINIMISE_BUDGET,
    decider: Decider = decide,
) -> str:
    """Delta debugging over characters: the shortest text found that still bypasses
    with a violation of one of `kinds` (so it does not drift to another finding)."""
    cache: dict[str, bool] = {}
    spent = 0

    def still(candidate: str) -> bool:
        nonlocal spent
        if candidate not in cache:
            spent += 1
            cache[candidate] = bypass_of(candidate, oracle, kinds, decider) is not None
        return cache[candidate]

    text, n = command, 2
    while len(text) >= 2 and spent < budget:
        chunk = math.ceil(len(text) / n)
        for start in range(0, len(text), chunk):
            candidate = text[:start] + text[start + chunk :]
            if spent >= budget:
                break
            if candidate.strip() and still(candidate):
                text, n = candidate, max(n - 1, 2)
                break
        else:
            if n >= len(text):
                break
            n = min(len(text), n * 2)
    return text


def signature(found: list[Violation], reason: str) -> tuple[object, ...]:
    """What makes two bypasses look alike: the kinds and targets of their violations and
    the rules that allowed them (digits dropped). Only the first of a look-alike group
    is minimised in a run; every bypass is counted."""
    parts = {(v.kind, re.sub(r"\d+", "N", v.detail.split(" (")[0])) for v in found}
    return (frozenset(parts), reason)


_PROGRAM = re.compile(r"^exec: \S*?([^/\s]+) ")


def skeleton(command: str, saw: list[str]) -> str:
    """A minimised case with the programs it ran replaced by PROG, so `$(sed)` and
    `$(git)` through the same hole count as one finding."""
    for line in saw:
        m = _PROGRAM.match(line)
        if m and m.group(1) not in ("PROG",):
            command = re.sub(rf"(?<![\w/.-]){re.escape(m.group(1))}(?![\w.-])", "PROG", command)
    return command


def run(
    oracle: Observer,
    *,
    seed: int,
    cases: int,
    start: int = 0,
    max_minimise: int = 40,
    on_finding: Callable[[Finding, bool], None] = lambda _f, _new: None,
    progress: Callable[[Report], None] = lambda _r: None,
    deadline_s: float | None = None,
    splice_saved: bool = False,
    evolving: bool = False,
) -> Report:
    """Run `cases` generated cases (indexes start..start+cases-1) of `seed`.

    `on_finding(finding, is_new)` is called for each minimised bypass; the run stops
    by itself after `cases` cases or `deadline_s` seconds. `splice_saved` lets the
    mutation stage splice saved bypasses into cases (then the cases of a seed also
    depend on regressions.jsonl). `evolving` makes half the cases edits of cases the
    analyser allowed (the benign corpus's, then the run's own), so the cases of a seed
    also depend on the analyser and that corpus; they repeat when both are the same."""
    report = Report()
    fragments = known_commands() if splice_saved else []
    pool: list[str] = [c for c in benign_commands() if decide(c)[0] == "allow"] if evolving else []
    seen = {skeleton(str(r["command"]), cast(list[str], r["saw"])) for r in known_records()}
    shapes: set[tuple[object, ...]] = set()
    began = time.monotonic()
    for index in range(start, start + cases):
        if deadline_s is not None and time.monotonic() - began > deadline_s:
            break
        if evolving and pool and random.Random(f"pick:{seed}:{index}").random() < EVOLVE_SHARE:
            command = evolve(seed, index, pool)
        else:
            command = generate(seed, index, fragments)
        report.cases += 1
        try:
            behavior, reason = decide(command)
        except Exception as exc:  # an analyser crash is reported, never a bypass
            report.crashes.append(f"{type(exc).__name__}: {exc} for {command!r}")
            continue
        report.decisions[behavior] += 1
        if behavior == "allow" and evolving:
            if len(pool) < POOL_SIZE:
                pool.append(command)
            else:
                pool[index % POOL_SIZE] = command
        if behavior == "allow":
            report.oracle_runs += 1
            try:
                found = violations(oracle.observe(command))
            except OracleError as exc:
                report.oracle_errors.append(f"{exc} for {command!r}")
                continue
            if found:
                report.bypasses += 1
                shape = signature(found, reason)
                if len(report.findings) < max_minimise and shape not in shapes:
                    shapes.add(shape)
                    small = minimise(command, oracle, frozenset(v.kind for v in found))
                    saw = [str(v) for v in violations(_observe_or_empty(oracle, small))] or [
                        str(v) for v in found
                    ]
                    finding = Finding(small, command, saw, decide(small)[1], f"{seed}:{index}")
                    report.findings.append(finding)
                    shape_text = skeleton(small, saw)
                    on_finding(finding, shape_text not in seen)
                    seen.add(shape_text)
        if report.cases % 500 == 0:
            report.seconds = time.monotonic() - began
            progress(report)
    report.seconds = time.monotonic() - began
    return report


def append_jsonl(path: Path, record: dict[str, object]) -> None:
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(record, ensure_ascii=False) + "\n")
