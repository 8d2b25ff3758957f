"""`python -m tests.fuzz`: the long differential fuzz run (see policies/README.md).

    python -m tests.fuzz --cases 20000 --seed 7
    python -m tests.fuzz --analyser ../other-checkout   # judge another checkout's analyser

Prints cases/s, the allow/ask/deny counts and the bypasses; saves each new
minimised bypass in tests/fuzz/regressions.jsonl (unless --no-save) and, with
--findings FILE, also appends it there as one JSON line. Exits 1 when it found a
bypass. `--refresh` re-decides the saved cases and updates their `open` flags.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

if "--analyser" in sys.argv:  # must win before `orchestrator` is first imported
    sys.path.insert(0, str(Path(sys.argv[sys.argv.index("--analyser") + 1]).resolve()))

from tests.fuzz.judge import decide, violations
from tests.fuzz.session import (
    REGRESSIONS,
    Finding,
    Report,
    append_jsonl,
    run,
    skeleton,
)


def refresh(path: Path = REGRESSIONS) -> tuple[int, int]:
    """Set each saved case's `open` flag from the current analyser; (open, total)."""
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for record in records:
        record["open"] = decide(record["command"])[0] == "allow"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    return sum(r["open"] for r in records), len(records)


def prune(oracle: object, path: Path = REGRESSIONS) -> tuple[int, int]:
    """Drop saved cases in which bash no longer does anything unallowed, and all but
    the shortest of cases with the same skeleton."""
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    kept, shapes = [], set()
    for record in sorted(records, key=lambda r: len(r["command"])):
        shape = skeleton(record["command"], record["saw"])
        if shape not in shapes and violations(oracle.observe(record["command"])):  # type: ignore[attr-defined]
            shapes.add(shape)
            kept.append(record)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept))
    return len(kept), len(records) - len(kept)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.fuzz", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--cases", type=int, default=20000, help="cases to generate")
    parser.add_argument("--seed", type=int, default=1, help="same seed, same cases")
    parser.add_argument("--start", type=int, default=0, help="index of the first case")
    parser.add_argument("--max-minimise", type=int, default=40, help="bypasses to minimise")
    parser.add_argument("--minutes", type=float, default=None, help="stop after this long")
    parser.add_argument("--findings", type=Path, default=None, help="also append findings here")
    parser.add_argument("--no-save", action="store_true", help="do not add to regressions.jsonl")
    parser.add_argument("--refresh", action="store_true", help="only refresh the `open` flags")
    parser.add_argument(
        "--prune", action="store_true", help="drop saved cases the oracle no longer flags"
    )
    parser.add_argument(
        "--splice-saved", action="store_true", help="mutate with saved bypasses as fragments"
    )
    parser.add_argument(
        "--evolve", action="store_true", help="half the cases edit earlier allowed cases"
    )
    parser.add_argument("--analyser", type=Path, help="a checkout whose analyser is judged")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the oracle is removed
    if args.refresh:
        still, total = refresh()
        print(f"{still} of {total} saved cases are still allowed by the analyser")
        return 0

    import orchestrator
    from orchestrator.backend.connect import connect
    from tests.fuzz.image import ensure_oracle_image
    from tests.fuzz.oracle import Oracle

    print(f"analyser: {Path(orchestrator.__file__).parent}", file=sys.stderr)
    client = connect()
    image = ensure_oracle_image(client, log=lambda m: print(m, file=sys.stderr))
    if args.prune:
        with Oracle(client, image) as oracle:
            kept, dropped = prune(oracle)
        print(f"kept {kept} saved cases, dropped {dropped} the oracle no longer flags")
        return 0

    def on_finding(finding: Finding, new: bool) -> None:
        print(
            f"BYPASS {'(new)' if new else '(known)'} {finding.command!r}: {'; '.join(finding.saw)}",
            flush=True,
        )
        if not new:
            return
        record = {**finding.as_json(), "open": True}
        if not args.no_save:
            append_jsonl(REGRESSIONS, record)
        if args.findings is not None:
            append_jsonl(args.findings, {**record, "at": time.strftime("%H:%M:%S", time.gmtime())})

    def progress(report: Report) -> None:
        print(report.summary(), file=sys.stderr, flush=True)

    with Oracle(client, image) as oracle:
        report = run(
            oracle,
            seed=args.seed,
            cases=args.cases,
            start=args.start,
            max_minimise=args.max_minimise,
            on_finding=on_finding,
            progress=progress,
            deadline_s=args.minutes * 60 if args.minutes else None,
            splice_saved=args.splice_saved,
            evolving=args.evolve,
        )
    client.close()
    print(report.summary())
    for crash in report.crashes[:20]:
        print(f"analyser error: {crash}")
    return 1 if report.bypasses else 0


if __name__ == "__main__":
    sys.exit(main())
