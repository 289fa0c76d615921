"""The gate's comparison, category by category, on hand-made baselines."""

from softaudit import gate


def row(verdict="pass", max_ulp=0.5, **events):
    return {"verdict": verdict, "max_ulp": max_ulp, **{e: events.get(e, 0) for e in gate.EVENTS}}


def test_every_category():
    old = {"rows": {
        "a": row(), "b": row(), "c": row(max_ulp=10.0), "d": row("fail", 50.0), "e": row("fail", 50.0),
        "f": row(max_ulp=10.0), "gone": row(),
    }}  # fmt: skip
    new = {"rows": {
        "a": row(),                        # unchanged
        "b": row("fail", 0.5),             # pass became fail
        "c": row(max_ulp=10.9),            # within max(10 * 1.1, 10 + 0.5) = 11: allowed
        "d": row("fail", 50.0, nan=3),     # known failure, but a new event: a regression
        "e": row("pass", 0.5),             # fixed: an improvement
        "f": row(max_ulp=12.0),            # past the tolerance: a regression
        "new": row(),
    }}  # fmt: skip
    result = gate.compare(old, new)
    regressions = {c.key: c.what for c in result.regressions}
    assert set(regressions) == {"b", "d", "f"}
    assert "pass became fail" in regressions["b"] and "new nan events (3)" in regressions["d"]
    assert "10 -> 12 ulp" in regressions["f"]
    assert [c.key for c in result.improvements] == ["e"]
    assert result.appeared == ["new"] and result.vanished == ["gone"]
    assert result.failed


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
