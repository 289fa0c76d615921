"""attention_grad with K and V broadcast against q (one K/V head for several query heads, grouped-query heads): dk and
dv are the correctly rounded sums over the query heads sharing them, checked against the plain oracle's sums, against
the exact sum of the reference's own per-head gradients, and on undefined queries and keys.

Each comparison also checks that its inputs tell the correct reference from the plausible wrong one, per-head
gradients rounded to the dtype and then added (`_rounded_then_summed`): a test that cannot fail tests nothing.
"""

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from softaudit import reference as R

from .oracle import attention_grad_exact_broadcast, near_boundary, round_to

DTYPES = ["float16", "bfloat16", "float32", "float64"]
#: (q's batch shape, k's and v's): one K/V head for 4 query heads (as an axis of size 1, and as no batch axis at
#: all), and 2 K/V heads of 3 query heads each in a batch of 2 (grouped-query, the shared axis last).
LAYOUTS = {
    "one head, axis of 1": ((4,), (1,)),
    "one head, no batch axis": ((2, 2), ()),
    "grouped": ((2, 2, 3), (2, 2, 1)),
}


def dtype_of(name):
    return R.format_of(name).dtype


def bits(a) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    return np.where(np.isnan(a), np.nan, a).view(np.int64)


def _inputs(rng, layout, dtype, lq=3, lk=5, d=4, dv=3, magnitude=0.0):
    q_batch, kv_batch = LAYOUTS[layout]
    shapes = (q_batch + (lq, d), kv_batch + (lk, d), kv_batch + (lk, dv), q_batch + (lq, dv))
    return [(rng.standard_normal(s) * 10.0**magnitude).astype(dtype_of(dtype)) for s in shapes]


def _mask(rng, q_batch, lq, lk, style):
    """None, one (Lq, Lk) mask for every head, or a mask per head with a fully masked query in the first head."""
    if style == "none":
        return None
    if style == "shared":
        return np.tril(np.ones((lq, lk), bool), k=lk - lq)
    keep = rng.random(q_batch + (lq, lk)) < 0.6
    keep.reshape(-1, lq, lk)[0, 0] = False
    return keep


def _expanded(q, k, v):
    """k and v as the copies np.broadcast_to makes of them for q's batch shape."""
    batch = q.shape[:-2]
    return [np.broadcast_to(a, batch + a.shape[-2:]).copy() for a in (k, v)]


def _oracle(q, k, v, g, keep, scale, dtype):
    """The oracle's (dq, dk, dv) rounded to dtype: at twice the precision, or where that cannot tell (the sums'
    cancellation counted) or a value is 0, at ten times that plus the bits of the scores' spread."""
    keep = np.ones(q.shape[:-1] + k.shape[-2:-1], bool) if keep is None else keep
    prec = 2 * R.format_of(dtype).precision + 20
    *exact, lost = attention_grad_exact_broadcast(q, k, v, g, keep, scale, prec)
    if any(x == 0 or near_boundary(x, dtype, prec - lost) for part in exact for x in part.flat):
        c = 1 / math.sqrt(q.shape[-1]) if scale is None else abs(scale)
        spread = 2 * c * (np.abs(q.astype(np.float64)) @ np.abs(np.swapaxes(k.astype(np.float64), -1, -2))).max()
        *exact, lost = attention_grad_exact_broadcast(q, k, v, g, keep, scale, 10 * prec + math.ceil(1.45 * spread))
    return [np.vectorize(lambda x: round_to(x, dtype), otypes=[float])(part) for part in exact]


def _summed_over_heads(per_head, shape, add):
    """per_head (q's batch shape, ...) reduced to `shape` (k's or v's) by `add` over the axes k or v lacks or has
    as 1; add(values along the last axis) -> one value."""
    lead = per_head.ndim - len(shape)
    padded = (1,) * lead + shape
    axes = [i for i, n in enumerate(padded[:-2]) if n == 1 and per_head.shape[i] != 1]
    moved = np.moveaxis(per_head, axes, list(range(-len(axes), 0)))
    flat = moved.reshape(moved.shape[: moved.ndim - len(axes)] + (-1,))
    return np.apply_along_axis(add, -1, flat).reshape(shape)


def _rounded_then_summed(q, k, v, g, keep, dtype):
    """The wrong reference: each query head's correctly rounded dk and dv (the reference on expanded K/V), added
    (a) exactly and rounded once, (b) one by one in the dtype. Both must differ from the right answer on the tests'
    inputs, or those inputs cannot tell them apart."""
    _, dk, dv = R.attention_grad(q, *_expanded(q, k, v), g, keep, dtype=dtype)
    out = []
    for part, a in ((dk, k), (dv, v)):
        per_head = part.astype(np.float64)
        exact = _summed_over_heads(per_head, a.shape, math.fsum)
        in_dtype = _summed_over_heads(part, a.shape, lambda xs: np.add.accumulate(xs)[-1])
        out.append((R.round_to(exact, dtype), in_dtype))
    return out


def _assert_catches_rounding_then_summing(got, q, k, v, g, keep, dtype):
    """The right dk, dv (`got`) differ from both wrong ones somewhere: these inputs can fail a wrong reference."""
    for right, wrong in zip(got[1:], _rounded_then_summed(q, k, v, g, keep, dtype)):
        for variant in wrong:
            assert not np.array_equal(bits(right), bits(variant))


# --- (a) against the oracle's sums -------------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(
    dtype=st.sampled_from(DTYPES),
    layout=st.sampled_from(list(LAYOUTS)),
    lq=st.integers(1, 3),
    lk=st.integers(1, 4),
    mask=st.sampled_from(["none", "shared", "per head"]),
    magnitude=st.floats(-1, 1),
    scale=st.sampled_from([None, None, 0.5, -0.25]),
    seed=st.integers(0, 2**32 - 1),
)
def test_broadcast_kv_gradients_match_the_oracles_sums(dtype, layout, lq, lk, mask, magnitude, scale, seed):
    rng = np.random.default_rng(seed)
    q, k, v, g = _inputs(rng, layout, dtype, lq=lq, lk=lk, d=3, dv=2, magnitude=magnitude)
    keep = _mask(rng, q.shape[:-2], lq, lk, mask)
    got = R.attention_grad(q, k, v, g, keep, scale=scale, dtype=dtype)
    assert [a.shape for a in got] == [q.shape, k.shape, v.shape]
    for part, want in zip(got, _oracle(q, k, v, g, keep, scale, dtype)):
        np.testing.assert_array_equal(bits(part), bits(want))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_broadcast_kv_gradients_match_the_oracle_and_tell_rounding_then_summing_apart(layout, dtype):
    """Fixed inputs with a mask per head, so that the comparison's power is checked: the per-head rounded sums
    differ from the oracle's there."""
    rng = np.random.default_rng(sorted(LAYOUTS).index(layout))
    q, k, v, g = _inputs(rng, layout, dtype, lq=4, lk=6)
    keep = _mask(rng, q.shape[:-2], 4, 6, "per head")
    got = R.attention_grad(q, k, v, g, keep, dtype=dtype)
    for part, want in zip(got, _oracle(q, k, v, g, keep, None, dtype)):
        np.testing.assert_array_equal(bits(part), bits(want))
    _assert_catches_rounding_then_summing(got, q, k, v, g, keep, dtype)
    slow = R.attention_grad(q, k, v, g, keep, dtype=dtype, method="mpmath")
    for a, b in zip(got, slow):
        np.testing.assert_array_equal(bits(a), bits(b))


# --- (b) the explicit construction: the exact sum of the reference's exact per-head gradients ------------------


def _fraction(x) -> Fraction:
    """An mpf exactly, as a fraction (libmp's tuple: sign, mantissa, exponent, bit count; not through mpmath.mpf,
    which would round it to the working precision)."""
    sign, man, exp, _ = x._mpf_
    return (-1) ** sign * Fraction(man) * Fraction(2) ** exp


def _round_fraction(value: Fraction, dtype) -> float:
    """A dyadic rational rounded to dtype, through an mpf that holds it exactly."""
    den = value.denominator.bit_length() - 1  # a power of two
    with mpmath.workprec(max(value.numerator.bit_length(), 1) + 8):
        return round_to(mpmath.ldexp(mpmath.mpf(value.numerator), -den), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["one head, axis of 1", "grouped"])
def test_broadcast_dk_dv_are_the_correctly_rounded_sums_of_the_exact_per_head_gradients(layout, dtype):
    """The reference on K and V expanded by np.broadcast_to + copy gives every query head's own gradients, at
    dtype=None correctly rounded to PREC bits; their sum over the heads sharing a K/V head, formed exactly with
    fractions, is within the heads' PREC-bit roundings of the true sum, which rounds to the dtype as the sum
    does (checked: no rounding boundary within that distance). The broadcast reference must give exactly that."""
    prec = 300
    rng = np.random.default_rng(40 + sorted(LAYOUTS).index(layout))
    q, k, v, g = _inputs(rng, layout, dtype, lq=3, lk=5, d=3, dv=2)
    keep = _mask(rng, q.shape[:-2], 3, 5, "per head")
    got = R.attention_grad(q, k, v, g, keep, dtype=dtype)
    ek, ev = _expanded(q, k, v)
    per_head = R.attention_grad(q, ek, ev, g, keep, dtype=None, prec=prec)
    for right, part, a in zip(got[1:], per_head[1:], (k, v)):
        fractions = np.vectorize(_fraction, otypes=[object])(part)
        sums = _summed_over_heads(fractions, a.shape, lambda xs: sum(xs, Fraction(0)))
        sizes = _summed_over_heads(fractions, a.shape, lambda xs: sum((abs(x) for x in xs), Fraction(0)))
        for index in np.ndindex(a.shape):
            slack = sizes[index] * Fraction(1, 2**prec)  # each head's value is within 2**-prec of its own
            want = _round_fraction(sums[index], dtype)
            assert _round_fraction(sums[index] - slack, dtype) == want == _round_fraction(sums[index] + slack, dtype)
            assert bits(right[index]) == bits(want), (index, right[index], want)
    np.testing.assert_array_equal(bits(got[0]), bits(R.attention_grad(q, ek, ev, g, keep, dtype=dtype)[0]))
    _assert_catches_rounding_then_summing(got, q, k, v, g, keep, dtype)


# --- undefined queries and keys, shapes and arguments ---------------------------------------------------------


def test_an_undefined_query_makes_nan_the_shared_keys_it_attends_and_nothing_else():
    """Grouped heads (2 K/V heads x 3 query heads): a NaN in one query's g (head (0, 1)) makes its dq and the dk, dv
    of the keys it attends, in its K/V head, NaN; a query that attends nothing (head (1, 2)) has dq = +0 and adds
    nothing; a key no query of its group attends has dk = dv = +0; every other output is the oracle's."""
    rng = np.random.default_rng(9)
    q, k, v, g = _inputs(rng, "grouped", "float32", lq=3, lk=5)
    q, k, v, g = q[0], k[0], v[0], g[0]  # (2, 3, ...) and (2, 1, ...)
    keep = np.ones((2, 3, 3, 5), bool)
    keep[0, 1, 0, 3:] = False  # the undefined query attends keys 0-2 of K/V head 0
    keep[1, 2, 2] = False  # a query with nothing to attend
    keep[1, :, :, 4] = False  # key 4 of K/V head 1: nobody attends
    g[0, 1, 0, 1] = np.nan
    dq, dk, dv = R.evaluate_attention_grad(q, k, v, g, keep, dtype="float32")
    assert dq.undefined.shape == q.shape[:-1] and dk.undefined.shape == k.shape[:-1] == dv.undefined.shape
    assert np.argwhere(dq.undefined).tolist() == [[0, 1, 0]]
    assert np.argwhere(dk.undefined).tolist() == [[0, 0, 0], [0, 0, 1], [0, 0, 2]]
    assert (dk.undefined == dv.undefined).all()
    assert (
        np.isnan(dq.value[0, 1, 0]).all() and np.isnan(dk.value[0, 0, :3]).all() and np.isnan(dv.value[0, 0, :3]).all()
    )
    for zero in (dq.value[1, 2, 2], dk.value[1, 0, 4], dv.value[1, 0, 4]):
        assert (zero == 0).all() and not np.signbit(zero).any()
    # the defined outputs: the oracle's with the undefined query left out (it reaches none of them)
    g_clean, keep_clean = g.copy(), keep.copy()
    g_clean[0, 1, 0], keep_clean[0, 1, 0] = 0.0, False
    for r, want in zip((dq, dk, dv), _oracle(q, k, v, g_clean, keep_clean, None, "float32")):
        defined = ~np.broadcast_to(r.undefined[..., None], r.value.shape)
        np.testing.assert_array_equal(bits(r.value[defined]), bits(want[defined]))


def test_broadcast_needs_q_of_the_whole_batch_and_k_v_broadcast_alike():
    rng = np.random.default_rng(3)
    q, k, v, g = (rng.standard_normal(s) for s in ((4, 2, 3), (4, 5, 3), (4, 5, 2), (4, 2, 2)))
    with pytest.raises(ValueError, match="q of the whole batch shape"):  # q shared by K/V heads: dq a sum
        R.attention_grad(q[:1], k, v, g, dtype="float32")
    with pytest.raises(ValueError, match="k and v broadcast along the same batch axes"):
        R.attention_grad(q, k[:1], v, g, dtype="float32")
    with pytest.raises(ValueError, match="g must have the output's shape"):
        R.attention_grad(q, k[:1], v[:1], g[:, :1], dtype="float32")
    with pytest.raises(ValueError, match="does not broadcast"):
        R.attention_grad(q, k[:1], v[:1], g, np.ones((3, 2, 5), bool), dtype="float32")


@pytest.mark.parametrize(
    "q_shape, kv_batch, lk",
    [
        ((1, 0, 5, 4), (1, 1), 3),  # a group of zero query heads sharing a K/V head
        ((2, 0, 4), (2,), 3),  # Lq = 0 with a batch axis
        ((0, 4), (), 3),  # Lq = 0
        ((0, 5, 4), (1,), 3),  # an empty batch, K/V broadcast
        ((2, 3, 5, 4), (2, 1), 0),  # no keys, grouped heads
    ],
    ids=["zero query heads", "batch, Lq = 0", "Lq = 0", "empty batch", "Lk = 0"],
)
@pytest.mark.parametrize("dtype", ["float16", None])
def test_no_query_meeting_a_key_gives_exact_zeros_of_the_inputs_shapes(q_shape, kv_batch, lk, dtype):
    """Where no query meets a key, every gradient is an exact +0 (a query with nothing to attend has dq = 0, a key
    nobody attends dk = dv = 0), of q's, k's and v's shapes, as `attention` gives its empty output for these shapes
    (not numpy's "cannot reshape array of size 0"); the arguments are still checked."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(s) for s in (q_shape, kv_batch + (lk, 4), kv_batch + (lk, 2)))
    g = rng.standard_normal(q_shape[:-1] + (2,))
    if math.prod(q_shape[:-1]) == 0:  # the forward's empty output (its own reshape failed on batch, Lq = 0)
        assert R.attention(q, k, v, dtype=dtype).shape == q_shape[:-1] + (2,)
    grads = R.attention_grad(q, k, v, g, dtype=dtype)
    details = R.evaluate_attention_grad(q, k, v, g, dtype=dtype)
    for grad, detail, a in zip(grads, details, (q, k, v)):
        assert grad.shape == detail.value.shape == a.shape and detail.undefined.shape == a.shape[:-1]
        values = np.asarray(grad, dtype=np.float64)
        assert (values == 0).all() and not np.signbit(values).any() and not detail.undefined.any()
    with pytest.raises(ValueError, match="g must have the output's shape"):
        R.attention_grad(q, k, v, g[..., :1], dtype=dtype)
    with pytest.raises(ValueError, match="k's last dimension"):
        R.attention_grad(q, k[..., :3], v, g, dtype=dtype)
