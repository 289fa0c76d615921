"""The gate's comparison, category by category, on hand-made baselines."""

from softaudit import gate


def row(verdict="pass", max_ulp=0.5, **events):
    return {"verdict": verdict, "max_ulp": max_ulp, **{e: events.get(e, 0) for e in gate.EVENTS}}


def test_every_category():
    old = {
        "rows": {
            "a": row(),
            "b": row(),
            "c": row(max_ulp=10.0),
            "d": row("fail", 50.0),
            "e": row("fail", 50.0),
            "f": row(max_ulp=10.0),
            "gone": row(),
        }
    }
    new = {
        "rows": {
            "a": row(),  # unchanged
            "b": row("fail", 0.5),  # pass became fail
            "c": row(max_ulp=10.9),  # within max(10 * 1.1, 10 + 0.5) = 11: allowed
            "d": row("fail", 50.0, nan=3),  # known failure, but a new event: a regression
            "e": row("pass", 0.5),  # fixed: an improvement
            "f": row(max_ulp=12.0),  # past the tolerance: a regression
            "new": row(),
        }
    }
    result = gate.compare(old, new)
    regressions = {c.key: c.what for c in result.regressions}
    assert set(regressions) == {"b", "d", "f"}
    assert "pass became fail" in regressions["b"] and "new nan events (3)" in regressions["d"]
    assert "10 -> 12 ulp" in regressions["f"]
    assert [c.key for c in result.improvements] == ["e"]
    assert result.appeared == ["new"] and result.vanished == ["gone"]
    assert result.failed


def test_a_new_row_regresses_when_it_fails_or_errors_on_any_platform():
    old = {"rows": {"x": row()}, "platform": {"machine": "a"}}
    new = {"rows": {"x": row(), "w": row("warn"), "f": row("fail"), "e": row("error")}, "platform": {"machine": "b"}}
    result = gate.compare(old, new)
    assert {c.key: c.what for c in result.regressions} == {
        "e": "new row: error (not in the baseline)",
        "f": "new row: fail (not in the baseline)",
    }
    assert result.appeared == ["e", "f", "w"]


def test_known_failures_alone_do_not_fail():
    old = {"rows": {"x": row("fail", 40.0)}}
    result = gate.compare(old, {"rows": {"x": row("fail", 40.0)}})
    assert not result.failed and [c.key for c in result.known] == ["x"]


def test_tolerance_is_configurable():
    old, new = {"rows": {"x": row(max_ulp=100.0)}}, {"rows": {"x": row(max_ulp=130.0)}}
    assert gate.compare(old, new).failed
    assert not gate.compare(old, new, gate.Tolerance(relative=0.5)).failed


def test_the_allowance_edge():
    old = {"rows": {"x": row(max_ulp=10.0)}}
    assert not gate.compare(old, {"rows": {"x": row(max_ulp=11.0)}}).failed
    assert gate.compare(old, {"rows": {"x": row(max_ulp=11.01)}}).failed


HERE = {"machine": "x86_64", "numpy_simd": ["X86_V3"], "blas": "scipy-openblas 0.3.31 Haswell"}
THERE = {"machine": "x86_64", "numpy_simd": ["X86_V3", "X86_V4"], "blas": "scipy-openblas 0.3.31 SkylakeX"}


def test_on_another_platform_only_a_worse_verdict_regresses():
    """What the issue measured: numpy's exp2 flushing on AVX-512 (new underflow events) and OpenBLAS's kernels
    (more ULPs) are platform differences there; pass -> warn, warn -> fail and pass -> fail still regress."""
    old = {
        "platform": HERE,
        "rows": {
            "exp2": row("warn", 3.0),
            "blas": row(max_ulp=919.0),
            "w": row(),
            "f": row("warn", 2.0),
            "p": row(),
            "same": row("fail", 9.0),
        },
    }
    new = {
        "platform": THERE,
        "rows": {
            "exp2": row("warn", 3.0, underflow=39),
            "blas": row(max_ulp=2350.0),
            "w": row("warn", 3.0),
            "f": row("fail", 2.0),
            "p": row("fail", 0.5),
            "same": row("fail", 9.0),
        },
    }
    result = gate.compare(old, new)
    assert not result.same_platform and "numpy_simd" in result.platform_change and "SkylakeX" in result.platform_change
    assert {c.key: c.what for c in result.regressions} == {
        "w": "pass became warn; max error 0.5 -> 3 ulp",
        "f": "warn became fail",
        "p": "pass became fail",
    }
    platform = {c.key: c.what for c in result.platform}
    assert set(platform) == {"exp2", "blas"} and "new underflow events (39)" in platform["exp2"]
    assert "919 -> 2.35e+03 ulp" in platform["blas"] and "(still pass)" in platform["blas"]
    assert [c.key for c in result.known] == ["same"]


def test_on_the_same_platform_the_strict_rules_hold():
    old = {"platform": HERE, "rows": {"exp2": row("warn", 3.0), "blas": row(max_ulp=919.0)}}
    new = {"platform": dict(HERE), "rows": {"exp2": row("warn", 3.0, underflow=39), "blas": row(max_ulp=2350.0)}}
    result = gate.compare(old, new)
    assert result.same_platform and result.platform_change == ""
    assert {c.key for c in result.regressions} == {"exp2", "blas"} and not result.platform


def test_a_baseline_without_a_platform_counts_as_another_platform():
    old = {"rows": {"x": row(max_ulp=1.0)}}
    result = gate.compare(old, {"platform": HERE, "rows": {"x": row(max_ulp=5.0)}})
    assert result.platform_change == "the baseline records no platform" and not result.failed
