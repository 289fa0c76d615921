"""Detection measured by mutation: each built-in's mutants (softaudit.candidates.mutants) audited by `run`'s default
suite and, where run kills none, by the hunt on a fixed budget (issue 42 part 3; not a test).

    python benchmarks/mutation.py [--kinds softmax,attention] [--limit N] [--sample N --seed S] [--budget S]
                                  [--dtypes float16,float32] [--write] [--csv FILE]

Per mutant and dtype, one outcome:
- run: its audit (softaudit.audit, default suite, isolation none) has a fail or error row where the original
  built-in's has neither, or, on a row where the original fails too (a built-in that fails by design), an event
  (NaN, overflow, wrong inf, mask leak, NaN not propagated) the original's row does not have;
- hunt: run kills it not, and softaudit.hunt.hunt on `--budget` seconds finds an input it fails where the original
  does not fail (judged on the same input as the hunt judges);
- equivalent: neither, and its outputs are bit-identical to the original's on every case of the default suite;
- neither: the rest, survivors whose outputs differ: "worse" where some row's verdict is worse than the original's
  (a pass now a warn: the suite saw it and the policy calls it no defect), "same" where none is (the difference is
  within what each row allowed the original: a sum split elsewhere, a constant that changes nothing that counts).
Printed: a table per kind and dtype, and each survivor with its label. --write writes docs/mutation.md's table
(between its markers) and --csv every mutant's outcome. The full set is slow on 2 cores: --sample picks a seeded
subset, and the script prints how long a mutant took and what the full set would take.
"""

from __future__ import annotations

import argparse
import collections
import csv
import random
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import softaudit
from softaudit import kinds as _kinds
from softaudit.adapters import CandidateError, CandidateSkip, call_all
from softaudit.candidates import builtins
from softaudit.candidates.mutants import every_mutant
from softaudit.execute import InProcess
from softaudit.hunt import hunt
from softaudit.hunt._engine import judge as judge_input
from softaudit.plan import sources
from softaudit.policy import Policy
from softaudit.prepare import family as prepared_family
from softaudit.reference import format_of
from softaudit.results import SEVERITY

ROOT = Path(__file__).resolve().parents[1]
FORWARD = ("softmax", "log_softmax", "logsumexp", "masked_softmax", "attention")
DTYPES = ("float16", "bfloat16", "float32", "float64")
EVENTS = ("nan", "overflow", "wrong_inf", "mask_leak", "nan_not_propagated")
KILLING = ("fail", "error")
TIMEOUT = 60.0
OUTCOMES = ("run", "hunt", "worse", "same", "equivalent")


def audited(candidate, dtypes):
    """The candidate's default-suite table (its calls in this process)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return softaudit.audit(candidate, dtypes=dtypes, isolation="none", workers=1, timeout=TIMEOUT).table


def run_kills(original, mutant) -> dict:
    """Per dtype, the first row that kills the mutant ("family: why"), or None."""
    found = {}
    for r, why in killing_rows(original, mutant):
        found.setdefault(r["dtype"], why)
    return found


def killing_rows(original, mutant) -> list[tuple[dict, str]]:
    """The mutant's rows that kill it, each with why ("family: why"): a fail or error where the original's row has
    neither, or an event the original's failing row does not have."""
    key = ["dtype", "family", "output"]
    base = original.set_index(key)
    found = []
    for row in mutant.itertuples(index=False):
        r = row._asdict()
        at = (r["dtype"], r["family"], r["output"])
        if r["verdict"] not in KILLING:
            continue
        if at not in base.index:
            found.append((r, f"{r['family']}: new row"))
            continue
        was = base.loc[at]
        if was["verdict"] not in KILLING:
            found.append((r, f"{r['family']} ({r['verdict']}): {str(r['note'])[:120]}"))
            continue
        new = [e for e in EVENTS if _count(r.get(e)) > _count(was.get(e))]
        if new:
            found.append((r, f"{r['family']}: new {', '.join(new)}"))
    return found


def findings(original, mutant, dtype: str) -> str:
    """The findings of the rows of `dtype` that kill the mutant, each once ("a; b"; an error row has none)."""
    found = [r.get("finding") for r, _ in killing_rows(original, mutant) if r["dtype"] == dtype]
    names = [f for f in found if isinstance(f, str)]  # (an error row's finding is empty: NaN in the table)
    return "; ".join(dict.fromkeys(n for n in names if n))


#: What diagnosis said of a killed mutant x dtype (`named`): every killing row's finding a model's (ties
#: included), some of them, or none (unexplained, or an error row).
NAMED = ("every row named", "some rows named", "unexplained")


def named(finding: str) -> str:
    names = [n for n in finding.split("; ") if n]
    models = [n for n in names if n != "unexplained"]
    if not models:
        return NAMED[2]
    return NAMED[0] if len(models) == len(names) else NAMED[1]


def diagnosis_table(rows: list[dict]) -> list[list]:
    """Per operator class: the mutants x dtypes run kills, how many diagnosis names on every killing row, on some,
    on none, and the models it names most."""
    per = collections.OrderedDict()
    for r in rows:
        if r["outcome"] != "run" or r["detail"].startswith("does not import"):
            continue
        c = per.setdefault(r["mistake"], [collections.Counter(), collections.Counter()])
        c[0][named(r.get("finding", ""))] += 1
        for n in r.get("finding", "").split("; "):
            if n and n != "unexplained":
                c[1][n] += 1
    lines, totals = [], collections.Counter()
    for mistake, (c, names) in sorted(per.items()):
        totals += c
        top = ", ".join(f"{n} ({k})" for n, k in names.most_common(3))
        lines.append([mistake, sum(c.values()), *(c[k] for k in NAMED), top])
    lines.append(["all", sum(totals.values()), *(totals[k] for k in NAMED), ""])
    return lines


DIAGNOSIS_HEADER = ["operator class", "killed by run", *NAMED, "models named most"]


def worse(original, mutant, dtype: str) -> str:
    """The rows of `dtype` whose verdict the mutant makes worse than the original's ("family pass -> warn", ...)."""
    key = ["dtype", "family", "output"]
    base = original.set_index(key)["verdict"]
    found = []
    for r in mutant[mutant["dtype"] == dtype].itertuples(index=False):
        was = base.get((r.dtype, r.family, r.output))
        if was is not None and SEVERITY.get(r.verdict, 0) > SEVERITY.get(was, 0):
            found.append(f"{r.family} {was} -> {r.verdict}")
    return "; ".join(found)


def _count(value) -> float:
    try:
        return float(value) if value == value else 0.0
    except (TypeError, ValueError):
        return 0.0


def identical(original, mutant, kind: str, dtype: str, ex) -> bool:
    """Whether the mutant's outputs are bit-identical to the original's on every case of the default suite."""
    fmt = format_of(dtype)
    for source in sources(kind, [], None):
        fam = prepared_family(source.builtin, kind, fmt, "default", 0, True, None, TIMEOUT, ex)
        for pc in fam.prepared:
            outs = []
            for c in (original, mutant):
                try:
                    outs.append(
                        call_all(
                            c,
                            pc.inputs,
                            pc.mask,
                            pc.output_shapes,
                            fmt.dtype,
                            TIMEOUT,
                            False,
                            dict(pc.case.options) or None,
                        )[0]
                    )
                except (CandidateError, CandidateSkip) as exc:
                    outs.append(type(exc).__name__)
            if not _same(*outs):
                return False
    return True


def _same(a, b) -> bool:
    """Bit for bit the same outputs, every NaN counted as the one NaN (its sign and payload say nothing)."""
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return all(x.shape == y.shape and _bits(x) == _bits(y) for x, y in zip(a, b))


def _bits(x) -> bytes:
    x = np.array(x)
    nan = np.isnan(x.astype(np.float64))
    x[nan] = np.nan
    return x.tobytes() + nan.tobytes()


def hunt_kills(original, mutant, dtype: str, budget: float, ex) -> str | None:
    """The hunt's failure of the mutant where the original does not fail on the same input, or None."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (found,) = hunt([mutant], dtypes=(dtype,), budget=budget, corpus=None, isolation="none", timeout=10.0)
    if not found.failed or found.inputs is None:
        return None
    policy = Policy()
    verdict, *_ = judge_input(
        original, original.kind, format_of(dtype), found.inputs, found.mask, found.options, policy, 10.0, ex
    )
    if policy.failed([verdict]):
        return None
    shape = " ".join(f"{n}{tuple(np.shape(a))}" for n, a in found.inputs.items())
    return f"{shape} {found.called_with}: {found.reason[:120]}".strip()


def chosen(args) -> list:
    kinds = args.kinds.split(",") if args.kinds else None
    for kind in kinds or ():
        _kinds.get(kind)  # (an unknown kind: one line)
    found = [b for b in builtins() if kinds is None or b.kind in kinds]
    everything = list(every_mutant(found))
    if args.mutants:
        named = set(args.mutants.split(","))
        everything = [m for m in everything if m.name in named]
    if args.limit:
        per = collections.defaultdict(list)
        for m in everything:
            per[m.builtin].append(m)
        everything = [m for ms in per.values() for m in ms[: args.limit]]
    if args.sample:  # N per kind: attention alone has most of the mutants
        rng, picked = random.Random(args.seed), []
        for kind in dict.fromkeys(m.kind for m in everything):
            mine = [i for i, m in enumerate(everything) if m.kind == kind]
            picked += rng.sample(mine, min(args.sample, len(mine)))
        everything = [everything[i] for i in sorted(picked)]
    return everything


def table(rows: list[dict]) -> list[list]:
    """Per kind and dtype: mutants, killed by run, by the hunt only, by neither, equivalent, run's share."""
    counts = collections.OrderedDict()
    for r in rows:
        counts.setdefault((r["kind"], r["dtype"]), collections.Counter())[r["outcome"]] += 1
    out = []
    totals = collections.Counter()
    for (kind, dtype), c in counts.items():
        totals += c
        out.append([kind, dtype, *_line(c)])
    out.append(["all", "", *_line(totals)])
    return out


def _line(c) -> list:
    n = sum(c.values())
    live = n - c["equivalent"]
    share = f"{100 * c['run'] / live:.0f}%" if live else "-"
    return [n, c["run"], c["hunt"], c["worse"], c["same"], c["equivalent"], share]


HEADER = [
    "kind",
    "dtype",
    "mutants",
    "killed by run",
    "by the hunt only",
    "by neither: a verdict worse",
    "by neither: verdicts kept",
    "equivalent",
    "run / non-equivalent",
]


def markdown(lines: list[list], header=HEADER) -> str:
    text = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    text += ["| " + " | ".join(str(v) for v in line) + " |" for line in lines]
    return "\n".join(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", help="comma-separated kinds (default: every kind)")
    parser.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated dtypes (default: run's four)")
    parser.add_argument("--mutants", help="comma-separated mutant names (as printed) to run again")
    parser.add_argument("--limit", type=int, help="at most N mutants per built-in (the first N)")
    parser.add_argument("--sample", type=int, help="a seeded sample of N mutants per kind")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget", type=float, default=8.0, help="the hunt's seconds per surviving mutant x dtype")
    parser.add_argument("--no-hunt", action="store_true", help="run only (survivors are then 'neither' or equivalent)")
    parser.add_argument(
        "--write",
        nargs="?",
        const="forward",
        help="write the table to docs/mutation.md, between the markers of this name (default: forward)",
    )
    parser.add_argument("--csv", help="write every mutant's outcome to this CSV file")
    parser.add_argument("--from-csv", help="no run: the table of a CSV an earlier run wrote (with --write, written)")
    args = parser.parse_args()
    if args.from_csv:
        with open(args.from_csv, newline="") as f:
            rows = list(csv.DictReader(f))
        print(both(rows))
        if args.write:
            count = len({r["mutant"] for r in rows})
            _write(both(rows), args, count, sum(1 for _ in every_mutant(builtins())))
        return
    try:
        mutants = chosen(args)
    except ValueError as exc:
        sys.exit(f"mutation: {exc}")
    dtypes = tuple(args.dtypes.split(","))
    total = sum(1 for _ in every_mutant(builtins()))
    print(
        f"{len(mutants)} mutants of {total} ({len({m.builtin for m in mutants})} built-ins), dtypes {', '.join(dtypes)}"
    )
    by_name = {b.name: b for b in builtins()}
    originals, rows, ex = {}, [], InProcess()
    spent = []
    for i, m in enumerate(mutants):
        start = time.perf_counter()
        original = by_name[m.builtin]
        if m.builtin not in originals:
            originals[m.builtin] = audited(original, dtypes)
        try:
            candidate = m.candidate()
        except Exception as exc:  # a mistake that stops the module importing: every call of it would fail
            kills = {d: f"does not import: {type(exc).__name__}" for d in dtypes}
            candidate = None
        else:
            mine = audited(candidate, dtypes)
            kills = run_kills(originals[m.builtin], mine)
        for d in dtypes:
            outcome, detail = ("run", kills[d]) if kills.get(d) else (None, "")
            if outcome is None and not args.no_hunt:
                found = hunt_kills(original, candidate, d, args.budget, ex)
                outcome, detail = ("hunt", found) if found else (None, "")
            if outcome is None and identical(original, candidate, m.kind, d, ex):
                outcome, detail = "equivalent", _why(m, d)
            elif outcome is None:
                detail = worse(originals[m.builtin], mine, d)
                outcome = "worse" if detail else "same"
            finding = findings(originals[m.builtin], mine, d) if outcome == "run" and candidate else ""
            rows.append(
                {"mutant": m.name, "builtin": m.builtin, "kind": m.kind, "dtype": d, "mistake": m.mistake}
                | {"label": m.label, "outcome": outcome, "detail": detail, "finding": finding}
            )
        spent.append(time.perf_counter() - start)
        marks = "".join(r["outcome"][0] for r in rows[-len(dtypes) :])
        print(f"[{i + 1}/{len(mutants)}] {spent[-1]:5.1f} s {marks} {m.name}: {m.label}", flush=True)
    print()
    print(both(rows))
    survivors = [r for r in rows if r["outcome"] in ("hunt", "worse", "same")]
    if survivors:
        print("\nsurvivors of run:")
        for r in survivors:
            print(f"  {r['outcome']:8s} {r['dtype']:8s} {r['mutant']}: {r['label']}  {r['detail']}")
    mean = sum(spent) / max(len(spent), 1)
    print(
        f"\n{mean:.1f} s per mutant (all its dtypes, its hunts) on average; the full set of {total} would take about "
        f"{mean * total / 3600:.1f} h here"
    )
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    if args.write:
        _write(both(rows), args, len(mutants), total)


def both(rows: list[dict]) -> str:
    """The detection table, then what diagnosis said of the mutants run killed."""
    diagnosed = diagnosis_table(rows)
    return (
        markdown(table(rows))
        + "\n\nWhat diagnosis said of the mutants x dtypes run killed (their killing rows' findings):\n\n"
        + markdown(diagnosed, DIAGNOSIS_HEADER)
    )


def _why(m, dtype: str) -> str:
    if m.mistake == "cast dropped" and dtype in ("float32", "float64"):
        return "the cast is to the dtype itself here"
    return ""


def _write(text: str, args, count: int, total: int) -> None:
    path = ROOT / "docs" / "mutation.md"
    doc = path.read_text(encoding="utf-8")
    begin, end = f"<!-- mutation table {args.write}: begin -->", f"<!-- mutation table {args.write}: end -->"
    if begin not in doc or end not in doc:
        sys.exit(f"mutation: docs/mutation.md has no markers {begin} ... {end}")
    head, _, rest = doc.partition(begin)
    _, _, tail = rest.partition(end)
    what = (
        f"`python benchmarks/mutation.py{' --kinds ' + args.kinds if args.kinds else ''} --dtypes {args.dtypes}"
        f"{f' --sample {args.sample} --seed {args.seed}' if args.sample else ''}"
        f"{' --no-hunt' if args.no_hunt else f' --budget {args.budget:g}'}`"
    )
    if args.from_csv:
        what = "`python benchmarks/mutation.py --from-csv` of a run's CSV"
    what += f": {count} mutants of {total}"  # (what they cost is printed: a timing goes to docs/benchmarks.md)
    path.write_text(f"{head}{begin}\n{what}\n\n{text}\n{end}{tail}", encoding="utf-8")


if __name__ == "__main__":
    main()
