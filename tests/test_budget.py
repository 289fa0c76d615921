"""The rounding budget (softaudit/budget.py): every kind has one, of its outputs' shapes, never below |r|, and it
grows with the summation model (a running sum's n - 1 roundings cover a pairwise sum's ceil(log2 n))."""

import numpy as np
import pytest

from softaudit import budget, kinds
from softaudit.cases import FAMILIES
from softaudit.prepare import Prepared
from softaudit.reference import format_of


@pytest.mark.parametrize("kind", list(kinds.KINDS))
def test_every_kind_has_a_budget_of_its_outputs_shapes(kind):
    """Every kind the budget table knows; the newer kinds (cross-entropy, attention_lse, merges) have none yet,
    and `of` says so with None (the causes then read the budget as unknown)."""
    fmt = format_of("bfloat16")
    family = kinds.get(kind).families[0]
    case = FAMILIES[family].cases(kind, fmt, "quick", 0)[0]
    pc = Prepared(case, fmt, 0)
    exact = tuple(ref.hi for ref in pc.references)
    tiny = float(np.finfo(np.float32).tiny)
    pairwise = budget.of(kind, pc.inputs, pc.mask, exact, budget.PAIRWISE, tiny)
    running = budget.of(kind, pc.inputs, pc.mask, exact, budget.RUNNING, tiny)
    if kind not in budget.BUDGETS:
        assert pairwise is None and running is None
        return
    assert len(pairwise) == len(kinds.get(kind).outputs)
    for t, r, ref in zip(pairwise, running, exact):
        defined = np.isfinite(ref)
        assert t.shape == ref.shape and np.isfinite(t[defined]).all()
        assert (t[defined] >= np.abs(ref[defined])).all()
        assert (r[defined] >= t[defined]).all()


def test_the_dot_of_a_softmax_backward_is_in_its_budget():
    """p = (1, 0) exactly: dx_0 = p_0 (g_0 - <g, p>) = 0 with every term exact, yet the dot <g, p> = g_0 is rounded
    once, by up to u |g_0|: the budget holds p_0 p_0 |g_0| (E + 1 + 1) at least."""
    x, g = np.array([[0.0, -1000.0]]), np.array([[3.0, 1.0]])
    (t,) = budget.of("softmax_grad", {"x": x, "g": g}, None, (np.zeros((1, 2)),))
    assert t[0, 0] >= 3.0 * (0 + 0 + 1 + 4 + 1 + 1)
