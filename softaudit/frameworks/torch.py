"""PyTorch's softmax, log_softmax, logsumexp, masked softmax idioms, scaled_dot_product_attention and
cross_entropy, and their backward by autograd (the *_grad kinds: `torch.softmax_grad`, ...,
`torch.sdpa_bool_math_grad`, `torch.cross_entropy_grad`).

Inputs arrive as torch tensors of the audited dtype (bit for bit; bfloat16 and float8 included), on the run's
device (`--device cuda`, `audit(..., device="cuda")`; default the CPU). Attention goes through each SDPA backend by
name (math, flash, efficient, cudnn); a backend the device lacks gives a `skip` row. `sdpa(..., device="cuda")`
makes a candidate pinned to a device whatever the run's; `sdpa_grad(...)` likewise for its backward.

(Longer than the house's 400 lines: frameworks/ holds one module per framework, and torch's ops share its call wrapper
(`_run`), the mask and bias conversions and the backward by autograd (`_vjp`).)
"""

from __future__ import annotations

from ..adapters import CandidateSkip, candidate
from ._need import need

need("torch", "torch")


_UNSUPPORTED = ("not implemented for", "No available kernel", "No viable backend", "Unsupported")


def _run(fn):
    """Run a torch op; an op or backend torch lacks for a dtype becomes a skip with torch's reason."""
    import warnings

    try:
        with warnings.catch_warnings():  # torch explains at length why a fused kernel was not used: noise here
            warnings.simplefilter("ignore", UserWarning)
            return fn()
    except (RuntimeError, NotImplementedError) as exc:
        if any(reason in str(exc) for reason in _UNSUPPORTED):
            raise CandidateSkip(str(exc).splitlines()[0][:200]) from None
        raise


@candidate(kind="softmax", name="torch.softmax", framework="torch")
def softmax(x, axis=-1):
    """torch.softmax(x, dim)."""
    return _run(lambda: x.softmax(axis))


@candidate(kind="log_softmax", name="torch.log_softmax", framework="torch")
def log_softmax(x, axis=-1):
    """torch.log_softmax(x, dim)."""
    return _run(lambda: x.log_softmax(axis))


@candidate(kind="logsumexp", name="torch.logsumexp", framework="torch")
def logsumexp(x, axis=-1):
    """torch.logsumexp(x, dim)."""
    return _run(lambda: x.logsumexp(axis))


@candidate(kind="masked_softmax", name="torch.masked_fill_neginf", framework="torch")
def masked_fill_neginf(x, mask, axis=-1):
    """x.masked_fill(~mask, -inf).softmax(dim): the common idiom."""
    return _run(lambda: x.masked_fill(~mask, float("-inf")).softmax(axis))


@candidate(kind="masked_softmax", name="torch.masked_fill_finfo_min", framework="torch")
def masked_fill_finfo_min(x, mask, axis=-1):
    """x.masked_fill(~mask, torch.finfo(x.dtype).min).softmax(dim): the idiom that avoids NaN."""
    import torch

    return _run(lambda: x.masked_fill(~mask, torch.finfo(x.dtype).min).softmax(axis))


def _softcapped(x, softcap):
    """Gemma 2's softcap as its model code writes it, tanh(x / c) * c in x's dtype, on the finite logits only: a
    -inf lane (vocabulary padding) stays -inf, where the bare formula would make it -c (unsloth PR #10616)."""
    import torch

    if softcap is None:
        return x
    return torch.where(torch.isfinite(x), torch.tanh(x / softcap) * softcap, x)


def _z_loss_term(z, ignored, z_loss, reduction):
    """PaLM's z-loss as model code adds it beside F.cross_entropy (OLMo): z_loss * logsumexp(z)**2 per row in the
    logits' dtype, 0 on ignored rows, then summed, or averaged over the rows not ignored (the kind's mean)."""
    import torch

    term = torch.where(ignored, 0, z_loss * z.logsumexp(-1).pow(2))
    if reduction == "none":
        return term
    total = term.sum()
    return total if reduction == "sum" else total / (~ignored).sum()


@candidate(kind="cross_entropy", name="torch.cross_entropy", framework="torch")
def cross_entropy(
    logits, target, *, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None, reduction="none"
):
    """F.cross_entropy(logits, target, ignore_index=, label_smoothing=, reduction=) on the logits' own dtype (torch's
    own handling of bfloat16 and float16, no upcast). torch has no softcap or z-loss: they are added around it as
    model code does (Gemma 2's tanh(x / c) * c on the finite logits first; PaLM / OLMo's z_loss * logsumexp**2 per
    row, reduced as the loss is)."""
    from torch.nn.functional import cross_entropy as ce

    z = _softcapped(logits, softcap)
    options = {"ignore_index": ignore_index, "label_smoothing": label_smoothing, "reduction": reduction}
    loss = _run(lambda: ce(z, target, **options))
    if z_loss:
        loss = loss + _run(lambda: _z_loss_term(z, target == ignore_index, z_loss, reduction))
    return loss


_BACKENDS = {"math": "MATH", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION"}


def _attend(q, k, v, mask, mask_style: str, backend: str, causal: bool = False):
    """scaled_dot_product_attention with a bool mask, a float mask (0 / -inf) or is_causal, on one backend; causal:
    a case's causal limit as is_causal itself (aligned top-left, as SDPA documents it)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    kwargs = {}
    if causal:
        if mask is not None:
            raise CandidateSkip("is_causal takes no mask beside it")
        kwargs["is_causal"] = True
    elif mask is not None:
        if mask_style == "causal":
            lq, lk = mask.shape[-2:]
            causal = torch.ones(lq, lk, dtype=torch.bool, device=mask.device).tril()
            if not bool((mask == causal).all()):
                raise CandidateSkip("is_causal serves causal masks only")
            kwargs["is_causal"] = True
        elif mask_style == "float":
            kwargs["attn_mask"] = _additive(q, mask)
        else:
            kwargs["attn_mask"] = mask
    # The fused kernels take (batch, heads, length, dim), as models call them.
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    q4, k4, v4 = (a.expand(batch + a.shape[-2:]).reshape((-1, 1) + a.shape[-2:]) for a in (q, k, v))
    if "attn_mask" in kwargs:
        m = kwargs["attn_mask"]
        kwargs["attn_mask"] = m.expand(batch + m.shape[-2:]).reshape((-1, 1) + m.shape[-2:])
    with sdpa_kernel([getattr(SDPBackend, _BACKENDS[backend])]):
        out = _run(lambda: scaled_dot_product_attention(q4, k4, v4, **kwargs))
    return out.reshape(batch + out.shape[-2:])


def _sdpa_name(mask_style: str, backend: str, device: str | None) -> str:
    return f"sdpa_{mask_style}_{backend}" + (f"_{device}" if device and device != "cpu" else "")


#: What scaled_dot_product_attention documents of is_causal: "a lower triangular matrix when the mask is a square
#: matrix", "the form of the upper left causal bias" (torch.nn.attention.bias.CausalBias) when it is not: top-left
#: (key j <= query i), where the attention kind's default is FlashAttention's bottom-right. The is_causal candidates
#: declare it, and take a case's causal limit as is_causal.
SDPA_CONVENTIONS = {"causal": "top_left"}


def sdpa(mask_style: str, backend: str, device: str | None = None):
    """A candidate calling scaled_dot_product_attention with a bool mask, a float mask (0 / -inf) or is_causal,
    restricted to one backend (math, flash, efficient, cudnn). The is_causal one takes a case's causal= too."""

    if mask_style == "causal":

        def attend(q, k, v, mask=None, *, causal=False):
            return _attend(q, k, v, mask, mask_style, backend, causal)

    else:

        def attend(q, k, v, mask=None):
            return _attend(q, k, v, mask, mask_style, backend)

    attend.__name__ = attend.__qualname__ = name = _sdpa_name(mask_style, backend, device)
    attend.__doc__ = f"scaled_dot_product_attention, {mask_style} mask, {backend} backend."
    conventions = SDPA_CONVENTIONS if mask_style == "causal" else None
    return candidate(
        attend, kind="attention", name=f"torch.{name}", framework="torch", device=device, conventions=conventions
    )


sdpa_bool_math = sdpa("bool", "math")
sdpa_float_math = sdpa("float", "math")
sdpa_causal_math = sdpa("causal", "math")
sdpa_bool_flash = sdpa("bool", "flash")
sdpa_float_flash = sdpa("float", "flash")
sdpa_causal_flash = sdpa("causal", "flash")
sdpa_bool_efficient = sdpa("bool", "efficient")
sdpa_bool_cudnn = sdpa("bool", "cudnn")


# --- Backward: autograd's vector-Jacobian product of each op above, for the *_grad kinds. ---


def _vjp(forward, inputs, g):
    """The gradients of <g, forward(*inputs)> with respect to the inputs, by autograd; g in the output's dtype."""
    import torch

    with torch.enable_grad():
        leaves = [t.detach().requires_grad_() for t in inputs]
        out = _run(lambda: forward(*leaves))
        return _run(lambda: torch.autograd.grad(out, leaves, g.to(out.dtype)))


@candidate(kind="softmax_grad", name="torch.softmax_grad", framework="torch")
def softmax_grad(x, g, axis=-1):
    """The backward of torch.softmax(x, dim)."""
    return _vjp(lambda t: softmax(t, axis), [x], g)[0]


@candidate(kind="log_softmax_grad", name="torch.log_softmax_grad", framework="torch")
def log_softmax_grad(x, g, axis=-1):
    """The backward of torch.log_softmax(x, dim)."""
    return _vjp(lambda t: log_softmax(t, axis), [x], g)[0]


@candidate(kind="logsumexp_grad", name="torch.logsumexp_grad", framework="torch")
def logsumexp_grad(x, g, axis=-1):
    """The backward of torch.logsumexp(x, dim)."""
    return _vjp(lambda t: logsumexp(t, axis), [x], g)[0]


@candidate(kind="masked_softmax_grad", name="torch.masked_fill_neginf_grad", framework="torch")
def masked_fill_neginf_grad(x, mask, g, axis=-1):
    """The backward of x.masked_fill(~mask, -inf).softmax(dim): masked_fill's backward zeroes the filled entries,
    so a fully masked row gets 0 (its forward is NaN)."""
    return _vjp(lambda t: masked_fill_neginf(t, mask, axis), [x], g)[0]


@candidate(kind="masked_softmax_grad", name="torch.masked_fill_finfo_min_grad", framework="torch")
def masked_fill_finfo_min_grad(x, mask, g, axis=-1):
    """The backward of x.masked_fill(~mask, torch.finfo(x.dtype).min).softmax(dim)."""
    return _vjp(lambda t: masked_fill_finfo_min(t, mask, axis), [x], g)[0]


@candidate(kind="cross_entropy_grad", name="torch.cross_entropy_grad", framework="torch")
def cross_entropy_grad(
    logits, target, g, *, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None, reduction="none"
):
    """The backward of `torch.cross_entropy` (autograd through F.cross_entropy, and the softcap and z-loss around
    it): dlogits for the upstream g (per row, or a scalar for a mean or sum)."""
    options = {"ignore_index": ignore_index, "label_smoothing": label_smoothing, "z_loss": z_loss}
    return _vjp(lambda t: cross_entropy(t, target, **options, softcap=softcap, reduction=reduction), [logits], g)[0]


def sdpa_grad(mask_style: str, backend: str, device: str | None = None):
    """A candidate of attention_grad: autograd's (dq, dk, dv) through `sdpa(mask_style, backend, device)`'s call
    (the backend's own backward kernel)."""

    if mask_style == "causal":

        def attend_grad(q, k, v, g, mask=None, *, causal=False):
            return _vjp(lambda q, k, v: _attend(q, k, v, mask, mask_style, backend, causal), [q, k, v], g)

    else:

        def attend_grad(q, k, v, g, mask=None):
            return _vjp(lambda q, k, v: _attend(q, k, v, mask, mask_style, backend), [q, k, v], g)

    attend_grad.__name__ = attend_grad.__qualname__ = name = _sdpa_name(mask_style, backend, device) + "_grad"
    attend_grad.__doc__ = f"The backward of scaled_dot_product_attention, {mask_style} mask, {backend} backend."
    conventions = SDPA_CONVENTIONS if mask_style == "causal" else None
    return candidate(
        attend_grad,
        kind="attention_grad",
        name=f"torch.{name}",
        framework="torch",
        device=device,
        conventions=conventions,
    )


sdpa_bool_math_grad = sdpa_grad("bool", "math")
sdpa_float_math_grad = sdpa_grad("float", "math")
sdpa_causal_math_grad = sdpa_grad("causal", "math")
sdpa_bool_flash_grad = sdpa_grad("bool", "flash")
sdpa_float_flash_grad = sdpa_grad("float", "flash")
sdpa_causal_flash_grad = sdpa_grad("causal", "flash")
sdpa_bool_efficient_grad = sdpa_grad("bool", "efficient")
sdpa_bool_cudnn_grad = sdpa_grad("bool", "cudnn")


def _keep_and_bias(q, k, mask, bias, alibi_slopes, causal, window):
    """The boolean keep (..., Lq, Lk) and the float bias of the attention kind's modifiers, as torch tensors on q's
    device: the mask with causal and window (bottom-right aligned: key j against query i + Lk - Lq) and the bias
    with ALiBi's -slope |i + Lk - Lq - j| (float32 for 16- and 32-bit inputs, float64 for float64)."""
    import torch

    lq, lk = q.shape[-2], k.shape[-2]
    offset = torch.arange(lk, device=q.device)[None, :] - (torch.arange(lq, device=q.device)[:, None] + lk - lq)
    keep = torch.ones(lq, lk, dtype=torch.bool, device=q.device) if mask is None else mask
    if causal:
        keep = keep & (offset <= 0)
    if window is not None:
        left, right = window
        keep = keep & ((offset >= -left) | (left < 0)) & ((offset <= right) | (right < 0))
    extra = None if bias is None else bias
    if alibi_slopes is not None:  # (float32 for 16-bit inputs, as FlashAttention takes the slopes; float64 stays)
        wide = torch.float64 if q.dtype == torch.float64 else torch.float32
        alibi = -alibi_slopes.to(wide)[:, None, None] * offset.abs().to(wide)
        extra = alibi if extra is None else extra + alibi
    return keep, extra


def _additive(q, keep, extra=None):
    """A boolean mask as a float attn_mask in q's dtype and device (0 where kept, -inf elsewhere), plus an additive
    bias (the bias and ALiBi's, rounded to q's dtype) where there is one."""
    import torch

    additive = torch.where(
        keep,
        torch.zeros((), dtype=q.dtype, device=q.device),
        torch.tensor(float("-inf"), dtype=q.dtype, device=q.device),
    )
    return additive if extra is None else additive + extra.to(q.dtype)


def _as_heads(q, k, v, *planes):
    """q, k, v (and (..., Lq, Lk) planes) with their batch axes broadcast and flattened into heads of one batch
    entry, (1, B, L, d), as the 4-D kernels take them; and the batch shape to restore."""
    import torch

    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])

    def heads(a):
        return a.expand(batch + a.shape[-2:]).reshape((1, -1) + a.shape[-2:])

    return batch, heads(q), heads(k), heads(v), *(None if p is None else heads(p) for p in planes)


@candidate(kind="attention", name="torch.flex_attention", framework="torch")
def flex_attention(q, k, v, mask=None, *, softcap=None, bias=None, alibi_slopes=None, causal=False, window=None):
    """torch.nn.attention.flex_attention with a score_mod for the softcap (tanh(s / c) * c, in the scores' dtype), the
    bias and ALiBi, and the mask, causal and window applied in it (-inf), as FlexAttention's own examples write them
    (unfused on the CPU: flex_attention without torch.compile). No sinks."""
    import torch
    from torch.nn.attention.flex_attention import flex_attention as flex

    keep, extra = _keep_and_bias(q, k, mask, bias, alibi_slopes, causal, window)
    planes = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]) + (q.shape[-2], k.shape[-2])
    batch, q4, k4, v4, keep4, extra4 = _as_heads(
        q, k, v, keep.expand(planes), None if extra is None else extra.expand(planes)
    )

    def score_mod(score, b, h, i, j):
        if softcap is not None:
            score = torch.tanh(score / softcap) * softcap
        if extra4 is not None:
            score = score + extra4[b, h, i, j].to(score.dtype)
        return torch.where(keep4[b, h, i, j], score, -float("inf"))

    out = _run(lambda: flex(q4, k4, v4, score_mod=score_mod))
    return out.reshape(batch + out.shape[-2:])


@candidate(kind="attention", name="torch.flex_attention_block_mask", framework="torch")
def flex_attention_block_mask(
    q, k, v, mask=None, *, softcap=None, bias=None, alibi_slopes=None, causal=False, window=None
):
    """torch.nn.attention.flex_attention with the mask, causal and window as a mask_mod made into a BlockMask
    (create_block_mask: blocks with no kept key are skipped, as the fused kernels skip them) and the softcap, bias and
    ALiBi in a score_mod, as FlexAttention's documentation writes causal and sliding-window attention. No sinks."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask
    from torch.nn.attention.flex_attention import flex_attention as flex

    keep, extra = _keep_and_bias(q, k, mask, bias, alibi_slopes, causal, window)
    planes = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]) + (q.shape[-2], k.shape[-2])
    batch, q4, k4, v4, keep4, extra4 = _as_heads(
        q, k, v, keep.expand(planes), None if extra is None else extra.expand(planes)
    )

    def mask_mod(b, h, i, j):
        return keep4[b, h, i, j]

    def score_mod(score, b, h, i, j):
        if softcap is not None:
            score = torch.tanh(score / softcap) * softcap
        return score if extra4 is None else score + extra4[b, h, i, j].to(score.dtype)

    blocks = create_block_mask(mask_mod, 1, q4.shape[1], q4.shape[2], k4.shape[2], device=q.device.type)
    modified = softcap is not None or extra4 is not None
    out = _run(lambda: flex(q4, k4, v4, score_mod=score_mod if modified else None, block_mask=blocks))
    return out.reshape(batch + out.shape[-2:])


@candidate(kind="attention", name="torch.sdpa_bias", framework="torch")
def sdpa_bias(q, k, v, mask=None, *, bias=None, alibi_slopes=None, causal=False, window=None):
    """scaled_dot_product_attention with the bias, ALiBi's and the mask, causal and window limits (-inf) folded into
    one float attn_mask in q's dtype, as model code passes a relative-position bias (T5, ALiBi) to SDPA."""
    from torch.nn.functional import scaled_dot_product_attention

    keep, extra = _keep_and_bias(q, k, mask, bias, alibi_slopes, causal, window)
    return _run(lambda: scaled_dot_product_attention(q, k, v, attn_mask=_additive(q, keep, extra)))


@candidate(kind="attention_grad", name="torch.sdpa_bias_grad", framework="torch")
def sdpa_bias_grad(q, k, v, g, mask=None, *, causal=False, window=None, bias=None, alibi_slopes=None):
    """The backward of `torch.sdpa_bias` with the mask, causal and window (bottom-right aligned), the bias and ALiBi's
    folded into its float attn_mask: autograd through the SDPA backend that takes it (FlexAttention's backward has no
    CPU kernel); (dq, dk, dv)."""
    options = {"causal": causal, "window": window, "bias": bias, "alibi_slopes": alibi_slopes}
    return _vjp(lambda q, k, v: sdpa_bias(q, k, v, mask, **options), [q, k, v], g)


@candidate(kind="attention_grad", name="torch.sdpa_sinks_grad", framework="torch")
def sdpa_sinks_grad(q, k, v, g, mask=None, *, sinks=None, bias=None, alibi_slopes=None, causal=False, window=None):
    """The backward of `torch.sdpa_sinks` (each head's sink a key of k = 0, v = 0 whose score is its logit, as
    gpt-oss's reference attention concatenates it): autograd's (dq, dk, dv). A case without sinks is skipped."""
    options = {"sinks": sinks, "bias": bias, "alibi_slopes": alibi_slopes, "causal": causal, "window": window}
    return _vjp(lambda q, k, v: sdpa_sinks(q, k, v, mask, **options), [q, k, v], g)


def _capped_attention(q, k, v, mask, softcap, bias=None, alibi_slopes=None, causal=False, window=None):
    """Attention written out as model code writes a softcap (Gemma 2's eager attention): scores q @ k^T * c,
    tanh(s / softcap) * softcap, the mask, causal and window limits (-inf) with the bias and ALiBi's added as
    `torch.sdpa_bias` folds them (`_additive`), softmax, @ v; every step in q's dtype."""
    import math

    keep, extra = _keep_and_bias(q, k, mask, bias, alibi_slopes, causal, window)
    scores = q @ k.transpose(-1, -2) * (1 / math.sqrt(q.shape[-1]))
    scores = _run(lambda: (scores / softcap).tanh() * softcap)
    return _run(lambda: (scores + _additive(q, keep, extra)).softmax(-1) @ v)


@candidate(kind="attention_grad", name="torch.softcap_attention_grad", framework="torch")
def softcap_attention_grad(
    q, k, v, g, mask=None, *, softcap=None, causal=False, window=None, bias=None, alibi_slopes=None
):
    """The backward of attention with a tanh softcap written out in torch (`_capped_attention`, Gemma 2's eager
    form): autograd's (dq, dk, dv), the cap's derivative 1 - tanh**2 by tanh's own backward. SDPA and FlexAttention's
    CPU path have no backward with a cap, so this is torch's form that takes one. A case without a softcap is
    skipped (it is `torch.sdpa_bias_grad`'s)."""
    if softcap is None:
        raise CandidateSkip("takes a case with a softcap (without one it is torch.sdpa_bias_grad)")
    options = {"bias": bias, "alibi_slopes": alibi_slopes, "causal": causal, "window": window}
    return _vjp(lambda q, k, v: _capped_attention(q, k, v, mask, softcap, **options), [q, k, v], g)


@candidate(kind="attention", name="torch.sdpa_sinks", framework="torch")
def sdpa_sinks(q, k, v, mask=None, *, sinks=None, bias=None, alibi_slopes=None, causal=False, window=None):
    """scaled_dot_product_attention with each head's sink as one more key whose score is the sink's logit and whose
    value is 0 (k = 0, the logit in the float attn_mask: the concatenated sink column of gpt-oss's reference
    attention, as model code writes sinks for a kernel without them); the mask, causal, window, bias and ALiBi in
    the same attn_mask. A case without sinks is sdpa_bias's (a skip)."""
    import torch
    from torch.nn.functional import scaled_dot_product_attention

    if sinks is None:
        raise CandidateSkip("takes a case with sinks (without them it is torch.sdpa_bias)")
    keep, extra = _keep_and_bias(q, k, mask, bias, alibi_slopes, causal, window)
    additive = _additive(q, keep, extra)
    lq, lk = q.shape[-2], k.shape[-2]
    heads = sinks.to(q.dtype).reshape(sinks.shape + (1, 1))  # (one per head: the axis before Lq)
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2], additive.shape[:-2], heads.shape[:-2])
    additive = torch.cat([additive.expand(batch + (lq, lk)), heads.expand(batch + (lq, 1))], dim=-1)
    k1 = torch.cat([k.expand(batch + k.shape[-2:]), k.new_zeros(batch + (1, k.shape[-1]))], dim=-2)
    v1 = torch.cat([v.expand(batch + v.shape[-2:]), v.new_zeros(batch + (1, v.shape[-1]))], dim=-2)
    q1 = q.expand(batch + q.shape[-2:])
    return _run(lambda: scaled_dot_product_attention(q1, k1, v1, attn_mask=additive))


@candidate(kind="attention_sinks_grad", name="torch.sdpa_sinks_learned_grad", framework="torch")
def sdpa_sinks_learned_grad(q, k, v, g, sinks, mask=None, *, bias=None, alibi_slopes=None, causal=False, window=None):
    """The backward of `torch.sdpa_sinks` with the sinks learned (gpt-oss's nn.Parameter per head): autograd's
    (dq, dk, dv, dsinks)."""
    options = {"bias": bias, "alibi_slopes": alibi_slopes, "causal": causal, "window": window}
    return _vjp(lambda q, k, v, z: sdpa_sinks(q, k, v, mask, sinks=z, **options), [q, k, v, sinks], g)


@candidate(kind="attention_lse", name="torch.sdpa_flash_cpu_lse", framework="torch")
def sdpa_flash_cpu_lse(q, k, v, mask=None):
    """torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: SDPA's CPU flash kernel, which returns the
    output and each query's logsumexp (float32, cast to the dtype by the audit); a mask as a float attn_mask."""
    import torch

    if q.device.type != "cpu":
        raise CandidateSkip("the CPU flash kernel runs on the CPU")
    additive = None
    if mask is not None:
        additive = _additive(q, mask).expand(torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]) + mask.shape[-2:])
    batch, q4, k4, v4, mask4 = _as_heads(q, k, v, additive)
    kwargs = {} if mask4 is None else {"attn_mask": mask4}
    out, lse = _run(lambda: torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q4, k4, v4, **kwargs))
    return out.reshape(batch + out.shape[-2:]), lse.reshape(batch + lse.shape[-1:])
