"""The built-in attention backwards with a tanh softcap (attention_grad's and attention_sinks_grad's naive, upcast
and flash2_b64), called as an audit calls them, in float64 against the plain float64 formulas of
tests/gradients/oracle.py (sigma = sech(s / cap)**2 there, 1 - tanh**2 in the built-ins); and those formulas against
central differences of the capped forward. The scores (|s| / cap up to about 6) bend hard under the caps, so a
backward without the cap's derivative is far outside the tolerance (checked: each test could fail)."""

import math

import numpy as np
import pytest

from softaudit.adapters._call import call_all
from softaudit.candidates import builtins

from ..gradients import oracle as O

RNG = np.random.default_rng(11)
LQ, LK = 6, 70  # (70 keys: flash2_b64 works over two key blocks, the second ragged)
Q, G = (RNG.standard_normal((3, LQ, 8)) * 2 for _ in range(2))
K, V = (RNG.standard_normal((3, LK, 8)) * 2 for _ in range(2))
MASK = RNG.random((LQ, LK)) < 0.6
MASK[:, -1] = True  # every query attends a key (naive's NaN for one with none is its documented weakness)
BIAS = RNG.standard_normal((LQ, LK))
SLOPES = np.array([0.5, 0.25, 0.125])
OFFSET = np.arange(LK)[None, :] - (np.arange(LQ)[:, None] + LK - LQ)  # bottom-right aligned
#: name: (arrays beyond q, k, v, g; the mask; keywords; the oracle's keep and bias)
CASES = {
    "cap 2": ({}, None, {"softcap": 2.0}, None, None),
    "cap 5, mask, bias": ({"bias": BIAS}, MASK, {"softcap": 5.0}, MASK, BIAS),
    "cap 3, causal, window, alibi": (
        {"alibi_slopes": SLOPES},
        None,
        {"softcap": 3.0, "causal": True, "window": (40, 0)},
        (OFFSET <= 0) & (OFFSET >= -40),
        -SLOPES[:, None, None] * np.abs(OFFSET),
    ),
}
TOLERANCE = 1e-12


def _builtin(name):
    return next(c for c in builtins() if c.name == name)


def _called(name, arrays, mask, options):
    c = _builtin(name)
    shapes = tuple(np.shape(arrays[n]) for n in ("q", "k", "v", "sinks") if n in arrays)
    return call_all(c, arrays, mask, shapes, np.float64, timeout=None, options=options)[0]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", ["attention_grad.naive", "attention_grad.upcast", "attention_grad.flash2_b64"])
def test_attention_grad_builtins_with_a_softcap_match_the_float64_formulas(name, case):
    extra, mask, options, keep, bias = CASES[case]
    got = _called(name, {"q": Q, "k": K, "v": V, "g": G, **extra}, mask, options)
    exact = O.capped_attention_vjp(Q, K, V, G, options["softcap"], keep, bias)
    errors = [O.normwise(a, b) for a, b in zip(got, exact)]
    assert max(errors) <= TOLERANCE, errors
    # dq and dk without the cap's derivative are far off (dv = P^T g has none): the tolerance tells them apart
    dropped = O.capped_attention_vjp(Q, K, V, G, options["softcap"], keep, bias, derivative=False)
    assert min(O.normwise(a, b) for a, b in zip(got[:2], dropped[:2])) > 1e-2


@pytest.mark.parametrize(
    "name", ["attention_sinks_grad.naive", "attention_sinks_grad.upcast", "attention_sinks_grad.flash2_b64"]
)
def test_attention_sinks_grad_builtins_with_a_softcap_match_the_float64_formulas(name):
    """The cap bends the keys' scores, not the sink's logit: dsinks = -sum_i P_iz D_i with P from the capped
    scores."""
    sinks = np.array([1.5, -0.5, 3.0])
    got = _called(name, {"q": Q, "k": K, "v": V, "g": G, "sinks": sinks, "bias": BIAS}, MASK, {"softcap": 5.0})
    exact = O.capped_attention_vjp(Q, K, V, G, 5.0, MASK, BIAS, sinks)
    errors = [O.normwise(a, b) for a, b in zip(got, exact)]
    assert len(got) == 4 and max(errors) <= TOLERANCE, errors


def test_the_capped_formulas_are_the_derivative_of_the_capped_forward():
    """The oracle's (dq, dk, dv) against central differences of o = softmax(cap tanh(c q k^T / cap) + bias,
    masked) v, in float64; without sigma they are not."""
    rng = np.random.default_rng(2)
    q, k, v, g = (rng.standard_normal(s) * 2 for s in ((4, 5), (7, 5), (7, 3), (4, 3)))
    keep = rng.random((4, 7)) < 0.7
    keep[:, 0] = True
    bias, cap = rng.standard_normal((4, 7)), 1.5

    def forward(q, k, v):
        s = q @ k.T / math.sqrt(q.shape[-1])
        f = np.where(keep, cap * np.tanh(s / cap) + bias, -np.inf)
        e = np.exp(f - f.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True) @ v

    numeric = (
        O.central_difference(lambda x: forward(x, k, v), q, g),
        O.central_difference(lambda x: forward(q, x, v), k, g),
        O.central_difference(lambda x: forward(q, k, x), v, g),
    )
    formulas = O.capped_attention_vjp(q, k, v, g, cap, keep, bias)
    assert max(O.normwise(a, b) for a, b in zip(formulas, numeric)) < 1e-8
    dropped = O.capped_attention_vjp(q, k, v, g, cap, keep, bias, derivative=False)
    assert min(O.normwise(a, b) for a, b in zip(dropped[:2], numeric[:2])) > 1e-2
