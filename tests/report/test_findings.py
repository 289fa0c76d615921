"""What the reports say about a table: the verdict matrix, the findings, the family tables' colours, the plots'
points and axes, and summary.md's size. Tables are written by hand here, so each expectation is counted by eye."""

import math
import re
from types import SimpleNamespace

import pandas as pd

from softaudit.report import html, markdown
from softaudit.report._findings import cell_text, issues, verdict_matrix
from softaudit.report.plots import line_chart


def _table(rows) -> pd.DataFrame:
    """rows: (candidate, family, output, verdict, max_cond_err, max_ulp, note)."""
    columns = ["candidate", "family", "output", "verdict", "max_cond_err", "max_ulp", "note"]
    table = pd.DataFrame(rows, columns=columns)
    return table.assign(kind="attention_grad", dtype="float16", cause="nan", fix="keep masked keys out")


GRAD = _table(
    [
        ("a", "f1", "dq", "pass", 0.1, 0.5, ""),
        ("a", "f1", "dk", "fail", 9.0, 900.0, "512 NaN where the exact result is defined"),
        ("a", "f1", "dv", "pass", 0.2, 0.5, ""),
        ("a", "f2", "dq", "warn", 0.3, 40.0, "max error 40 ulp"),
        ("a", "f2", "dk", "warn", 0.3, 30.0, "max error 30 ulp"),
        ("a", "f3", "dq", "pass", 0.1, 0.5, ""),
        ("a", "f4", "dq", "skip", math.nan, math.nan, "not supported"),
        ("b", "f1", "dq", "pass", 0.1, 0.5, ""),
        ("b", "f4", "dq", "skip", math.nan, math.nan, "not supported"),
        ("c", "f4", "dq", "skip", math.nan, math.nan, "not supported"),
    ]
)


def test_the_matrix_counts_families_by_their_most_severe_output_and_a_skip_does_not_hide_a_pass():
    cells = verdict_matrix(GRAD)
    assert cells[("a", "float16")] == ("fail", {"fail": 1, "warn": 1, "skip": 1, "pass": 1}, 4)
    assert cells[("b", "float16")] == ("pass", {"skip": 1, "pass": 1}, 2)
    assert cells[("c", "float16")] == ("skip", {"skip": 1}, 1)
    assert cell_text(*cells[("a", "float16")]) == "fail 1, warn 1, skip 1 of 4"
    assert cell_text(*cells[("b", "float16")]) == "pass, 1 of 2 skipped"
    assert cell_text(*cells[("c", "float16")]) == "skip"
    assert cell_text(*cells[("a", "float16")], markdown.SYMBOL).startswith("**FAIL** 1, warn 1")


def test_a_finding_lists_each_family_once_and_names_the_row_its_note_is_from():
    warn = next(g for g in issues(GRAD) if g["verdict"] == "warn")
    assert warn["families"] == ["f2"] and warn["max_ulp"] == 40.0
    assert warn["note"] == "in f2 (dq): max error 40 ulp"  # the worst by error against the conditioning, named
    fail = next(g for g in issues(GRAD) if g["verdict"] == "fail")
    assert fail["note"] == "512 NaN where the exact result is defined"  # one row: nothing to name


def test_a_family_cell_takes_the_colour_of_its_most_severe_output():
    page = html._family_tables(GRAD[GRAD.family == "f1"])
    cells = re.findall(r"#T_\w+_row(\d)_col0 \{\s*background-color: (#\w+)", page)
    assert dict(cells) == {"0": html._COLOR["fail"], "1": html._COLOR["pass"]}  # a: dk failed; b passed


def test_a_case_with_nan_outputs_is_a_cross_only_and_counted_once_in_the_histogram():
    cases = pd.DataFrame(
        {
            "kind": "softmax",
            "dtype": "float16",
            "family": "gaussian",
            "candidate": "naive",
            "scale": [1.0, 10.0, 10.0, 100.0],
            "max_cond_err": [0.4, 0.3, 5.0, 0.0],  # the NaN cases' finite elements read 0.3 and 0
            "nonfinite": [0, 3, 0, 7],
        }
    )
    series = html._points(cases, "scale")[("softmax", "float16")]  # (the rows of one kind x dtype x family)
    assert series["naive"][0] == (1.0, 0.4, False)
    assert series["naive"][1] == (10.0, 5.0, True)  # the finite case's error, and a cross for the other
    x, error, bad = series["naive"][2]
    assert x == 100.0 and math.isnan(error) and bad  # nothing but the cross: not a point at 0
    table = cases.assign(verdict="fail", output="")
    result = SimpleNamespace(cases=cases, table=table)
    histogram = html._plots(result).split("<h3>Histograms</h3>")[1]
    bars = re.findall(r'text-anchor="middle">(\d+)</text>', histogram)
    assert list(map(int, bars)) == [1, 0, 0, 1, 0, 0, 0, 2]  # <=1: 0.4; <=16: 5.0; NaN/inf: 2; 4 cases


def test_small_errors_still_show_the_tick_of_one_and_long_axes_keep_it_off_zero():
    small = line_chart("t", {"a": [(1.0, 0.1, False), (10.0, 0.3, False)]}, "x", "y")
    assert ">1</text>" in small and ">0</text>" in small
    large = line_chart("t", {"a": [(1.0, 0.5, False), (10.0, 1e12, False)]}, "x", "y")
    y_ticks = re.findall(r'text-anchor="end">([^<]+)</text>', large)
    assert y_ticks[0] == "0" and "1" not in y_ticks and "1e12" in y_ticks


def test_summary_md_stays_within_a_pull_request_comment_and_says_what_it_left_out():
    rows = [(f"cand{i}", f"f{i}", "", "warn", 1.5, 3.0, "x" * 400) for i in range(300)]
    result = SimpleNamespace(
        table=_table(rows), settings={"suite": "quick"}, worst_inputs=[], interrupted=False, frameworks={}
    )
    text = markdown.summary(result)
    assert len(text) <= markdown.LIMIT
    shown = text.count("| warn | `cand")
    assert 0 < shown < 300 and f"{300 - shown} more lines" in text
