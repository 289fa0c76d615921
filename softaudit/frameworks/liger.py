"""Liger-Kernel's Triton ops of softaudit's kinds, forward and backward: its cross-entropy (every option the kind
has: ignore_index, label_smoothing, z-loss as lse_square_scale, softcap, the three reductions), its fused linear
cross-entropy (the same options and a bias) and its softmax.

    softaudit run softaudit.frameworks.liger --dtype float32 --dtype bfloat16            # any machine
    softaudit run softaudit.frameworks.liger --device cuda                               # on the GPU

The candidates are framework="triton": on a GPU the kernels run as they are; on the CPU in Triton's interpreter,
corrected to a GPU's rounding (docs/triton.md). They call Liger's autograd Functions (what liger_kernel.
transformers.functional calls, without its import of Hugging Face transformers in older releases), keywords bound to
each release's own signature, so every release from 0.5 on loads; an op or option a release lacks is a `skip` row
naming the release. The published audit and its bug reports: docs/kernels.md.
"""

from __future__ import annotations

import functools
import inspect

from ..adapters import CandidateSkip, candidate
from ._need import need

need("torch", "torch")
need("liger_kernel", "liger")


def version() -> str:
    from importlib import metadata

    return metadata.version("liger_kernel")


@functools.cache
def _function(name: str):
    """Liger's autograd Function `name` from liger_kernel.ops (whose modules import neither Hugging Face
    transformers nor what a release's model patches need), or None where the release has none."""
    try:
        if name == "LigerCrossEntropyFunction":
            from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction as found
        elif name == "LigerFusedLinearCrossEntropyFunction":
            from liger_kernel.ops.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyFunction as found
        else:
            from liger_kernel.ops.softmax import LigerSoftmaxFunction as found
    except ImportError as exc:
        if not (getattr(exc, "name", "") or "").startswith("liger_kernel.ops"):
            raise
        return None
    return found


def _apply(name: str, *args, **keywords):
    """Function.apply with the keywords bound to the release's own forward signature (0.5's has no `weight`,
    later ones put it after the target); CandidateSkip naming the release where the op or a keyword is missing."""
    fn = _function(name)
    if fn is None:
        raise CandidateSkip(f"liger-kernel {version()} has no {name}")
    parameters = inspect.signature(fn.forward).parameters
    missing = [k for k in keywords if k not in parameters]
    if missing:
        raise CandidateSkip(f"liger-kernel {version()}'s {name} takes no {', '.join(missing)}")
    if name == "LigerCrossEntropyFunction" and "weight" in parameters:  # (class weights, required since 0.6: none)
        keywords = {"weight": None} | keywords
    bound = inspect.signature(fn.forward).bind(None, *args, **keywords)
    bound.apply_defaults()
    return fn.apply(*list(bound.arguments.values())[1:])


def _keywords(ignore_index, label_smoothing, z_loss, softcap, reduction) -> dict:
    """The cross-entropy options in Liger's names (z-loss is lse_square_scale), each only where it is set: a release
    that lacks one skips only the cases that set it."""
    keywords = {"ignore_index": ignore_index, "reduction": reduction}
    if label_smoothing:
        keywords["label_smoothing"] = float(label_smoothing)
    if z_loss:
        keywords["lse_square_scale"] = float(z_loss)
    if softcap is not None:
        keywords["softcap"] = float(softcap)
    return keywords


def _cross_entropy(logits, target, ignore_index, label_smoothing, z_loss, softcap, reduction):
    keywords = _keywords(ignore_index, label_smoothing, z_loss, softcap, reduction)
    out = _apply("LigerCrossEntropyFunction", logits, target, **keywords)
    return out[0] if isinstance(out, tuple) else out  # (the loss first: z_loss and later outputs follow)


@candidate(kind="cross_entropy", name="liger.cross_entropy", framework="triton")
def cross_entropy(
    logits, target, *, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None, reduction="none"
):
    """LigerCrossEntropyFunction (liger_cross_entropy) with ignore_index=, label_smoothing=,
    lse_square_scale=z_loss, softcap=, reduction=: one Triton program per row, the loss and the gradient in one
    pass (the gradient overwrites the logits: here a copy)."""
    x = logits.clone().requires_grad_(True)  # (its kernel writes the gradient where the logits were)
    return _cross_entropy(x, target, ignore_index, label_smoothing, z_loss, softcap, reduction).detach()


@candidate(kind="cross_entropy_grad", name="liger.cross_entropy_grad", framework="triton")
def cross_entropy_grad(
    logits, target, g, *, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None, reduction="none"
):
    """The backward of `liger.cross_entropy` by autograd: the forward's gradient, scaled by g in Liger's backward
    (its element_mul kernel for a mean or sum, skipped when g is exactly 1)."""
    x = logits.clone().requires_grad_(True)
    loss = _cross_entropy(x, target, ignore_index, label_smoothing, z_loss, softcap, reduction)
    loss.backward(g.reshape(loss.shape).to(loss.dtype))
    return x.grad


_FUSED = "LigerFusedLinearCrossEntropyFunction"


def _fused(x, weight, target, bias, options: dict, **more):
    """LigerFusedLinearCrossEntropyFunction's loss and the bias it was given: for a gradient a zero bias where the
    case has none (so that dbias is Liger's own, at a zero bias), the options bound to the release's signature."""
    import torch

    keywords = _keywords(**({"ignore_index": -100, "label_smoothing": 0.0, "z_loss": 0.0, "softcap": None} | options))
    if bias is None and weight.requires_grad:  # (the forward alone runs without one, as a layer without a bias)
        bias = torch.zeros(weight.shape[0], dtype=weight.dtype, requires_grad=True)
    out = _apply(_FUSED, x, weight, target, bias=bias, **keywords, **more)
    loss = out[0] if isinstance(out, tuple) else out
    if options.get("reduction") == "none" and loss.ndim == 0:  # (0.5 sums the rows whatever the reduction)
        raise CandidateSkip(f"liger-kernel {version()}'s {_FUSED} takes no reduction='none' (it returns the sum)")
    return loss, bias


@candidate(kind="linear_cross_entropy", name="liger.fused_linear_cross_entropy", framework="triton")
def fused_linear_cross_entropy(x, weight, target, *, bias=None, reduction="none", **options):
    """LigerFusedLinearCrossEntropyFunction (liger_fused_linear_cross_entropy) with bias=, ignore_index=,
    label_smoothing=, lse_square_scale=z_loss, softcap=, reduction=: the rows in chunks of about N / ceil(V / H),
    each chunk's logits x W^T (+ b) by torch in the dtype, then Liger's cross-entropy kernel on them."""
    return _fused(x, weight, target, bias, options | {"reduction": reduction})[0].detach()


def _fused_grad(x, weight, target, g, bias, options: dict, **more):
    leaves = [a.detach().clone().requires_grad_(True) for a in (x, weight)]
    if bias is not None:
        bias = bias.detach().clone().requires_grad_(True)
    loss, bias = _fused(*leaves, target, bias, options, **more)
    loss.backward(g.reshape(loss.shape).to(loss.dtype))
    return leaves[0].grad, leaves[1].grad, bias.grad


@candidate(kind="linear_cross_entropy_grad", name="liger.fused_linear_cross_entropy_grad", framework="triton")
def fused_linear_cross_entropy_grad(x, weight, target, g, *, bias=None, reduction="none", **options):
    """The backward of `liger.fused_linear_cross_entropy` by autograd, (dx, dweight, dbias): computed in its
    forward for a mean or sum (each chunk's dz in the dtype, dx = dz W per chunk, dweight and dbias accumulated
    across chunks in the dtype: its default accum_dtype=None) and scaled by g in its backward; recomputed in the
    backward with each row's g for reduction='none' (0.8 on)."""
    return _fused_grad(x, weight, target, g, bias, options | {"reduction": reduction})


@candidate(kind="linear_cross_entropy_grad", name="liger.fused_linear_cross_entropy_grad_f32acc", framework="triton")
def fused_linear_cross_entropy_grad_f32acc(x, weight, target, g, *, bias=None, reduction="none", **options):
    """`liger.fused_linear_cross_entropy_grad` with accum_dtype=torch.float32, what Liger recommends where training
    is unstable: dweight and dbias accumulated across chunks in float32 (a skip where the release lacks it). A
    GPU's path only: on a CPU Liger sums dweight by its fallback, each chunk's dz^T x rounded to the inputs' dtype
    before it is added, which no GPU run does (sm80+: addmm with out_dtype=float32), so CPU rows skip."""
    import torch

    if x.device.type == "cpu":
        raise CandidateSkip(
            f"liger-kernel {version()}'s accum_dtype=float32 path is a GPU's: on a CPU its fallback rounds each "
            "chunk's dweight to the inputs' dtype first"
        )
    options = options | {"reduction": reduction}
    return _fused_grad(x, weight, target, g, bias, options, accum_dtype=torch.float32)


def _last(x, axis):
    return x.movedim(axis, -1).contiguous()


@candidate(kind="softmax", name="liger.softmax", framework="triton")
def softmax(x, axis=-1):
    """LigerSoftmaxFunction (liger_softmax) along the last axis (the audited axis moved there): one block per row
    where it fits, a loop over blocks otherwise."""
    return _apply("LigerSoftmaxFunction", _last(x, axis)).movedim(-1, axis)


@candidate(kind="softmax_grad", name="liger.softmax_grad", framework="triton")
def softmax_grad(x, g, axis=-1):
    """The backward of `liger.softmax` by autograd: Liger's backward kernel, y (g - sum(g y))."""
    leaf = _last(x, axis).requires_grad_(True)
    _apply("LigerSoftmaxFunction", leaf).backward(_last(g, axis))
    return leaf.grad.movedim(-1, axis)
