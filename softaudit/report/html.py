"""report.html: one self-contained page (no script, no external file): verdicts, plots, tables, worst inputs."""

from __future__ import annotations

import math
from html import escape
from pathlib import Path

from ._files import machine, versions, write_atomic
from .markdown import verdict_matrix
from .plots import bar_chart, line_chart

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1260px;color:#222;padding:0 16px}
h1{font-size:24px}h2{font-size:19px;margin-top:32px;border-bottom:1px solid #ddd}h3{font-size:15px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}
th{background:#f4f4f4}.pass{background:#d9f2d9}.fail{background:#f8d0d0}.error{background:#f3e1a6}.skip{background:#e8e8e8}
.charts{display:flex;flex-wrap:wrap;gap:12px}.chart text{font-size:11px;fill:#333}.chart .t{font-size:13px;font-weight:600}
.chart .frame{fill:#fafafa;stroke:#ccc}.chart .grid{stroke:#e6e6e6}.legend{font-size:11px}
code{background:#f4f4f4;padding:1px 4px}.small{color:#666;font-size:12px}
"""
GUARANTEE = (
    "Every error is measured against the exact result, computed with mpmath and correctly rounded to the audited "
    "dtype (to nearest, ties to even, gradual underflow, IEEE overflow). The fast path has proven error bounds and "
    "falls back to mpmath wherever they cannot decide the rounding (docs/reference.md)."
)


def _matrix(table) -> str:
    cells = verdict_matrix(table)
    dtypes = list(dict.fromkeys(table.dtype))
    head = "".join(f"<th>{escape(d)}</th>" for d in dtypes)
    rows = []
    for candidate in dict.fromkeys(table.candidate):
        tds = []
        for dtype in dtypes:
            verdict, count, total = cells.get((candidate, dtype), ("", 0, 0))
            text = "pass" if verdict == "pass" else f"{verdict} {count}/{total}" if verdict else ""
            tds.append(f'<td class="{verdict}">{escape(text)}</td>')
        rows.append(f"<tr><th>{escape(candidate)}</th>{''.join(tds)}</tr>")
    return f'<table id="verdict-matrix"><tr><th>candidate</th>{head}</tr>{"".join(rows)}</table>'


def _series(cases, kind, dtype, family, param):
    """candidate -> [(param value, max ulp)] from the per-case table."""
    if cases is None or not len(cases) or param not in cases:
        return {}
    part = cases[(cases.kind == kind) & (cases.dtype == dtype) & (cases.family == family)]
    out = {}
    for candidate, group in part.groupby("candidate", sort=False):
        by_value = group.groupby(param)["max_ulp"].max()
        out[candidate] = [(float(x), float(y)) for x, y in by_value.items() if not math.isnan(x) and not math.isnan(y)]
    return {k: v for k, v in out.items() if v}


PLOTS = (
    ("gaussian", "scale", "logit scale", "ULP error against logit scale"),
    ("long", "n", "row length", "ULP error against row length"),
    ("attn_gaussian", "d", "head dimension d", "ULP error against d"),
    ("attn_long", "lk", "sequence length Lk", "ULP error against sequence length"),
)


def _plots(result) -> str:
    cases = result.cases
    blocks = []
    for kind in dict.fromkeys(result.table.kind):
        charts = []
        for dtype in dict.fromkeys(result.table.dtype):
            for family, param, x_label, title in PLOTS:
                series = _series(cases, kind, dtype, family, param)
                if series:
                    charts.append(line_chart(f"{kind}, {dtype}: {title}", series, x_label, "max ULP error"))
        if charts:
            blocks.append(f"<h3>{escape(kind)}</h3><div class='charts'>{''.join(charts)}</div>")
    if cases is not None and len(cases):
        edges = [0, 0.5, 1, 2, 4, 16, 256, math.inf]
        labels = ["<=0.5", "<=1", "<=2", "<=4", "<=16", "<=256", ">256"]
        hists = []
        for dtype, group in cases.groupby("dtype", sort=False):
            values = group.max_ulp.dropna()
            counts = [int(((values > lo) & (values <= hi)).sum() if lo else (values <= hi).sum()) for lo, hi in zip(edges, edges[1:])]
            hists.append(bar_chart(f"{dtype}: cases by max ULP error", labels, counts, "max ULP error of a case"))
        blocks.append(f"<h3>ULP error histograms</h3><div class='charts'>{''.join(hists)}</div>")
    return "".join(blocks)


def _family_tables(table) -> str:
    out = []
    for family, group in table.groupby("family", sort=False):
        view = group.pivot_table(index="candidate", columns="dtype", values="max_ulp", aggfunc="max", sort=False)
        verdicts = group.pivot_table(index="candidate", columns="dtype", values="verdict", aggfunc="first", sort=False)
        styler = view.style.format("{:.3g}", na_rep="-").format_index(escape="html", axis=0).format_index(escape="html", axis=1)
        styler = styler.apply(lambda _: verdicts.reindex_like(view).map(lambda v: f"background-color: {_COLOR.get(v, '')}"), axis=None)
        out.append(f"<h3>{escape(family)}</h3><p class='small'>max ULP error; colour is the verdict</p>" + styler.to_html())
    return "".join(out)


_COLOR = {"pass": "#d9f2d9", "fail": "#f8d0d0", "error": "#f3e1a6", "skip": "#e8e8e8"}


def _worst(result, limit: int = 40) -> str:
    rows = sorted(result.worst.values(), key=lambda w: -w.ulp_error if math.isfinite(w.ulp_error) else -math.inf)[:limit]
    body = "".join(
        f"<tr><td>{escape(w.candidate)}</td><td>{escape(w.dtype)}</td><td>{escape(w.family)}</td><td>{w.ulp_error:.3g}</td>"
        f"<td>{escape(str(w.case))}</td><td>{escape(str(w.element))}</td></tr>"
        for w in rows
    )
    return ("<table id='worst'><tr><th>candidate</th><th>dtype</th><th>family</th><th>ULP error</th><th>case</th>"
            f"<th>element</th></tr>{body}</table><p class='small'>Exact inputs, as hex floats: worst.csv.</p>")  # fmt: skip


def _gate(comparison) -> str:
    if comparison is None:
        return ""
    items = "".join(f"<li><code>{escape(c.key)}</code>: {escape(c.what)}</li>" for c in comparison.regressions)
    head = f"{len(comparison.regressions)} regression(s)" if comparison.regressions else "No regressions"
    return (f"<h2>Against the baseline</h2><p>{head}; {len(comparison.known)} known failure(s); "
            f"{len(comparison.improvements)} improvement(s).</p><ul>{items}</ul>")  # fmt: skip


def report_html(result, comparison=None) -> str:
    table = result.table
    counts = table.verdict.value_counts()
    settings = "".join(f"<tr><th>{escape(str(k))}</th><td>{escape(str(v))}</td></tr>" for k, v in result.settings.items())
    env = "".join(f"<tr><th>{escape(k)}</th><td>{escape(str(v))}</td></tr>" for k, v in (versions() | machine()).items())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>softaudit report</title><style>{STYLE}</style></head><body>
<h1>softaudit report</h1>
<p>{len(table)} rows (candidate x dtype x family): <b>{counts.get('pass', 0)}</b> pass, <b>{counts.get('fail', 0)}</b> fail,
<b>{counts.get('error', 0)}</b> error.</p>
{_gate(comparison)}
<h2>Verdicts</h2>{_matrix(table)}
<h2>Plots</h2>{_plots(result)}
<h2>Families</h2>{_family_tables(table)}
<h2>Worst inputs</h2>{_worst(result)}
<h2>The reference</h2><p>{escape(GUARANTEE)}</p>
<h2>Settings</h2><table>{settings}</table><table>{env}</table>
</body></html>
"""


def write_html(result, out: Path, comparison=None) -> Path:
    return write_atomic(out / "report.html", report_html(result, comparison))
