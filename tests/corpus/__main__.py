"""`python -m tests.corpus`: the share of the benign corpus decided without asking,
the most common reasons for the rest, and any command decided against its entry."""

from __future__ import annotations

from tests.corpus.benign import decide_all, summary


def main() -> None:
    outcomes = decide_all()
    share, reasons = summary(outcomes)
    asked = sum(reasons.values())
    print(f"{len(outcomes)} commands, {len(outcomes) - asked} decided without asking: {share:.1%}")
    print("most common reasons for asking:")
    for reason, n in reasons.most_common(10):
        print(f"  {n:3}  {reason}")
    wrong = [o for o in outcomes if o.behavior != o.case.expect]
    for o in wrong:
        print(f"UNEXPECTED {o.behavior}: {o.case.command!r}: {'; '.join(o.problems) or o.reason}")


if __name__ == "__main__":
    main()
