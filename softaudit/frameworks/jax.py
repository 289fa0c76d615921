"""JAX's softmax (with and without where=), log_softmax, logsumexp and dot_product_attention, optax's
cross-entropy, and their VJPs by jax.vjp (the *_grad kinds: `jax.nn.softmax_grad`, ...,
`jax.nn.dot_product_attention_grad`, `jax.cross_entropy_grad`).

Inputs arrive as jax arrays of the audited dtype (64-bit mode is switched on, scoped to each call, so float64
stays float64), placed explicitly on the run's device (`--device cuda`; default JAX's CPU device, even where JAX
sees a GPU), where the computation follows them.
"""

from __future__ import annotations

from ..adapters import CandidateSkip, candidate
from ._need import need

need("jax", "jax")


@candidate(kind="softmax", name="jax.nn.softmax", framework="jax")
def softmax(x, axis=-1):
    """jax.nn.softmax(x, axis)."""
    import jax

    return jax.nn.softmax(x, axis=axis)


@candidate(kind="masked_softmax", name="jax.nn.softmax_where", framework="jax")
def softmax_where(x, mask, axis=-1):
    """jax.nn.softmax(x, axis, where=mask)."""
    import jax

    return jax.nn.softmax(x, axis=axis, where=mask)


@candidate(kind="log_softmax", name="jax.nn.log_softmax", framework="jax")
def log_softmax(x, axis=-1):
    """jax.nn.log_softmax(x, axis)."""
    import jax

    return jax.nn.log_softmax(x, axis=axis)


@candidate(kind="logsumexp", name="jax.nn.logsumexp", framework="jax")
def logsumexp(x, axis=-1):
    """jax.nn.logsumexp(x, axis)."""
    import jax

    return jax.nn.logsumexp(x, axis=axis)


@candidate(kind="attention", name="jax.nn.dot_product_attention", framework="jax")
def dot_product_attention(q, k, v, mask=None):
    """jax.nn.dot_product_attention, q k v in its (batch, length, heads, dim) layout, a boolean mask."""
    import jax
    import jax.numpy as jnp

    batch = jnp.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    lq, lk = q.shape[-2], k.shape[-2]

    def layout(a, length):
        a = jnp.broadcast_to(a, batch + (length, a.shape[-1])).reshape((-1, length, a.shape[-1]))
        return a[:, :, None, :]  # (B, T, 1 head, H)

    if v.shape[-1] != q.shape[-1]:
        raise CandidateSkip(f"jax.nn.dot_product_attention needs dv == d (got dv={v.shape[-1]}, d={q.shape[-1]})")
    m = None if mask is None else jnp.broadcast_to(mask, batch + (lq, lk)).reshape((-1, 1, lq, lk))
    out = jax.nn.dot_product_attention(layout(q, lq), layout(k, lk), layout(v, lk), mask=m)
    return out[:, :, 0, :].reshape(batch + (lq, v.shape[-1]))


def _optax():
    """optax, imported when first called; a skip row saying how to install it where it is missing."""
    try:
        import optax
    except ImportError:
        raise CandidateSkip("optax is not installed: pip install 'softaudit[jax]' (or pip install optax)") from None
    return optax


@candidate(kind="cross_entropy", name="jax.cross_entropy", framework="jax")
def cross_entropy(
    logits, target, *, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None, reduction="none"
):
    """optax.losses.softmax_cross_entropy_with_integer_labels in the logits' dtype, with what JAX training code
    typically writes around it: ignored rows' labels set to 0 and their losses to 0, a mean over the rows
    not ignored; label smoothing (optax has none for integer labels) as optax.smooth_labels of a one-hot in the
    logits' dtype into optax.losses.softmax_cross_entropy; Gemma 2's softcap tanh(x / c) * c on the finite logits
    first; PaLM's z_loss * logsumexp**2 per row."""
    import jax
    import jax.numpy as jnp

    optax = _optax()
    ignored = target == ignore_index
    labels = jnp.where(ignored, 0, target)
    z = logits if softcap is None else jnp.where(jnp.isfinite(logits), jnp.tanh(logits / softcap) * softcap, logits)
    if label_smoothing:
        onehot = jax.nn.one_hot(labels, z.shape[-1], dtype=z.dtype)  # (its default dtype follows 64-bit mode)
        loss = optax.losses.softmax_cross_entropy(z, optax.smooth_labels(onehot, label_smoothing))
    else:
        loss = optax.losses.softmax_cross_entropy_with_integer_labels(z, labels)
    if z_loss:
        loss = loss + z_loss * jax.nn.logsumexp(z, axis=-1) ** 2
    loss = jnp.where(ignored, jnp.zeros((), loss.dtype), loss)
    if reduction == "none":
        return loss
    total = loss.sum()
    return total if reduction == "sum" else total / (~ignored).sum().astype(loss.dtype)


# --- Backward: jax.vjp of each op above, for the *_grad kinds. ---


def _vjp(forward, inputs, g):
    """The VJP of forward at the inputs with cotangent g, given in the output's dtype."""
    import jax

    out, pullback = jax.vjp(forward, *inputs)
    return pullback(g.astype(out.dtype))


@candidate(kind="softmax_grad", name="jax.nn.softmax_grad", framework="jax")
def softmax_grad(x, g, axis=-1):
    """The VJP of jax.nn.softmax(x, axis)."""
    return _vjp(lambda t: softmax(t, axis), [x], g)[0]


@candidate(kind="masked_softmax_grad", name="jax.nn.softmax_where_grad", framework="jax")
def softmax_where_grad(x, mask, g, axis=-1):
    """The VJP of jax.nn.softmax(x, axis, where=mask)."""
    return _vjp(lambda t: softmax_where(t, mask, axis), [x], g)[0]


@candidate(kind="log_softmax_grad", name="jax.nn.log_softmax_grad", framework="jax")
def log_softmax_grad(x, g, axis=-1):
    """The VJP of jax.nn.log_softmax(x, axis)."""
    return _vjp(lambda t: log_softmax(t, axis), [x], g)[0]


@candidate(kind="logsumexp_grad", name="jax.nn.logsumexp_grad", framework="jax")
def logsumexp_grad(x, g, axis=-1):
    """The VJP of jax.nn.logsumexp(x, axis)."""
    return _vjp(lambda t: logsumexp(t, axis), [x], g)[0]


@candidate(kind="attention_grad", name="jax.nn.dot_product_attention_grad", framework="jax")
def dot_product_attention_grad(q, k, v, g, mask=None):
    """The VJP of jax.nn.dot_product_attention (in the layout above), a boolean mask: (dq, dk, dv)."""
    return tuple(_vjp(lambda q, k, v: dot_product_attention(q, k, v, mask), [q, k, v], g))


@candidate(kind="cross_entropy_grad", name="jax.cross_entropy_grad", framework="jax")
def cross_entropy_grad(
    logits, target, g, *, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None, reduction="none"
):
    """The VJP of `jax.cross_entropy` (optax's loss and what is written around it): dlogits for the upstream g."""
    options = {"ignore_index": ignore_index, "label_smoothing": label_smoothing, "z_loss": z_loss}
    return _vjp(lambda t: cross_entropy(t, target, **options, softcap=softcap, reduction=reduction), [logits], g)[0]


def _attend(q, k, v, mask, *, bias=None, causal=False, window=None, residual=False):
    """jax.nn.dot_product_attention in its (batch, length, heads, dim) layout, the batch axes flattened into one
    head each; bias in its (batch, heads, Lq, Lk) layout; is_causal and local_window_size as JAX aligns them."""
    import jax
    import jax.numpy as jnp

    batch = jnp.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    lq, lk = q.shape[-2], k.shape[-2]

    def layout(a, length):
        a = jnp.broadcast_to(a, batch + (length, a.shape[-1])).reshape((-1, length, a.shape[-1]))
        return a[:, :, None, :]

    if v.shape[-1] != q.shape[-1]:
        raise CandidateSkip(f"jax.nn.dot_product_attention needs dv == d (got dv={v.shape[-1]}, d={q.shape[-1]})")
    m = None if mask is None else jnp.broadcast_to(mask, batch + (lq, lk)).reshape((-1, 1, lq, lk))
    b = None if bias is None else jnp.broadcast_to(bias, batch + (lq, lk)).reshape((-1, 1, lq, lk)).astype(q.dtype)
    window = None if window is None else tuple(int(w) if w >= 0 else lk for w in window)
    out = jax.nn.dot_product_attention(
        layout(q, lq),
        layout(k, lk),
        layout(v, lk),
        bias=b,
        mask=m,
        is_causal=causal,
        local_window_size=window,
        return_residual=residual,
    )
    o = (out[0] if residual else out)[:, :, 0, :].reshape(batch + (lq, v.shape[-1]))
    return (o, out[1][:, :, 0].reshape(batch + (lq,))) if residual else o


#: What jax.nn.dot_product_attention documents: local_window_size=(left, right) lets "each token" attend the
#: tokens from left before to right after its own position (key j against query i itself), and is_causal is the
#: same alignment (its XLA implementation's mask is jnp.tril(ones((T, S))): key j <= query i). Both top-left, where
#: the attention kind's default is FlashAttention's bottom-right; they agree where Lq == Lk.
CONVENTIONS = {"causal": "top_left", "window": "top_left"}


@candidate(kind="attention", name="jax.nn.dot_product_attention_modified", framework="jax", conventions=CONVENTIONS)
def dot_product_attention_modified(q, k, v, mask=None, *, bias=None, causal=False, window=None):
    """jax.nn.dot_product_attention with its own bias=, is_causal= and local_window_size=(left, right), both
    aligned top-left as JAX documents them (query i against key i; declared: `CONVENTIONS`)."""
    return _attend(q, k, v, mask, bias=bias, causal=causal, window=window)


@candidate(
    kind="attention_grad", name="jax.nn.dot_product_attention_modified_grad", framework="jax", conventions=CONVENTIONS
)
def dot_product_attention_modified_grad(q, k, v, g, mask=None, *, causal=False, window=None, bias=None):
    """The VJP of `jax.nn.dot_product_attention_modified` with is_causal=, local_window_size= (aligned top-left as
    JAX documents them, as its forward; declared: `CONVENTIONS`) and bias=: (dq, dk, dv)."""
    options = {"causal": causal, "window": window, "bias": bias}
    return tuple(_vjp(lambda q, k, v: _attend(q, k, v, mask, **options), [q, k, v], g))


@candidate(kind="attention", name="jax.nn.dot_product_attention_sinks", framework="jax")
def dot_product_attention_sinks(q, k, v, mask=None, *, sinks=None, bias=None):
    """jax.nn.dot_product_attention with each head's sink as one more key whose score is the sink's logit (its bias)
    and whose value is 0, as model code adds sinks to a kernel without them (gpt-oss's JAX port); the mask as its
    boolean mask, the sink's column always kept. A case without sinks is skipped."""
    import jax.numpy as jnp

    if sinks is None:
        raise CandidateSkip("takes a case with sinks (without them it is jax.nn.dot_product_attention_modified)")
    lq, lk = q.shape[-2], k.shape[-2]
    heads = jnp.asarray(sinks).reshape(sinks.shape + (1, 1))  # (one per head: the axis before Lq)
    batch = jnp.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2], heads.shape[:-2])
    scores_bias = jnp.zeros(batch + (lq, lk), q.dtype) if bias is None else jnp.broadcast_to(bias, batch + (lq, lk))
    full_bias = jnp.concatenate(
        [scores_bias.astype(q.dtype), jnp.broadcast_to(heads, batch + (lq, 1)).astype(q.dtype)], -1
    )
    keep = jnp.ones(batch + (lq, lk), bool) if mask is None else jnp.broadcast_to(mask, batch + (lq, lk))
    full_mask = jnp.concatenate([keep, jnp.ones(batch + (lq, 1), bool)], axis=-1)
    k1 = jnp.concatenate([jnp.broadcast_to(k, batch + k.shape[-2:]), jnp.zeros(batch + (1, k.shape[-1]), k.dtype)], -2)
    v1 = jnp.concatenate([jnp.broadcast_to(v, batch + v.shape[-2:]), jnp.zeros(batch + (1, v.shape[-1]), v.dtype)], -2)
    return _attend(q, k1, v1, full_mask, bias=full_bias)


@candidate(kind="attention_grad", name="jax.nn.dot_product_attention_sinks_grad", framework="jax")
def dot_product_attention_sinks_grad(q, k, v, g, mask=None, *, sinks=None, bias=None):
    """The VJP of `jax.nn.dot_product_attention_sinks` (the sink a key of k = 0, v = 0): (dq, dk, dv). A case without
    sinks is skipped."""
    return tuple(_vjp(lambda q, k, v: dot_product_attention_sinks(q, k, v, mask, sinks=sinks, bias=bias), [q, k, v], g))


@candidate(kind="attention_sinks_grad", name="jax.nn.dot_product_attention_sinks_learned_grad", framework="jax")
def dot_product_attention_sinks_learned_grad(q, k, v, g, sinks, mask=None, *, bias=None):
    """The VJP of `jax.nn.dot_product_attention_sinks` with respect to q, k, v and the sinks: (dq, dk, dv, dsinks)."""
    return tuple(
        _vjp(lambda q, k, v, z: dot_product_attention_sinks(q, k, v, mask, sinks=z, bias=bias), [q, k, v, sinks], g)
    )


@candidate(kind="attention_lse", name="jax.nn.dot_product_attention_lse", framework="jax")
def dot_product_attention_lse(q, k, v, mask=None):
    """jax.nn.dot_product_attention(..., return_residual=True): the output and each query's logsumexp."""
    return _attend(q, k, v, mask, residual=True)
