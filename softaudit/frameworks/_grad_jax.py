"""JAX's backward (jax.vjp) of jax.nn.softmax (with and without where=), log_softmax, logsumexp and
dot_product_attention, as plain functions of numpy arrays (numpy in, numpy out, the same dtype).

Not yet marked as candidates: they are wired to the *_grad kinds once the kinds' registry lands. `device` is "cpu"
(default, JAX's CPU device even where it sees a GPU) or "gpu"/"cuda"; 64-bit mode is on, scoped to each call.
"""

from __future__ import annotations

import numpy as np

from ..adapters._bridge import context, from_jax, to_jax
from ._need import need

need("jax", "jax")


def _vjp(forward, inputs, g, device):
    """The VJP of forward at the inputs with cotangent g, as numpy arrays."""
    import jax

    with context("jax"):
        arrays = [to_jax(a, device) for a in inputs]
        out, pullback = jax.vjp(forward, *arrays)
        return [from_jax(grad) for grad in pullback(to_jax(np.asarray(g).astype(out.dtype), device))]


def softmax_grad(x, g, axis=-1, device=None):
    """The VJP of jax.nn.softmax(x, axis)."""
    import jax

    return _vjp(lambda t: jax.nn.softmax(t, axis=axis), [x], g, device)[0]


def softmax_where_grad(x, mask, g, axis=-1, device=None):
    """The VJP of jax.nn.softmax(x, axis, where=mask)."""
    import jax

    return _vjp(lambda t: jax.nn.softmax(t, axis=axis, where=mask), [x], g, device)[0]


def log_softmax_grad(x, g, axis=-1, device=None):
    """The VJP of jax.nn.log_softmax(x, axis)."""
    import jax

    return _vjp(lambda t: jax.nn.log_softmax(t, axis=axis), [x], g, device)[0]


def logsumexp_grad(x, g, axis=-1, device=None):
    """The VJP of jax.nn.logsumexp(x, axis); g has x's shape without the axis."""
    import jax

    return _vjp(lambda t: jax.nn.logsumexp(t, axis=axis), [x], g, device)[0]


def dot_product_attention_grad(q, k, v, g, mask=None, device=None):
    """The VJP of jax.nn.dot_product_attention (through softaudit.frameworks.jax's layout), a boolean mask.
    Returns (dq, dk, dv)."""
    from .jax import dot_product_attention

    return tuple(_vjp(lambda q, k, v: dot_product_attention(q, k, v, mask), [q, k, v], g, device))
