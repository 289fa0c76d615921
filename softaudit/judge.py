"""Judge: a candidate's outputs on a family measured against the prepared references (errors, events, invariants),
judged by the policy (pass / warn / fail, in plain words with the known fix), and written as the family's rows.

Judging reads outputs; it never calls a candidate: the calls, the invariants' and the leak probe's included, are
the execute step's (softaudit/execute/), whose outcome (outputs, or the error or skip that stopped them) is what
`unit` judges. `settle` applies the rules that look across a candidate's families in one dtype.

(Longer than the house's 400 lines: a unit's judging, from its measures to its verdict, cause and rows, is one path read
top to bottom, and `settle` is its last step across a candidate's families.)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable

import numpy as np

from . import approximations, causes, diagnosis, invariants, kinds
from .adapters import Candidate, CandidateError, CandidateSkip
from .execute import NOT_AGAIN, Called, TimedOut
from .metrics import Tally, measure
from .policy import Policy, Reason
from .reference import Format, format_of
from .reproducibility import Moved
from .results import MEASURES, WorstInput
from .worst import element_ulp, row_inputs


@dataclasses.dataclass
class Measured:
    """One output's measures over a family: the tally, whether every output was NaN where something is defined
    (None when nothing is), one record per case (for the plots), each case's own tally, and what moved between
    runs and batches (softaudit/reproducibility.py)."""

    tally: Tally
    all_nan: bool | None
    per_case: list
    parts: list
    moved: Moved = dataclasses.field(default_factory=Moved)
    convention: str = ""  # which neighbouring convention a far output matches (Kind.conventions), if one does
    outputs: dict = dataclasses.field(default_factory=dict)  # case index -> the case's outputs (all of the kind's)


@dataclasses.dataclass
class UnitResult:
    """A candidate's rows on one family in one dtype (one per output of its kind), with what the report needs
    beside them: the worst inputs, per-case records, whether each output was NaN everywhere, and whether the
    candidate ran past its time limit (its later families in this dtype are then not called)."""

    rows: list
    worst: dict = dataclasses.field(default_factory=dict)
    case_rows: list = dataclasses.field(default_factory=list)
    all_nan: list = dataclasses.field(default_factory=list)
    timed_out: bool = False
    tallies: list = dataclasses.field(default_factory=list)  # each output's measures, when the calls ran
    heads: list = dataclasses.field(default_factory=list)  # the rows' columns known before any call
    frameworks: dict = dataclasses.field(default_factory=dict)  # loaded where its calls ran (Executor.frameworks)

    def not_again(self) -> UnitResult:
        """These rows as they are when the candidate is not called (it ran past its time limit earlier)."""
        return UnitResult(
            [row | {"verdict": "error", "cause": "error", "note": NOT_AGAIN} for row in self.heads],
            timed_out=True,
            heads=self.heads,
        )


def unit(
    candidate: Candidate,
    fmt: Format,
    family: str,
    fam,
    called: Iterable[Called],
    policy: Policy,
    recipe: tuple,
    diagnose: bool = True,
) -> UnitResult:
    """One candidate in one dtype on one prepared family (softaudit.prepare.PreparedFamily), from its calls: its
    rows, one per output of its kind (`head_rows`). recipe: (suite, seed, corpus), which regenerate a case. A
    CandidateError or CandidateSkip from the calls is an error or skip row. diagnose=False: no bug model is run (the
    hunt's search, which needs the verdict only; its corpus, audited by `run`, gets the findings)."""
    heads = head_rows(candidate, fmt, family, fam, policy)
    try:
        lines = [
            policy.line(_format(fam, i, fmt), row["plain_cond_err"], candidate.kind) for i, row in enumerate(heads)
        ]
        seconds, note, measured = measure_calls(candidate.kind, called, lines)
    except CandidateError as exc:
        timed_out = isinstance(exc, TimedOut) or str(exc) == NOT_AGAIN
        return UnitResult(
            [row | {"verdict": "error", "cause": "error", "note": str(exc)} for row in heads],
            timed_out=timed_out,
            heads=heads,
        )
    except CandidateSkip as exc:
        return UnitResult([row | {"verdict": "skip", "cause": "skip", "note": str(exc)} for row in heads], heads=heads)
    result = UnitResult([], tallies=[m.tally for m in measured], heads=heads)
    failed = dict.fromkeys(f"{c.name} could not run: {c.error}" for c in fam.comparisons if c.error)
    entry = kinds.get(candidate.kind)
    declared = entry.judged_against(candidate.conventions, [pc.case.options for pc in fam.prepared])
    bounds = approximations.bounds(candidate, fmt, fam)
    for index, (row, m) in enumerate(zip(heads, measured)):
        pcs = [pc.output(index) for pc in fam.prepared]
        own = _format(fam, index, fmt)  # (an output measured in a format of its own: Kind.formats)
        tally, output = m.tally, row["output"]
        if m.all_nan is not None:
            result.all_nan.append(m.all_nan)
        which = {"candidate": candidate.name, "kind": candidate.kind, "dtype": fmt.name, "family": family}
        result.case_rows += [which | {"output": output} | c for c in m.per_case]
        record = None if tally.worst is None else _worst_record(candidate, own, pcs, tally, recipe, family, output, fmt)
        if record is not None:
            result.worst[record.key] = record
        best = fam.practice(index)
        approximation = (
            None if bounds is None else approximations.within(pcs, measured[0].outputs, index, lines[index], bounds)
        )
        verdict, cause, text, pattern = _verdict(
            candidate.kind, own, pcs, tally, record, policy, row["plain_cond_err"], best, m.moved, approximation
        )
        finding, fix, why = (
            _finding(candidate.kind, own, fam, measured[0].outputs, index, row, verdict, cause)
            if diagnose
            else ("", "", "")
        )
        if finding == diagnosis.UNEXPLAINED and m.convention:  # (the neighbouring convention's exact result is it)
            finding, fix, why = diagnosis.OTHER_CONVENTION, diagnosis.CONVENTION_FIX, ""
        if finding not in ("", diagnosis.UNEXPLAINED) and not diagnosis.ambiguous(finding):
            # (one model says what happened: no guess beside it, and its cause where it names one)
            text = _without_guesses(text, pattern, record)
            cause = diagnosis.cause_of(candidate.kind, finding) or cause
            if verdict == "warn" and cause == "mask_leak" and policy.fail_on_mask_leak:
                verdict, text = "fail", f"{text}; {LEAK_SHOWN}"
        if verdict == "warn" and m.convention:
            verdict, text = "fail", f"{text}; {OTHER_PROBLEM}"
        plain = fam.plain[index] if fam.plain else None
        judged = {
            "seconds": seconds,
            "verdict": verdict,
            "cause": cause,
            "finding": finding,
            "fix": fix,
            "note": "; ".join(
                filter(
                    None,
                    [
                        why,
                        note,
                        *failed,
                        declared,
                        entry.explains(candidate.conventions, row["plain_cond_err"], tally.max_cond_err)
                        if tally.elements
                        else "",
                        text,
                        m.convention,
                        m.moved.note(policy.require),
                    ],
                )
            ),
            "fa_ratio": _fa_ratio(m.parts, plain),
            "worst_scale": record.scale if record and tally.elements else math.nan,
            "fail_above": tally.worst_line if tally.elements else row["fail_above"],
        }
        result.rows.append(row | _row(tally) | m.moved.columns() | judged)
    if fam.undecided:  # (the cases measured are judged above; these could not be, so the row is an error)
        said = undecided(fam.undecided, family, recipe)
        result.rows = [
            r | {"verdict": "error", "cause": "error", "note": "; ".join(filter(None, [said, r["note"]]))}
            for r in result.rows
        ]
    return result


def _format(fam, index: int, fmt: Format) -> Format:
    """The format output `index` of the family's cases is measured in (`Prepared.output_format`)."""
    return fam.prepared[0].output_format(index) if fam.prepared else fmt


#: Why a warn a leak model explains fails (docs/policy.md, rule 3): a leak is the defect, whatever its size.
LEAK_SHOWN = (
    "a leak onto masked lanes fails at any size, as a mask leak does (its model reproduces the output, and the output "
    "has no entry per masked lane to count)"
)


#: Why a warn another convention's exact result reproduces fails (docs/policy.md, rule 9).
OTHER_PROBLEM = "another convention's exact result is the output: it computes another problem, which fails at any size"


def _without_guesses(text: str, pattern: str, record) -> str:
    """A note without what the input pattern and the worst element's band suggest happened (causes.diagnose,
    causes.classify): once a bug model reproduces the output, they would only compete with it."""
    if pattern:
        text = text.replace(f": {pattern}", "", 1)
    if record is not None and record.explanation:
        text = text.replace(f"; worst element: {record.explanation}", "", 1)
    return text


def _finding(kind, fmt, fam, outputs, index, row, verdict, cause) -> tuple[str, str, str]:
    """(finding, fix, the note's sentence) of a judged row: a warn or fail is diagnosed by the kind's bug models
    (softaudit/diagnosis.py) on the cases that show its error most, until one model reproduces the output on one;
    what the reruns measured (a nondeterministic or batch-variant row) is its own finding, with its known fix."""
    if verdict not in ("warn", "fail"):
        return "", "", ""
    if cause in (*diagnosis.MEASURED, approximations.APPROXIMATION):
        return cause, causes.fix(cause, kind), ""
    try:
        return _diagnosed(kind, fmt, fam, outputs, index, row)
    except Exception as exc:  # (the diagnosis is softaudit's own: its failure names no cause and loses no row)
        return diagnosis.UNEXPLAINED, "", f"unexplained (the diagnosis raised {type(exc).__name__}: {exc})"


def _diagnosed(kind, fmt, fam, outputs, index, row) -> tuple[str, str, str]:
    found = None
    cases = {pc.case_in_family: pc for pc in fam.prepared}  # (a case the reference could not decide is left out)
    for case in diagnosis.worst_cases(cases, outputs, index):
        tried = diagnosis.diagnose(kind, fmt, cases[case], outputs[case], index, row["fail_above"])
        if tried.name != diagnosis.UNEXPLAINED and not diagnosis.ambiguous(tried.name):
            return tried.name, tried.fix, tried.text
        if found is None or (found.name == diagnosis.UNEXPLAINED and tried.name != diagnosis.UNEXPLAINED):
            found = tried  # (the first case's description where no model explains any; else the first tie)
    if found is None:
        return diagnosis.UNEXPLAINED, "", ""
    return found.name, found.fix, found.text


def undecided(cases: list, family: str, recipe: tuple) -> str:
    """What a row says of its family's cases whose exact result could not be decided (PreparedFamily.undecided):
    each case by its index and description, with what makes it again."""
    suite, seed, _ = recipe
    listed = "; ".join(f"case {index} ({description}): {why}" for index, description, why in cases)
    again = f"suite {suite!r}, seed {seed}" if not family.startswith("file:") and family != "corpus" else "its file"
    return f"the reference could not decide {family}'s {listed}; left out of the measures (made again by {again})"


def head_rows(candidate: Candidate, fmt: Format, family: str, fam, policy: Policy) -> list[dict]:
    """The columns of a unit's rows known before any call: which row it is, the family's size and the bounds the
    comparisons set, one row per output of the kind (the `output` column names it where the kind has several)."""
    outputs = kinds.get(candidate.kind).outputs
    heads = []
    for index, name in enumerate(outputs if len(outputs) > 1 else ("",)):
        plain, best = fam.plain_cond(index), fam.best_ulp(index)
        heads.append(
            {
                "candidate": candidate.name,
                "kind": candidate.kind,
                "dtype": fmt.name,
                "family": family,
                "output": name,
                "cases": len(fam.prepared),
                "sampled": "",
                "plain_cond_err": plain,
                "best_ulp": best,
                # (the measured line; once measured, the line at the worst element: `unit`)
                "fail_above": policy.fail_above(_format(fam, index, fmt), plain, candidate.kind),
                "warn_above": policy.warn_above(best),
            }
        )
    return heads


def settle(results: list[UnitResult]) -> list[UnitResult]:
    """A candidate's units in one dtype, in family order, after the rules that look across them: a candidate that
    ran past its time limit is not called again in that dtype (its later families say so, whatever order they ran
    in), and one that returned NaN on every family gets error rows rather than verdicts (skip rows stay)."""
    settled, stopped = [], False
    for result in results:
        settled.append(result.not_again() if stopped else result)
        stopped = stopped or result.timed_out
    flags = [flag for result in settled for flag in result.all_nan]
    if flags and all(flags):
        for result in settled:
            # (the NaN rule's fix judged each row alone: the row max is not what NaN everywhere asks for)
            result.rows = [r | _nan_everywhere(r["dtype"]) if r["verdict"] != "skip" else r for r in result.rows]
    return settled


def _nan_everywhere(dtype: str) -> dict:
    note, fix = causes.nan_everywhere(format_of(dtype))
    return {"verdict": "error", "cause": "error", "note": note, "fix": fix}


def measure_calls(kind_name: str, called: Iterable[Called], lines=None) -> tuple[float, str, list[Measured]]:
    """A family's calls measured: the seconds spent in the candidate's own calls, its notes, and one Measured per
    output of its kind (each output against its own reference; the invariants and the leak probe on the first).
    lines: per output, (fail_above, factor), what its fail line is drawn from (metrics.fail_line; None: none)."""
    kind = kinds.get(kind_name)
    seconds, notes = 0.0, set()
    measured = [Measured(Tally(), True, [], []) for _ in kind.outputs]
    anything = [False] * len(kind.outputs)  # something is defined, on some case
    for done in called:
        pc = done.pc
        seconds += done.seconds
        notes.add(done.note)
        measured[0].outputs[pc.case_in_family] = done.outputs
        for index, (m, y) in enumerate(zip(measured, done.outputs)):
            view = pc.output(index)
            line = None if lines is None else lines[index]
            part = measure(view.basis, y, case_index=pc.case_in_family, line=line)
            defined = ~np.asarray(view.reference.undefined)
            if defined.any():
                anything[index] = True
                m.all_nan = m.all_nan and y.size > 0 and bool(np.isnan(y).all())  # (ml_dtypes have isnan too)
            if index == 0 and pc.probes is not None:
                part.invariants = invariants.check(kind_name, pc.probes, y, done.probed, part.max_ulp)
            if done.reran:
                rerun = pc.reruns.compare(index, y, done.reran)
                m.moved.merge(rerun)
                if done.split:
                    m.moved.merge(pc.reruns.compare_splits(index, y, done.split, rerun.repeat_ulp))
            if index == 0 and done.moved is not None:
                unaffected = pc.leak_probe[1]
                a, b = y.astype(np.float64)[..., unaffected, :], done.moved.astype(np.float64)[..., unaffected, :]
                part.mask_leak = int((~((a == b) | (np.isnan(a) & np.isnan(b)))).sum())
            if kind.conventions is not None and not m.convention and _far(part):
                m.convention = kind.conventions(kind, view, y)
            m.tally.merge(part)
            m.parts.append(part)
            compared = part.elements > 0
            m.per_case.append(
                {
                    "case": pc.case.description,
                    "size": int(y.size),
                    "elements": part.elements,
                    "max_cond_err": part.max_cond_err if compared else math.nan,
                    "max_ulp": part.max_ulp if compared else math.nan,
                    "mean_ulp": part.mean_ulp if compared else math.nan,
                    "nonfinite": part.nan + part.overflow + part.wrong_inf,
                    "events": part.nan + part.overflow + part.wrong_inf + part.mask_leak,
                    **pc.case.params,
                }
            )
    for m, any_defined in zip(measured, anything):
        m.all_nan = m.all_nan if any_defined else None
    return seconds, "; ".join(sorted(n for n in notes if n)), measured


#: A case whose output is this far from its reference (in units of the conditioning) is checked against the
#: neighbouring conventions (`Kind.conventions`): no sound algorithm reads past 6x (docs/policy.md, "The floor").
CONVENTION_CHECK = 8.0


def _far(part) -> bool:
    return part.nan > 0 or part.mask_leak > 0 or (part.elements > 0 and part.max_cond_err > CONVENTION_CHECK)


def _verdict(
    kind, fmt, pcs, tally: Tally, record, policy: Policy, plain, best, moved: Moved, approximation=None
) -> tuple[str, str, str, str]:
    """(verdict, cause, note, pattern) of one row: the rules it broke, in plain words, and the input pattern the
    note gives for a NaN or inf ("" for none). No fix: a fix is a bug model's, named once the model reproduces the
    output (`_finding`). best: best practice's Comparison on the family (None: none ran). approximation: (within,
    size, words) of a declared approximation (`approximations.within`), or None."""
    if best is None or best.error:
        reasons = policy.judge(kind, fmt, tally, plain, None, moved=moved)
    else:
        reasons = policy.judge(
            kind,
            fmt,
            tally,
            plain,
            best.max_ulp,
            best_cond=best.max_cond,
            best_flushed=best.flushed,
            best_zeros=best.underflow - best.flushed,
            moved=moved,
        )
    if approximation is not None:
        reasons = approximations.judged(reasons, *approximation)
    if not tally.elements and not reasons and not _undefined_rows_judged(pcs):
        return "error", "nothing_compared", _nothing_compared(pcs, fmt), ""
    if not reasons:
        return "pass", "", "", ""
    first = reasons[0]
    cause = record.cause if first.rule in ("defect", "below_best", "sum") and record is not None else first.rule
    if first.rule == "flushed" and record is not None and record.cause in _LOST_AS:
        cause = record.cause  # (the zeros' cause: an overflowed sum or an absorbed log, not a flush)
    if first.rule == "below_best" and _flushes_only(tally, record):
        cause = "flushed"
    absorbed = first.rule == "below_best" and _absorbed(kind, tally, record)
    if absorbed:
        cause = "absorbed"
    why = _event_why(kind, fmt, pcs, tally) if first.rule in ("nan", "overflow") else ""
    texts = list(dict.fromkeys(_explain(r, tally, record, why) for r in reasons))
    worst = f"; worst element: {record.explanation}" if record is not None else ""
    texts = [t.replace(worst, "") if worst and worst in t and i else t for i, t in enumerate(texts)]
    if absorbed and tally.underflow:
        zeros = tally.underflow
        texts.append(
            f"{zeros} {'result' if zeros == 1 else 'results'} came out 0 where the exact result is not, which "
            "set the ULP error: a log of a sum that rounds to 1"
        )
    return policy.verdict(reasons), cause, "; ".join(texts), why


def _event_why(kind, fmt, pcs, tally: Tally) -> str:
    """The input pattern behind the first NaN or inf, in words (causes.diagnose; its name chose a fix before the bug
    models did, and is not read here)."""
    if tally.event_at is None:
        return ""
    case, flat = tally.event_at
    pc = _case(pcs, case)
    inputs, mask = row_inputs(kind, pc, np.unravel_index(flat, pc.output_shape))
    return causes.diagnose(kind, fmt, inputs, mask)[0]


#: Worst elements whose zero explains the row's subnormal zeros too (every output of an overflowed sum is 0; a log
#: kind's subnormal results lie below u, where a log of a sum that rounds to 1 gives 0): not a flush.
_LOST_AS = {"sum_overflow": "an overflowed sum", "absorbed": "a log of a sum that rounds to 1"}


def _explain(reason: Reason, tally: Tally, record, why: str) -> str:
    """A reason's text, with what explains it: the input pattern behind a NaN, the worst element's cause."""
    if reason.rule in ("nan", "overflow"):
        return f"{reason.text}: {why}" if why else reason.text
    if reason.rule == "below_best" and _flushes_only(tally, record):
        return f"{reason.text}, at subnormal results that came out 0"
    if reason.rule in ("defect", "below_best", "sum") and record is not None:
        return f"{reason.text}; worst element: {record.explanation}"
    if reason.rule == "flushed" and record is not None and record.cause in _LOST_AS:
        results = "result" if tally.flushed == 1 else "results"
        return (
            f"{tally.flushed} subnormal {results} came out 0 (as the worst element did: {_LOST_AS[record.cause]}, "
            "not a flush)"
        )
    return reason.text


def _absorbed(kind: str, tally: Tally, record) -> bool:
    """Whether a log kind's warning is its zeros: an output of x_i - m - log s (or m + log s) is 0 where the exact
    result is not only where log s rounds to 0, a sum that rounds to 1, and each such 0 is far more ulps off than
    any nonzero output, so it is what crossed best practice, whichever element is worst against the conditioning
    (the rounding of s costs it about 1 u of its scale there)."""
    zeros = tally.underflow + tally.flushed
    return "absorbed" in kinds.get(kind).causes and zeros > 0 and (record is None or record.cause != "wrong_terms")


def _flushes_only(tally: Tally, record) -> bool:
    """Whether a row's ULP error is all in subnormal results that came out 0: the measures judge those as a flush
    (their conditioning-scaled error is 0), so the worst element is within a correct rounding and says nothing of
    the ULP error."""
    return tally.flushed > 0 and (record is None or (record.cond_err <= 0.5 and record.cause == "rounding"))


def _undefined_rows_judged(pcs) -> bool:
    """Whether any case has rows the rules on undefined rows judge (a NaN to propagate, nothing kept)."""
    return any(
        (b.kept_nan_rows is not None and b.kept_nan_rows.any()) or (b.nothing_kept is not None and b.nothing_kept.any())
        for b in (pc.basis for pc in pcs)
    )


def _nothing_compared(pcs, fmt) -> str:
    """Why a row had nothing to judge: usually inputs that overflow the dtype (every row is then undefined)."""
    values = sum(a.size for pc in pcs for a in pc.inputs.values())
    overflowed = sum(pc.overflowed for pc in pcs)
    why = f": {overflowed} of {values} input values overflow {fmt.name}" if overflowed else ""
    return f"nothing could be compared (every row is undefined in {fmt.name}{why})"


def _fa_ratio(parts: list[Tally], plain) -> float:
    """FlashAttention's test ratio, max over cases of max|y - r| / max|plain - r| (NaN where none applies)."""
    if plain is None:
        return math.nan
    ratios = []
    for part, plain_abs in zip(parts, plain.case_abs):
        if part.elements and math.isfinite(plain_abs):
            ratios.append(
                part.max_abs_err / plain_abs if plain_abs > 0 else (0.0 if part.max_abs_err == 0 else math.inf)
            )
    return max(ratios, default=math.nan)


def _worst_record(
    candidate: Candidate, fmt: Format, pcs: list, tally: Tally, recipe, family: str, output: str, audited=None
) -> WorstInput:
    cond, case, flat, value, common = tally.worst
    pc = _case(pcs, case)
    b = pc.basis
    position = [int(i) for i in np.unravel_index(flat, pc.output_shape)]
    exact = float(b.hi.reshape(-1)[flat]) + (0.0 if b.lo is None else float(b.lo.reshape(-1)[flat]))
    rounded = float(b.rounded.reshape(-1)[flat])
    inv = float(b.inv_scale.reshape(-1)[flat])
    scale = 1 / inv if inv else math.nan
    name, axis = kinds.get(candidate.kind).reduction
    length = pc.inputs[name].shape[axis]
    inputs, mask = row_inputs(candidate.kind, pc, tuple(position))
    row_mask = mask if mask is not None and np.ndim(mask) == 1 else None  # (one row's: not a whole case's)
    # (the budget can change the cause only past BEYOND_ROUNDING u of the scale, or for a 0: elsewhere T = 0 reads
    # the same, and most rows are spared computing it)
    needed = math.isfinite(value) and (value == 0 or cond > causes.BEYOND_ROUNDING)
    budget = causes.budget_at(candidate.kind, pc, flat) if needed else (0.0, 0.0)
    cause, explanation = causes.classify(
        candidate.kind,
        fmt,
        value,
        exact,
        rounded,
        scale,
        length,
        causes.exp_sum(inputs, mask),
        budget=budget,
        mask_row=row_mask,
        common=common,
    )
    if cause == "wrong_terms":
        explanation = "; ".join(filter(None, [explanation, causes.unattending(output, pc.mask)]))
    suite, seed, corpus = recipe
    where = (
        {"case_file": pc.case.description}
        if family.startswith("file:")
        else {"corpus": str(corpus)}
        if family == "corpus"
        else {}
    )
    arrays = dict(pc.inputs) | ({} if pc.mask is None else {"mask": pc.mask})
    small = sum(np.size(a) for a in arrays.values()) <= WorstInput.MAX_VALUES
    return WorstInput(
        candidate.name,
        candidate.source,
        candidate.kind,
        (audited or fmt).name,  # (the row's dtype: an output of a format of its own is keyed by the audited one)
        family,
        pc.case.description,
        pc.case_in_family,
        position,
        cond,
        element_ulp(pc, flat, value),
        scale,
        value,
        rounded,
        cause,
        explanation,
        {"suite": suite, "seed": seed, "family": family, "case_index": pc.case_in_family} | where,
        arrays if small else None,
        candidate.device,
        output,
    )


def _case(pcs: list, index: int):
    """The case of `pcs` whose index in its family is `index` (a family's undecided cases are left out of it)."""
    return (
        pcs[index]
        if index < len(pcs) and pcs[index].case_in_family == index
        else next(pc for pc in pcs if pc.case_in_family == index)
    )


def _row(t: Tally) -> dict:
    compared = t.elements > 0
    row = {
        "elements": t.elements,
        "max_cond_err": t.max_cond_err,
        "max_bound_err": t.max_bound_err,
        "max_line_err": t.max_line_err,
        "max_ulp": t.max_ulp,
        "mean_ulp": t.mean_ulp,
        "max_bits": float(np.log2(1 + t.max_ulp)),
        "correctly_rounded": t.correctly_rounded / t.elements if compared else 0.0,
        "ge2_ulp": t.ge2_ulp / t.elements if compared else 0.0,
        "max_rel_err": t.max_rel_err,
        "max_abs_err": t.max_abs_err,
        "nan": t.nan,
        "overflow": t.overflow,
        "wrong_inf": t.wrong_inf,
        "underflow": t.underflow,
        "flushed": t.flushed,
        "negative": t.negative,
        "mask_leak": t.mask_leak,
        "sum_err": t.sum_err,
        "argmax_flips": t.argmax_flips,
        "undefined_rows": t.undefined_rows,
        "nan_not_propagated": t.nan_not_propagated,
        "fully_masked": t.fully_masked_behaviour,
        "max_ulp_vsum": t.max_ulp_vsum,
        "max_normwise": t.max_normwise,
        "invariants": t.invariants_broken,
    }
    return row if compared else row | dict.fromkeys(MEASURES, math.nan)
