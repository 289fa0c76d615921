"""Built-in log-sum-exp backward candidates: dx = p * g, p = softmax(x), g with x's shape without the axis.

"In the dtype" as in `softmax`.
"""

from __future__ import annotations

import functools

import numpy as np

from ..adapters import candidate
from ._ops import dtype_sum, exp, log, row_max, rowwise, work_dtype


def reduced_g(fn):
    """Give fn(x, g), g keeping the axis (length 1), the convention f(x, g, axis=-1) with g lacking the axis."""

    inner = rowwise(fn)

    @functools.wraps(fn)
    def wrapper(x, g, axis=-1):
        x = np.asarray(x)
        return inner(x, np.expand_dims(np.asarray(g), axis % x.ndim), axis=axis)

    return wrapper


@candidate(kind="logsumexp_grad", name="logsumexp_grad.exp_minus_lse")
@reduced_g
def exp_minus_lse(x, g):
    """exp(x - lse) * g in the dtype, lse = max + log(sum exp(x - max)) the saved output, as autograd's logsumexp
    backward does. Weakness: the rounding of lse (about u |lse|) becomes a relative error of every p: large
    logits (|lse| in the hundreds in float16) lose every digit of the gradient."""
    m = row_max(x)
    lse = m + log(dtype_sum(exp(x - m)))
    return exp(x - lse) * g.astype(x.dtype)


@candidate(kind="logsumexp_grad", name="logsumexp_grad.softmax_in_dtype")
@reduced_g
def softmax_in_dtype(x, g):
    """softmax(x) * g in the dtype, the softmax max-shifted. Weakness: the sum in the dtype (about log2(n) ulps on
    long rows) and two more roundings per entry."""
    e = exp(x - row_max(x))
    return e / dtype_sum(e) * g.astype(x.dtype)


@candidate(kind="logsumexp_grad", name="logsumexp_grad.f32acc")
@reduced_g
def f32acc(x, g):
    """Best practice: softmax(x) * g in float32 for 16-bit inputs, rounded once. Weakness: none known."""
    w = work_dtype(x.dtype)
    x32 = x.astype(w)
    e = exp(x32 - row_max(x32))
    return (e / dtype_sum(e) * g.astype(w)).astype(x.dtype)
