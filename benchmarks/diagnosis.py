"""How often diagnosis names the mistake a kernel makes: the verdict corpus's defects and trade-offs, each labelled
with its mistake (tests/corpus/mistakes.py), audited, and each failing or warning row's finding counted as right
(the mistake's model), unexplained, or wrong (another model: the number that must stay 0).

    python benchmarks/diagnosis.py            # the table, per kind
    python benchmarks/diagnosis.py --write    # and docs/diagnosis.md's table

A defect is audited on the families that excite it, a trade-off on the kind's quick suite, each in the dtypes the
corpus lists it for (tests/test_verdict_corpus.py).
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import softaudit  # noqa: E402
from tests.corpus.mistakes import MISTAKES  # noqa: E402
from tests.test_verdict_corpus import CORPUS, FAMILIES  # noqa: E402

MARK = "<!-- diagnosis table: written by benchmarks/diagnosis.py --write -->"


#: What a finding is against the mistake made: its model (right), several models that include it (tied),
#: "unexplained", or another model (wrong).
KINDS_OF_ANSWER = ("right", "tied", "unexplained", "wrong")


def answer(finding: str, label: str | None) -> str:
    if finding == label:
        return "right"
    if finding == "unexplained":
        return "unexplained"
    return "tied" if label in finding.split(" or ") else "wrong"


def audit(entry):
    families = entry.fail_in or FAMILIES.get(entry.kind)
    return softaudit.audit(
        entry.fn,
        kind=entry.kind,
        dtypes=list(entry.dtypes),
        suite="quick",
        families=list(families) if families else None,
        cache_dir="off",
        isolation="none",
    ).table


def measure():
    """(per kind: counts, per entry: what was found, seconds)."""
    kinds, entries = {}, []
    start = time.perf_counter()
    for entry in CORPUS:
        if entry.verdict not in ("fail", "warn", "within") or entry.fn not in MISTAKES:
            continue
        label = MISTAKES[entry.fn]
        table = audit(entry)
        judged = table[table.verdict.isin(["fail", "warn"])]
        counts = kinds.setdefault(entry.kind, dict.fromkeys(("rows", *KINDS_OF_ANSWER), 0))
        seen = {}
        for finding in judged.finding:
            counts["rows"] += 1
            counts[answer(finding, label)] += 1
            seen[finding] = seen.get(finding, 0) + 1
        entries.append((entry.kind, entry.fn.__name__, "/".join(entry.dtypes), label or "(none yet)", seen))
        print(f"{entry.kind:20s} {entry.fn.__name__:28s} {label or '-':22s} {seen}", flush=True)
    return kinds, entries, time.perf_counter() - start


def table(kinds: dict) -> list[str]:
    lines = [
        "| kind | failing or warning rows | named right | tied with another | unexplained | named wrong | named |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    total = dict.fromkeys(("rows", *KINDS_OF_ANSWER), 0)
    for kind, c in kinds.items():
        lines.append(_line(kind, c))
        total = {k: total[k] + c[k] for k in total}
    lines.append(_line("**all**", total))
    return lines


def _line(kind: str, c: dict) -> str:
    named = f"{100 * c['right'] / c['rows']:.0f}%" if c["rows"] else "-"
    return f"| {kind} | {c['rows']} | {c['right']} | {c['tied']} | {c['unexplained']} | {c['wrong']} | {named} |"


def write(lines: list[str], entries: list) -> None:
    path = ROOT / "docs" / "diagnosis.md"
    text = path.read_text(encoding="utf-8")
    head = text[: text.index(MARK) + len(MARK)]
    detail = ["", "| kind | kernel | dtypes | its mistake | findings on its failing or warning rows |"]
    detail.append("|---|---|---|---|---|")
    detail += [
        f"| {kind} | `{name}` | {dtypes} | {label} | " + ", ".join(f"{k} x{v}" for k, v in seen.items()) + " |"
        for kind, name, dtypes, label, seen in entries
    ]
    when = datetime.date.today().isoformat()
    stamp = f"\n\nMeasured {when} by `python benchmarks/diagnosis.py --write`.\n"  # (its time is printed)
    path.write_text(head + "\n\n" + "\n".join(lines) + "\n" + "\n".join(detail) + stamp, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="write the table into docs/diagnosis.md")
    args = parser.parse_args()
    kinds, entries, seconds = measure()
    lines = table(kinds)
    print("\n".join(lines))
    print(f"{seconds:.0f} s")
    if args.write:
        write(lines, entries)


if __name__ == "__main__":
    main()
