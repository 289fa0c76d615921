"""Production shapes by sampled rows (softaudit/sampled.py): the shape's text, the sample, the bound, and the audit's
measures checked against an independent computation (mpmath, or the candidate's own output read by hand)."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from click.testing import CliRunner

import softaudit
from softaudit import sampled
from softaudit.adapters import load_target
from softaudit.candidates import attention as builtin_attention
from softaudit.candidates import softmax as builtin_softmax
from softaudit.cli import main
from softaudit.execute import InProcess
from softaudit.policy import Policy
from softaudit.reference import format_of
from softaudit.results import WorstInput


def test_a_shape_reads_its_kind_dimensions_and_options():
    shape = softaudit.Shape.parse("attention:1x32x32768x128,kv_heads=8,causal,lq=16,scale=2")
    assert (shape.kind, shape.dims, shape.kv_heads, shape.lq, shape.causal, shape.scale) == (
        "attention",
        (1, 32, 32768, 128),
        8,
        16,
        True,
        2.0,
    )
    assert shape.text == "shape:1x32x32768x128,kv_heads=8,lq=16,causal,scale=2"
    assert softaudit.Shape.parse("softmax:8X131072").dims == (8, 131072)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("attention:8x128x64", "batch x heads x keys x d"),
        ("attention_grad:1x2x64x8", "dk and dv sum over every query"),
        ("softmax:8x0", "KIND:AxBx"),
        ("softmax", "KIND:AxBx"),
        ("sotfmax:8x8", "sotfmax"),
        ("attention:1x6x64x8,kv_heads=4", "does not divide"),
        ("attention:1x2x64x8,lq=65", "more queries than"),
        ("attention:1x2x64x8,window=3", "unknown shape option"),
        ("softmax:8x8,causal", "masked kinds"),
        ("softmax:8x8,kv_heads=2", "attention's options"),
    ],
)
def test_a_bad_shape_is_one_clear_error(text, says):
    with pytest.raises(ValueError, match=says):
        softaudit.Shape.parse(text)


def test_grouped_query_attention_is_given_as_broadcast_heads_and_causal_is_bottom_right():
    shape = softaudit.Shape.parse("attention:2x4x5x3,kv_heads=2,lq=2,causal")
    inputs, mask = shape.inputs(format_of("float16"), seed=0)
    assert inputs["q"].shape == (2, 2, 2, 2, 3)  # batch, kv heads, query heads per kv head, queries, d
    assert inputs["k"].shape == inputs["v"].shape == (2, 2, 1, 5, 3)
    assert all(a.dtype == np.float16 for a in inputs.values())
    # the last two of five positions: query 0 is position 3 (keys 0-3), query 1 position 4 (every key)
    np.testing.assert_array_equal(mask, [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])


def test_the_inputs_are_the_seeds_and_drawn_in_the_dtype():
    shape = softaudit.Shape.parse("softmax:3x1000,scale=4")
    a, _ = shape.inputs(format_of("bfloat16"), seed=5)
    b, _ = shape.inputs(format_of("bfloat16"), seed=5)
    c, _ = shape.inputs(format_of("bfloat16"), seed=6)
    assert a["x"].dtype.name == "bfloat16"
    np.testing.assert_array_equal(a["x"].astype(np.float64), b["x"].astype(np.float64))
    assert (a["x"] != c["x"]).any()
    assert 3.5 < np.std(a["x"].astype(np.float64)) < 4.5


def test_the_tile_edges_are_the_ends_then_both_sides_of_boundaries_spread_over_the_rows():
    # boundaries of 64 and 128 below 300: 64, 128, 192, 256; three pairs spread over them: the 1st, 3rd and 4th
    assert sampled.edge_rows(300, 8) == [0, 299, 63, 64, 191, 192, 255, 256]
    assert sampled.edge_rows(300, 3) == [0, 299, 63]
    assert sampled.edge_rows(40, 8) == [0, 39]


def test_each_item_gives_its_worst_rows_edges_and_distinct_random_rows():
    keys = np.zeros((3, 1000))
    keys[1, [500, 7, 999]] = [3.0, 2.0, 1.0]
    sample = sampled.choose(keys, samples=96, seed=0)
    assert sample.rows.shape == (3, 32)
    for rows, part in zip(sample.rows, sample.part):
        assert (np.diff(rows) > 0).all()  # ascending, distinct
        assert ((part == sampled.WORST).sum(), (part == sampled.EDGE).sum(), (part == sampled.RANDOM).sum()) == (
            8,
            4,
            20,
        )
    worst = set(sample.rows[1][sample.part[1] == sampled.WORST])
    assert {500, 7, 999} <= worst  # the largest keys, then equal ones in row order
    assert worst - {500, 7, 999} == {0, 1, 2, 3, 4}
    # edge_rows(1000, 12) less the worst (rows 0-7 there, all keys equal): the last row, then 63, 64 and 319
    assert set(sample.rows[0][sample.part[0] == sampled.EDGE]) == {999, 63, 64, 319}
    assert sample.describe("queries") == "96 of 3,000 queries: 24 worst-conditioned, 12 at tile edges, 60 random"
    whole = sampled.choose(np.zeros((2, 5)), samples=96, seed=0)
    assert whole.whole and whole.describe("rows") == "all 10 rows"


@pytest.mark.parametrize(("past", "n"), [(0, 1), (0, 160), (1, 10), (3, 40), (17, 200), (39, 40)])
def test_the_upper_bound_is_clopper_pearsons(past, n):
    bound = sampled.upper_bound(past, n)
    # The bound p solves P(X <= past; n, p) = 0.05, checked at 50 digits.
    with mpmath.workdps(50):
        p = mpmath.mpf(bound)
        cdf = mpmath.fsum(mpmath.binomial(n, i) * p**i * (1 - p) ** (n - i) for i in range(past + 1))
    assert abs(float(cdf) - 0.05) < 1e-9
    assert sampled.upper_bound(n, n) == 1.0


def test_the_upper_bound_matches_the_rule_of_three():
    # With nothing past the line in n rows, the 95% bound is about 3 / n (Hanley and Lippman-Hand, 1983).
    assert sampled.upper_bound(0, 300) == pytest.approx(3 / 300, rel=0.01)
    assert sampled.upper_bound(0, 160) == pytest.approx(1 - 0.05 ** (1 / 160), rel=1e-12)


def _exact_softmax(x: np.ndarray) -> list:
    with mpmath.workprec(200):
        out = []
        for row in x.astype(np.float64):
            e = [mpmath.exp(mpmath.mpf(float(v))) for v in row]
            total = mpmath.fsum(e)
            out.append([v / total for v in e])
        return out


def test_a_whole_sample_measures_what_mpmath_measures():
    """softmax.max_shifted in float16 on a 12 x 40 shape: every row is in the sample, and the table's max ULP error
    is the one mpmath gives for the candidate's own output."""
    shape = softaudit.Shape.parse("softmax:12x40,scale=3")
    fmt = format_of("float16")
    x, _ = shape.inputs(fmt, seed=0)
    y = builtin_softmax.max_shifted(x["x"]).astype(np.float64)
    exact = _exact_softmax(x["x"])
    worst = 0.0
    for i, row in enumerate(exact):
        for j, r in enumerate(row):
            spacing = 2.0 ** (max(math.frexp(float(r))[1] - 1, -14) - 10)  # float16: 10 fraction bits, emin -14
            worst = max(worst, float(abs(mpmath.mpf(y[i, j]) - r)) / spacing)
    table = softaudit.audit_shapes("softaudit.candidates.softmax:max_shifted", [shape], dtypes=["float16"]).table
    (row,) = table.to_dict("records")
    assert row["sampled"] == "all 12 rows" and row["family"] == "shape:12x40,scale=3"
    assert row["max_ulp"] == pytest.approx(worst, rel=1e-6)
    assert row["ub_past_fail"] == 0.0 and 0 < row["ub_ge2_ulp"] <= 1  # (whole: the shares themselves)


@pytest.mark.parametrize(
    ("text", "best"),
    [
        ("softmax:300x96", "softmax.max_shifted_f32acc"),
        ("log_softmax:4x75x96", "log_softmax.log1p_form_f32acc"),
        ("logsumexp:300x96", "logsumexp.log1p_form_f32acc"),
        ("masked_softmax:2x150x150,causal", "masked_softmax.where"),
        ("softmax_grad:300x96", "softmax_grad.f32acc"),
        ("logsumexp_grad:300x96", "logsumexp_grad.f32acc"),
        ("attention:1x3x200x16,kv_heads=1,causal", "attention.upcast"),
        ("attention:2x2x200x16,lq=150", "attention.upcast"),
    ],
)
def test_best_practice_reads_correctly_rounded_on_sampled_rows_of_every_kind(text, best):
    """Best practice (float32 throughout, rounded once to float16) is within an ulp everywhere: had a sampled row
    been measured against another row's reference (rows, g, the mask or a query head mixed up), the error would be
    many ulps."""
    kind, name = best.split(".")
    table = softaudit.audit_shapes(f"softaudit.candidates.{kind}:{name}", [text], dtypes=["float16"], samples=64).table
    (row,) = table.to_dict("records")
    assert row["verdict"] == "pass", row["note"]
    assert row["max_ulp"] <= 1.0 and row["elements"] > 0
    assert "of" in row["sampled"] and row["ub_past_fail"] < 0.1


def _broken_on(rows: set):
    """attention.upcast with the queries at `rows` (of every head) off by 2**-4 relative."""

    @softaudit.candidate(kind="attention", name="broken_on_rows")
    def attend(q, k, v, mask=None):
        y = builtin_attention.upcast(q, k, v, mask).astype(np.float64)
        at = sorted(rows)
        y[..., at, :] *= 1 + 2.0**-4
        return y.astype(q.dtype)

    (found,) = load_target(attend, "attention")
    return found


def test_a_defect_on_the_tile_edge_queries_is_found_and_the_bound_counts_it():
    shape = softaudit.Shape.parse("attention:1x2x512x16")
    fmt = format_of("float32")
    with InProcess() as ex:
        problem = sampled.Problem(shape, fmt, samples=64, seed=0).compare(None, ex)
        result = problem.judged(_broken_on({63, 64}), Policy(), None, ex)
    (row,) = result.rows
    assert row["verdict"] == "fail"
    assert row["max_ulp"] > 1e5  # 2**-4 relative, in float32's ulps
    # Both sides of the first tile boundary are chosen in each head, not drawn; no drawn row is past the fail line.
    for rows, part in zip(problem.sample.rows, problem.sample.part):
        assert {63, 64} <= set(rows[part != sampled.RANDOM])
    random = int(problem.sample.random.sum())
    expected = (4 + sampled.upper_bound(0, random) * (1024 - (64 - random))) / 1024
    assert row["ub_past_fail"] == pytest.approx(expected, rel=1e-12)


def test_a_defect_on_random_rows_moves_the_bound_by_the_count_drawn():
    shape = softaudit.Shape.parse("attention:1x1x2048x16")
    fmt = format_of("float32")
    with InProcess() as ex:
        problem = sampled.Problem(shape, fmt, samples=64, seed=3).compare(None, ex)
        drawn = problem.sample.rows[0][problem.sample.random[0]]
        hit = {int(r) for r in drawn[:5]}
        result = problem.judged(_broken_on(hit), Policy(), None, ex)
    (row,) = result.rows
    n = len(drawn)
    known = 64 - n
    assert row["ub_past_fail"] == pytest.approx((0 + sampled.upper_bound(5, n) * (2048 - known)) / 2048, rel=1e-12)
    assert row["ub_past_fail"] > 5 / n * (2048 - known) / 2048  # above the share seen: an upper bound


def test_the_worst_conditioned_rows_are_those_with_the_largest_scale_for_their_size(monkeypatch):
    shape = softaudit.Shape.parse("log_softmax:400x64")
    drawn = shape.inputs(format_of("float32"), seed=0)

    def inputs(self, fmt, seed):
        x = drawn[0]["x"].copy()
        x[[33, 250], :] *= 30  # the spread rows: log p of their largest entries is far below their scale
        return {"x": x}, None

    monkeypatch.setattr(sampled.Shape, "inputs", inputs)
    problem = sampled.Problem(shape, format_of("float32"), samples=64, seed=0)
    worst = problem.sample.rows[0][problem.sample.part[0] == sampled.WORST]
    keys = problem._keys()[0]
    assert {33, 250} <= set(worst)
    assert keys[33] > 10 * np.median(keys) and keys[250] > 10 * np.median(keys)


def test_a_candidate_that_ignores_the_head_grouping_fails():
    @softaudit.candidate(kind="attention", name="first_kv_head_only")
    def attend(q, k, v, mask=None):
        return builtin_attention.upcast(q, k[:, :1], v[:, :1], mask)

    table = softaudit.audit_shapes(attend, ["attention:1x4x128x8,kv_heads=2"], dtypes=["float32"]).table
    assert table.verdict.tolist() == ["fail"]


def test_a_sampled_row_is_run_again_by_its_command():
    table_result = softaudit.audit_shapes(
        "softaudit.candidates.softmax:naive", ["softmax:40x64,scale=30"], dtypes=["float16"], samples=16, seed=2
    )
    (record,) = table_result.worst_inputs
    assert isinstance(record, WorstInput)
    assert "--shape softmax:40x64,scale=30 --samples 16 --seed 2" in record.command()
    with pytest.raises(ValueError, match="sampled rows"):
        softaudit.worst.replay(record)


def test_run_audits_a_shape_and_writes_its_rows(tmp_path):
    out = tmp_path / "out"
    found = CliRunner().invoke(
        main,
        ["run", "softaudit.candidates.softmax:max_shifted_f32acc", "--shape", "softmax:300x80", "--samples", "32"]
        + ["--dtype", "float16", "--out", str(out), "--format", "csv", "--format", "md"],
    )
    assert found.exit_code == 0, found.output
    import pandas as pd

    table = pd.read_csv(out / "results.csv")
    assert table.family.tolist() == ["shape:300x80"]
    assert table.sampled.tolist() == ["32 of 300 rows: 8 worst-conditioned, 4 at tile edges, 20 random"]
    assert "Shapes `softmax:300x80`, sampled rows" in (out / "summary.md").read_text()


def test_run_says_that_a_shape_takes_no_families(tmp_path):
    found = CliRunner().invoke(main, ["run", "--shape", "softmax:8x8", "--family", "gaussian", "--out", str(tmp_path)])
    assert found.exit_code == 2 and "--family and --cases do not apply" in found.output
    found = CliRunner().invoke(main, ["run", "--shape", "softmax:8xa", "--out", str(tmp_path)])
    assert found.exit_code == 2 and "a shape is KIND:AxBx" in found.output
