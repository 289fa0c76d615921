"""The rounding budget (softaudit/budget.py): every kind has one, of its outputs' shapes, never below |r|, and it
grows with the summation model (a running sum's n - 1 roundings cover a pairwise sum's ceil(log2 n)); the newer
kinds' hold what every rounding at its worst does to their standard algorithms, and the standard built-ins."""

import numpy as np
import pytest

from softaudit import budget, kinds
from softaudit.cases import FAMILIES
from softaudit.prepare import Prepared
from softaudit.reference import format_of


@pytest.mark.parametrize("kind", list(kinds.KINDS))
def test_every_kind_has_a_budget_of_its_outputs_shapes(kind):
    """Every kind has a budget (a kind missing from the table would get None, and the causes would read its budget
    as unknown); a kind whose line is measured in every dtype (`Kind.measured`: the FP8 kinds) has an unbounded
    one."""
    entry = kinds.get(kind)
    fmt = format_of("bfloat16" if entry.dtypes is None or "bfloat16" in entry.dtypes else entry.dtypes[0])
    family = kinds.get(kind).families[0]
    case = FAMILIES[family].cases(kind, fmt, "quick", 0)[0]
    pc = Prepared(case, fmt, 0)
    exact = tuple(ref.hi for ref in pc.references)
    tiny = float(np.finfo(np.float32).tiny)
    pairwise = budget.of(kind, pc.inputs, pc.mask, exact, budget.PAIRWISE, tiny)
    running = budget.of(kind, pc.inputs, pc.mask, exact, budget.RUNNING, tiny)
    assert kind in budget.BUDGETS
    assert len(pairwise) == len(kinds.get(kind).outputs)
    for t, r, ref in zip(pairwise, running, exact):
        defined = np.isfinite(ref)
        assert t.shape == ref.shape and (np.isinf(t).all() if entry.measured else np.isfinite(t[defined]).all())
        assert (t[defined] >= np.abs(ref[defined])).all()
        assert (r[defined] >= t[defined]).all()


def test_the_dot_of_a_softmax_backward_is_in_its_budget():
    """p = (1, 0) exactly: dx_0 = p_0 (g_0 - <g, p>) = 0 with every term exact, yet the dot <g, p> = g_0 is rounded
    once, by up to u |g_0|: the budget holds p_0 p_0 |g_0| (E + 1 + 1) at least."""
    x, g = np.array([[0.0, -1000.0]]), np.array([[3.0, 1.0]])
    (t,) = budget.of("softmax_grad", {"x": x, "g": g}, None, (np.zeros((1, 2)),))
    assert t[0, 0] >= 3.0 * (0 + 0 + 1 + 4 + 1 + 1)


NEW_KINDS = ["cross_entropy", "cross_entropy_grad", "attention_lse", "merge_attention"]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("kind", NEW_KINDS)
def test_the_standard_algorithms_stay_within_the_newer_kinds_budgets(kind, dtype):
    """What the budget is for: no standard algorithm in the dtype (nor best practice) errs past u (scale + T),
    BEYOND_ROUNDING times over (where the causes would call it a wrong term), on any case of the kind's families
    (quick suite), options (smoothing, z-loss, softcap, reductions, ignored rows) included. The errors are the
    built-ins' own against the exact reference; the budget never sees them."""
    from softaudit import candidates
    from softaudit.adapters import CandidateError, call_all
    from softaudit.causes import BEYOND_ROUNDING

    fmt = format_of(dtype)
    u = 2.0**-fmt.precision
    tiny = float(2.0 ** max(fmt.emin, -1074))
    checked, worst = 0, (0.0, "")
    for family in kinds.get(kind).families:
        for i, case in enumerate(FAMILIES[family].cases(kind, fmt, "quick", 0)):
            pc = Prepared(case, fmt, i)
            options = dict(case.options)
            exact = tuple(r.hi + r.lo for r in pc.references)
            scales = [extra["scale"] for extra in pc._conditioning()]
            budgets = budget.of(kind, pc.inputs, pc.mask, exact, budget.RUNNING, tiny, options, u)
            for candidate in [*candidates.standard(kind), candidates.best(kind)]:
                shapes = [r.shape for r in exact]
                try:
                    outs, _ = call_all(candidate, pc.inputs, pc.mask, shapes, fmt.dtype, None, options=options)
                except CandidateError:
                    continue
                for y, r, scale, t in zip(outs, exact, scales, budgets):
                    y = np.asarray(y, dtype=np.float64)
                    scale = np.broadcast_to(scale, r.shape)
                    seen = np.isfinite(r) & np.isfinite(y) & np.isfinite(t)
                    if not seen.any():
                        continue
                    err = np.abs(y[seen] - r[seen])
                    ratio = err / (BEYOND_ROUNDING * u * (scale[seen] + t[seen]) + tiny)
                    checked += int(seen.sum())
                    if ratio.max() > worst[0]:
                        worst = (float(ratio.max()), f"{candidate.name} on {family} case {i}")
    assert checked > 100
    assert worst[0] <= 1, worst


def _pairwise(a, axis, rounded):
    """A pairwise sum along `axis` with every addition rounded (`rounded`), in dtype_sum's order."""
    a = np.moveaxis(a, axis, -1)
    while a.shape[-1] > 1:
        half = a.shape[-1] // 2
        s = rounded(a[..., :half] + a[..., half : 2 * half])
        a = np.concatenate([s, a[..., 2 * half :]], axis=-1) if a.shape[-1] % 2 else s
    return a[..., 0]


def _cross_entropy_perturbed(inputs, o, rounded, grad):
    """cross_entropy's standard algorithm (max shift, exp, pairwise sum, log, subtractions; softcap, smoothing,
    z-loss, reductions) in float64 with every intermediate passed through `rounded`."""
    x, t = np.asarray(inputs["logits"], np.float64), np.asarray(inputs["target"])
    n, v = x.shape
    rows, ignored = np.arange(n), t == o["ignore_index"]
    y = np.where(ignored, 0, t)
    eps, zl, cap = o["label_smoothing"], o["z_loss"], o["softcap"]
    z = x if cap is None else rounded(cap * rounded(np.tanh(rounded(x / cap))))
    m = z.max(axis=1, keepdims=True)
    e = rounded(np.exp(rounded(z - m)))
    s = _pairwise(e, 1, rounded)[:, None]
    lse = rounded(m + rounded(np.log(s)))[:, 0]
    counted = max(int((~ignored).sum()), 1)
    if grad:
        g = np.broadcast_to(np.asarray(inputs["g"], np.float64), (n,))
        w = rounded(g / counted) if o["reduction"] == "mean" else g
        p = rounded(e / s)
        q = np.full(x.shape, rounded(np.float64(eps / v)))
        q[rows, y] = rounded(1 - eps + eps / v)
        lead = p if zl == 0 else rounded((1 + rounded(2 * zl * lse))[:, None] * p)
        a = rounded(lead - q)
        if cap is not None:
            a = rounded(a * rounded(rounded(1 / rounded(np.cosh(rounded(x / cap)))) ** 2))
        return np.where(ignored[:, None], 0.0, rounded(w[:, None] * a))
    loss = rounded(lse - (z[rows, y] if eps == 0 else rounded((1 - eps) * z[rows, y])))
    if eps:
        loss = rounded(loss - rounded(eps * rounded(_pairwise(z, 1, rounded) / v)))
    if zl:
        loss = rounded(loss + rounded(zl * rounded(lse * lse)))
    loss = np.where(ignored, 0.0, loss)
    if o["reduction"] == "none":
        return loss
    total = _pairwise(loss, 0, rounded)
    return np.array([rounded(total / counted) if o["reduction"] == "mean" else total])


def _merge_perturbed(inputs, rounded):
    """The textbook merge (max shift over the splits' lses, pairwise sums) with every intermediate rounded."""
    lses, outs = np.asarray(inputs["lses"], np.float64), np.asarray(inputs["outputs"], np.float64)
    kept = np.isfinite(lses)
    m = np.where(kept.any(axis=0), np.where(kept, lses, -np.inf).max(axis=0), 0.0)
    e = np.where(kept, rounded(np.exp(rounded(lses - m))), 0.0)
    lse = rounded(m + rounded(np.log(_pairwise(e, 0, rounded))))
    w = np.where(kept, rounded(np.exp(rounded(lses - lse))), 0.0)
    return _pairwise(rounded(w[..., None] * outs), 0, rounded), lse


def _lse_perturbed(inputs, mask, rounded):
    """attention's lse over plain scores c q.k (pairwise dots), max shift, exp, pairwise sum, log; every
    intermediate rounded."""
    q, k = (np.asarray(inputs[n], np.float64) for n in "qk")
    c = 1 / np.sqrt(q.shape[-1])
    products = rounded(q[..., :, None, :] * k[..., None, :, :])
    s = rounded(c * _pairwise(products, -1, rounded))
    s = np.where(np.broadcast_to(True if mask is None else mask, s.shape), s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    total = _pairwise(rounded(np.exp(rounded(s - m))), -1, rounded)
    return rounded(m[..., 0] + rounded(np.log(total)))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("kind", NEW_KINDS)
def test_every_rounding_at_its_worst_stays_within_the_newer_kinds_budgets(kind, dtype):
    """The budget's claim, checked against an independent model of it: the kind's standard algorithm in float64
    with every intermediate moved by u of the dtype (each +u or -u at random: any rounding's worst, to first order),
    over the families' cases (quick suite, options included), stays within u (scale + T) with pairwise sums; and
    the scale alone would not hold it somewhere (the budget is not vacuous). attention_lse: its lse over plain
    scores (attention's budget reads no score modifier)."""
    from softaudit.kinds.cross_entropy import _options

    fmt = format_of(dtype)
    u = 2.0**-fmt.precision
    tiny = float(2.0 ** max(fmt.emin, -1074))
    rng = np.random.default_rng(7)

    def rounded(a):
        return a * (1 + u * rng.choice([-1.0, 1.0], size=np.shape(a)))

    worst, without, where = 0.0, 0.0, ""
    for family in kinds.get(kind).families:
        for i, case in enumerate(FAMILIES[family].cases(kind, fmt, "quick", 0)):
            pc = Prepared(case, fmt, i)
            options = dict(case.options)
            if kind == "attention_lse" and (options or "sinks" in pc.inputs or "bias" in pc.inputs):
                continue
            exact = tuple(r.hi + r.lo for r in pc.references)
            scales = [np.broadcast_to(extra["scale"], r.shape) for extra, r in zip(pc._conditioning(), exact)]
            budgets = budget.of(kind, pc.inputs, pc.mask, exact, budget.PAIRWISE, tiny, options, u)
            for _ in range(4):
                with np.errstate(all="ignore"):
                    if kind.startswith("cross_entropy"):
                        outs = (_cross_entropy_perturbed(pc.inputs, _options(options), rounded, kind.endswith("grad")),)
                    elif kind == "merge_attention":
                        outs = _merge_perturbed(pc.inputs, rounded)
                    else:
                        outs = (None, _lse_perturbed(pc.inputs, pc.mask, rounded))
                for y, r, scale, t in zip(outs, exact, scales, budgets):
                    if y is None:
                        continue
                    seen = np.isfinite(r) & np.isfinite(y) & (scale > 0)
                    if not seen.any():
                        continue
                    err = np.abs(y[seen] - r[seen])
                    ratio = float((err / (u * (scale[seen] + t[seen]) * (1 + 2**-6) + tiny)).max())
                    if ratio > worst:
                        worst, where = ratio, f"{family} case {i} {options}"
                    without = max(without, float((err / (u * scale[seen] + tiny)).max()))
    assert worst <= 1, (worst, where)
    assert without > 1, without


def test_a_minus_inf_logit_under_label_smoothing_has_a_budget_for_its_nonzero_gradient():
    """Under smoothing eps a -inf logit's lane has p = 0 and the exact gradient -w eps / V (the hunt's float16
    find: logits [0, -inf], eps 0.1, g 0.0621, whose lane is -0.0031067): the budget there covers that value's own
    rounding (2 |r| at least), where it was 0 and a correctly rounded output read 12.8x u (scale + T)."""
    g = 0.0621
    x, t = np.array([[0.0, -np.inf]]), np.array([0])
    exact = np.array([[g * 0.05, -g * 0.05]])  # w (p - q): p = (1, 0), q = (1 - eps + eps / 2, eps / 2)
    (found,) = budget.of(
        "cross_entropy_grad",
        {"logits": x, "target": t, "g": np.array([g])},
        None,
        (exact,),
        budget.RUNNING,
        0.0,
        {"label_smoothing": 0.1},
        0.0,
    )
    assert found[0, 1] >= 2 * abs(exact[0, 1]), found
