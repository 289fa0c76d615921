"""report.html: one self-contained page (no script, no external file): verdicts, what to fix, plots, tables,
worst inputs."""

from __future__ import annotations

import math
from html import escape
from itertools import pairwise

from ..results import summary_line
from ._files import accelerator_line, machine, platform_key, versions
from ._findings import ORDER, cell_text, families_text, interrupted_line, issues, number, verdict_matrix
from .plots import PALETTE, bar_chart, line_chart

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1260px;color:#222;padding:0 16px}
h1{font-size:24px}h2{font-size:19px;margin-top:32px;border-bottom:1px solid #ddd}h3{font-size:15px}
table{border-collapse:collapse;margin:8px 0}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}th{background:#f4f4f4}
.pass{background:#d9f2d9}.warn{background:#fdf0c4}.fail{background:#f8d0d0}.error{background:#f3c6a6}
.skip{background:#e8e8e8}.charts{display:flex;flex-wrap:wrap;gap:12px}.chart text{font-size:11px;fill:#333}
.chart .t{font-size:13px;font-weight:600}.chart .frame{fill:#fafafa;stroke:#ccc}.chart .grid{stroke:#e6e6e6}
.legend{font-size:11px}code{background:#f4f4f4;padding:1px 4px}.small{color:#666;font-size:12px}
#fix{width:100%;table-layout:fixed}#fix td{overflow-wrap:break-word}#fix th:nth-child(1){width:5%}
#fix th:nth-child(2){width:15%}#fix th:nth-child(3){width:6%}#fix th:nth-child(4){width:11%}
#fix th:nth-child(5),#fix th:nth-child(6){width:6.5%}#fix th:nth-child(7){width:31%}#fix th:nth-child(8){width:19%}
#fix td:nth-child(5),#fix td:nth-child(6),#worst td:nth-child(4),#worst td:nth-child(5){white-space:nowrap}
#worst{width:100%;table-layout:fixed}#worst td{overflow-wrap:break-word}#worst code{overflow-wrap:anywhere}
#worst th:nth-child(1){width:14%}#worst th:nth-child(2){width:6%}#worst th:nth-child(3){width:11%}
#worst th:nth-child(4),#worst th:nth-child(5){width:6%}#worst th:nth-child(6){width:22%}
#worst th:nth-child(7){width:9%}#worst th:nth-child(8){width:26%}
"""
GUARANTEE = (
    "Every error is measured against the exact result, computed with mpmath and correctly rounded to the audited "
    "dtype (to nearest, ties to even, gradual underflow, IEEE overflow). The fast path has proven error bounds and "
    "falls back to mpmath wherever they cannot decide the rounding (docs/reference.md). The verdict reads the error "
    "against the problem's conditioning: |y - exact| / (u x scale), scale = |r| + sum_k |dr/dx_k| |x_k|, the most "
    "that rounding the inputs alone can move the result (docs/metrics.md); a correctly rounded result reads at most 1."
)
_COLOR = {"pass": "#d9f2d9", "warn": "#fdf0c4", "fail": "#f8d0d0", "error": "#f3c6a6", "skip": "#e8e8e8"}


def _matrix(table) -> str:
    cells = verdict_matrix(table)
    dtypes = list(dict.fromkeys(table.dtype))
    head = "".join(f"<th>{escape(d)}</th>" for d in dtypes)
    rows = []
    for candidate in dict.fromkeys(table.candidate):
        tds = []
        for dtype in dtypes:
            verdict, counts, total = cells.get((candidate, dtype), ("", {}, 0))
            text = cell_text(verdict, counts, total) if verdict else ""
            tds.append(f'<td class="{verdict}">{escape(text)}</td>')
        rows.append(f"<tr><th>{escape(candidate)}</th>{''.join(tds)}</tr>")
    return f'<table id="verdict-matrix"><tr><th>candidate</th>{head}</tr>{"".join(rows)}</table>'


def _fix_table(table) -> str:
    found = issues(table)
    if not found:
        return "<p>Every row passed.</p>"
    body = "".join(
        f"<tr class='{g['verdict']}'><td>{g['verdict']}</td><td>{escape(g['candidate'])}</td>"
        f"<td>{escape(g['dtype'])}</td><td>{escape(families_text(g['families'], 6))}</td>"
        f"<td>{number(g['max_cond_err'])}</td><td>{number(g['max_ulp'])}</td>"
        f"<td>{_why(g)}</td><td>{escape(g['fix'])}</td></tr>"
        for g in found
    )
    return (
        "<table id='fix'><tr><th>verdict</th><th>candidate</th><th>dtype</th><th>families</th><th>error</th>"
        f"<th>max ulp</th><th>cause</th><th>fix</th></tr>{body}</table><p class='small'>error: max |y - exact| / "
        "(u x scale), the error against the problem's conditioning; fail = a defect (an event, or past both "
        "2 x every standard algorithm in the dtype and a quarter of the dtype's bits), warn = sound but below best "
        "practice (docs/policy.md).</p>"
    )


def _why(group: dict) -> str:
    """A finding's cause in one line, its whole note (measures, bounds, the worst element) a click away."""
    if group["why"] == group["note"]:
        return escape(group["note"])
    return f"{escape(group['why'])}<details><summary>detail</summary>{escape(group['note'])}</details>"


def _points(rows, param) -> dict:
    """(kind, dtype) -> candidate -> [(param value, max conditioning-scaled error over the cases with finite outputs
    (NaN if none), any case with NaN or inf outputs?)] from the per-case rows of one family, in one groupby (a groupby
    per kind x dtype is slow on the main job's report)."""
    if param not in rows:
        return {}
    # a case with NaN or inf outputs is its cross alone: the error of its finite elements would draw it as accurate
    finite = rows.max_cond_err.where(rows.nonfinite == 0)
    by_value = rows.assign(finite=finite).groupby(["kind", "dtype", "candidate", param])[["finite", "nonfinite"]].max()
    out: dict = {}  # (the candidates' order in the table)
    for kind, dtype, candidate in dict.fromkeys(zip(rows.kind.tolist(), rows.dtype.tolist(), rows.candidate.tolist())):
        out.setdefault((kind, dtype), {})[candidate] = []
    for (kind, dtype, candidate, x), error, bad in zip(by_value.index, by_value.finite, by_value.nonfinite):
        if not math.isnan(x):
            out[(kind, dtype)][candidate].append((float(x), float(error), bool(bad)))
    return {part: {k: v for k, v in series.items() if v} for part, series in out.items()}


PLOTS = (
    ("gaussian", "scale", "logit scale", "error against logit scale"),
    ("long", "n", "row length", "error against row length"),
    ("attn_gaussian", "d", "head dimension d", "error against d"),
    ("attn_long", "lk", "sequence length Lk", "error against sequence length"),
)
Y_LABEL = "error / (u x scale)"


def _plots(result) -> str:
    cases = result.cases
    points = {}  # (kind, dtype, family) -> candidate -> its points, for the plotted families
    if cases is not None and len(cases) and "family" in cases:
        for family, param, *_ in PLOTS:
            for (kind, dtype), series in _points(cases[cases.family == family], param).items():
                points[(kind, dtype, family)] = series
    blocks = []
    table = result.table
    dtypes = list(dict.fromkeys(table.dtype))
    for kind in dict.fromkeys(table.kind):
        charts = []
        # one colour per candidate in all of its kind's charts
        candidates = dict.fromkeys(table.candidate[table.kind == kind])
        colours = {c: PALETTE[i % len(PALETTE)] for i, c in enumerate(candidates)}
        for dtype in dtypes:
            for family, _, x_label, title in PLOTS:
                series = points.get((kind, dtype, family))
                if series:
                    charts.append(line_chart(f"{kind}, {dtype}: {title}", series, x_label, Y_LABEL, colours))
        if charts:
            blocks.append(f"<h3>{escape(kind)}</h3><div class='charts'>{''.join(charts)}</div>")
    if cases is not None and len(cases):
        edges = [0, 1, 2, 4, 16, 256, 2**16, math.inf]
        labels = ["<=1", "<=2", "<=4", "<=16", "<=256", "<=65536", ">65536", "NaN/inf"]
        hists = []
        for dtype, group in cases.groupby("dtype", sort=False):
            values = group.max_cond_err.astype(float)[group.nonfinite == 0]  # the others are counted as NaN/inf
            counts = [
                int(((values > lo) & (values <= hi)).sum() if lo else (values <= hi).sum())
                for lo, hi in pairwise(edges)
            ]
            counts.append(int((group.nonfinite > 0).sum()))
            hists.append(
                bar_chart(f"{dtype}: cases by error against the conditioning", labels, counts, Y_LABEL + " of a case")
            )
        blocks.append(f"<h3>Histograms</h3><div class='charts'>{''.join(hists)}</div>")
    return "".join(blocks)


def _family_tables(table) -> str:
    import pandas as pd

    out = []
    for family, cells in _family_cells(table).items():
        # candidate x dtype, each in the order it first appears in the family's rows, as pivot_table(sort=False)
        candidates = pd.Index(list(dict.fromkeys(c for c, _ in cells)), name="candidate")
        dtypes = pd.Index(list(dict.fromkeys(d for _, d in cells)), name="dtype")
        empty = (math.nan, None)  # (a candidate not run in a dtype: no error, no colour)
        view = pd.DataFrame([[cells.get((c, d), empty)[0] for d in dtypes] for c in candidates], candidates, dtypes)
        colours = pd.DataFrame(
            [[f"background-color: {_COLOR.get(cells.get((c, d), empty)[1], '')}" for d in dtypes] for c in candidates],
            candidates,
            dtypes,
        )
        styler = (
            view.style.format("{:.3g}", na_rep="-")
            .format_index(escape="html", axis=0)
            .format_index(escape="html", axis=1)
        )
        # the Styler calls this when it renders: the family's colours are bound here, not read from the loop then
        styler = styler.apply(lambda _, colours=colours: colours, axis=None)
        out.append(
            f"<h3>{escape(family)}</h3><p class='small'>error against the conditioning ('-': nothing "
            "compared); colour is the most severe verdict of its rows. A pass may carry a large error where best "
            "practice in the dtype reads as much (docs/policy.md)</p>" + styler.to_html()
        )
    return "".join(out)


def _family_cells(table) -> dict:
    """family -> {(candidate, dtype): (the cell's largest error, the most severe verdict of its rows)}, in the
    table's order: one groupby for the whole table, since two pivot_table calls per family are slow over the main
    job's many families."""
    keys = [table.family, table.candidate, table.dtype]
    errors = table.max_cond_err.groupby(keys, sort=False).max()
    ranks = table.verdict.map(ORDER.index).groupby(keys, sort=False).min()
    cells: dict = {}
    for (family, candidate, dtype), error, rank in zip(errors.index, errors, ranks):
        cells.setdefault(family, {})[(candidate, dtype)] = (error, ORDER[rank])
    return cells


def _worst(result) -> str:
    def rank(w):  # the largest error first, NaN last
        return -w.cond_err if not math.isnan(w.cond_err) else math.inf

    every = result.worst_inputs
    first = {}  # (candidate, dtype) -> the worst of its rows' worst inputs, in the table's order
    for w in every:
        if (w.candidate, w.dtype) not in first or rank(w) < rank(first[(w.candidate, w.dtype)]):
            first[(w.candidate, w.dtype)] = w
    rows = list(first.values())
    body = "".join(
        f"<tr><td>{escape(w.candidate)}</td><td>{escape(w.dtype)}</td>"
        f"<td>{escape(w.family + (f' ({w.output_name})' if w.output_name else ''))}</td>"
        f"<td>{number(w.cond_err)}</td><td>{number(w.ulp_err)}</td><td>{escape(w.explanation)}</td>"
        f"<td>{escape(str(w.case))} {escape(str(w.element))}</td><td><code>{escape(w.command())}</code></td></tr>"
        for w in rows
    )
    return (
        "<table id='worst'><tr><th>candidate</th><th>dtype</th><th>family</th><th>error</th><th>ulp</th><th>cause</th>"
        f"<th>case, element</th><th>replay</th></tr>{body}</table><p class='small'>The worst input of each "
        f"candidate x dtype: {len(rows)} of the {len(every)} rows' worst inputs. An error of inf is a case whose "
        "outputs were NaN or inf where nothing else could be compared. Every row's, its exact inputs as hex floats "
        "and its recipe are in worst.csv. Its <code>replay</code> column, as above, is the command that audits "
        "the row again on the same cases (<code>softaudit run TARGET --kind K --dtype D --family F ...</code>; empty "
        "for a candidate with no importable name); in Python, <code>softaudit.worst.replay(result.worst[key])</code> "
        "calls the candidate on the exact case and gives the same error at the same element.</p>"
    )


def _gate(comparison) -> str:
    if comparison is None:
        return ""
    items = "".join(f"<li><code>{escape(c.key)}</code>: {escape(c.what)}</li>" for c in comparison.regressions)
    head = f"{len(comparison.regressions)} regression(s)" if comparison.regressions else "No regressions"
    other = (
        ""
        if comparison.same_platform
        else (
            f" The baseline was made on another platform "
            f"({escape(comparison.platform_change)}): {len(comparison.platform)} "
            "platform difference(s), not regressions."
        )
    )
    return (
        f"<h2>Against the baseline</h2><p>{head}; {len(comparison.known)} known; "
        f"{len(comparison.improvements)} improvement(s).{other}</p><ul>{items}</ul>"
    )


def _setting(value) -> str:
    """A setting for people: '-' for none, lists joined, the policy as key=value."""
    if value is None or value == []:
        return "-"
    if isinstance(value, list | tuple):
        return ", ".join(map(str, value))
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    return str(value)


def report_html(result, comparison=None) -> str:
    """The page."""
    table = result.table
    settings = "".join(
        f"<tr><th>{escape(str(k))}</th><td>{escape(_setting(v))}</td></tr>" for k, v in result.settings.items()
    )
    env = versions() | machine() | {"platform": platform_key(result.frameworks)}
    env_rows = "".join(f"<tr><th>{escape(k)}</th><td>{escape(_setting(v))}</td></tr>" for k, v in env.items())
    banner = f"<p><strong>{escape(interrupted_line(result))}</strong></p>\n" if interrupted_line(result) else ""
    gpu = accelerator_line((w.device for w in result.worst_inputs), result.frameworks)
    names = ", ".join(dict.fromkeys(c.split(".")[0].split(":")[0] for c in table.candidate))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>softaudit report: {escape(names)}</title>
<style>{STYLE}</style></head><body>
<h1>softaudit report</h1>
{banner}<p>{escape(summary_line(table))} (candidate x dtype x family).</p>
{f"<p>{escape(gpu)}</p>" if gpu else ""}
{_gate(comparison)}
<h2>Verdicts</h2>{_matrix(table)}
<h2>What to fix</h2>{_fix_table(table)}
<h2>Plots</h2><p class='small'>Each point is a case's largest error against its conditioning; a cross at the top
marks a case with NaN or inf outputs where the exact result is finite.</p>{_plots(result)}
<h2>Families</h2>{_family_tables(table)}
<h2>Worst inputs</h2>{_worst(result)}
<h2>The reference and the measure</h2><p>{escape(GUARANTEE)}</p>
<h2>Settings</h2><table>{settings}</table><table>{env_rows}</table>
</body></html>
"""
