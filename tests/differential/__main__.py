"""`python -m tests.differential [--slice] [--fresh] [--only PREFIX] [--json FILE]`:
the whole differential set (or CI's slice) against the pinned Claude Code CLI."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tests.differential.cases import SLICE, all_groups
from tests.differential.compare import claude_binary, compare


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.differential")
    parser.add_argument("--slice", action="store_true", help="only the groups CI runs")
    parser.add_argument("--only", default="", help="only groups whose id starts with this")
    parser.add_argument("--fresh", action="store_true", help="ignore cached Claude outcomes")
    parser.add_argument("--json", type=Path, help="write every compared case here")
    args = parser.parse_args()
    groups = [g for g in all_groups() if g["id"].startswith(args.only)]
    if args.slice:
        groups = [g for g in groups if g["id"] in SLICE]
    summary = compare(groups, claude_binary(), use_cache=not args.fresh)
    print("\n".join(summary.lines()))
    if args.json:
        args.json.write_text(json.dumps(summary.__dict__, indent=1, default=str))
    ok = not summary.fail_open and summary.agreement >= 0.97
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
