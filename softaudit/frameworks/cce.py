"""Cut Cross-Entropy's Triton kernels (`cut_cross_entropy.linear_cross_entropy`, impl="cce") as linear_cross_entropy
and linear_cross_entropy_grad candidates: the loss of x W^T without the logits ever written out, and its backward.

    softaudit run softaudit.frameworks.cce --dtype bfloat16 --dtype float16              # any machine
    softaudit run softaudit.frameworks.cce --device cuda                                 # on the GPU

framework="triton": on a GPU the kernels run as they are; on the CPU in Triton's interpreter, corrected to a GPU's
rounding (docs/triton.md). CCE takes ignore_index, softcap and the three reductions; a case that sets label
smoothing or z-loss, which it lacks, is a `skip` row naming the release, as is the backward in float32 and float64
(its backward takes 16-bit hidden states only). It takes no bias: a case's bias is folded in as a model with one
does, as one more hidden column (x's a column of ones, the weight's the bias), exactly the same logits; dbias is
that column's gradient (at a zero bias where the case has none). Its gradient filter (filter_eps="auto", the
dtype's epsilon / 32) is declared (conventions={"filter": "auto"}): judged a warn with its size within its bound
(docs/policy.md); `cce.linear_cross_entropy_grad_unfiltered` is the same backward with filter_eps=None.
"""

from __future__ import annotations

import functools
import inspect

from ..adapters import CandidateSkip, candidate
from ._need import need

need("torch", "torch")
need("cut_cross_entropy", "cce")


def version() -> str:
    from importlib import metadata

    return metadata.version("cut-cross-entropy")


@functools.cache
def _function():
    from cut_cross_entropy import linear_cross_entropy

    return linear_cross_entropy


def _loss(x, weight, target, options: dict, **more):
    """linear_cross_entropy with impl="cce" and the case's options, keywords bound to the release's signature;
    CandidateSkip naming the release where it lacks one (label smoothing, z-loss: CCE has neither)."""
    options = {"ignore_index": -100, "softcap": None, "reduction": "none"} | options
    lacking = [name for name in ("label_smoothing", "z_loss") if options.pop(name, 0.0)]
    fn = _function()
    parameters = inspect.signature(fn).parameters
    impl = {"impl": "cce"} if "impl" in parameters else {}  # (releases without impl= run only CCE's kernels)
    keywords = {k: v for k, v in (options | more | impl).items() if v is not None or k in parameters}
    lacking += [k for k in keywords if k not in parameters]
    if lacking:
        raise CandidateSkip(f"cut-cross-entropy {version()}'s linear_cross_entropy takes no {', '.join(lacking)}")
    if keywords.get("softcap") is not None:
        keywords["softcap"] = float(keywords["softcap"])
    return fn(x, weight, target, **keywords)


def _with_bias(x, weight, bias):
    """x and W with the bias as one more hidden column: [x, 1] [W, b]^T = x W^T + b, exactly (1 b is exact)."""
    import torch

    ones = torch.ones((x.shape[0], 1), dtype=x.dtype)
    column = bias.reshape(-1, 1).to(weight.dtype)
    return torch.cat([x, ones], dim=1), torch.cat([weight, column], dim=1)


@candidate(kind="linear_cross_entropy", name="cce.linear_cross_entropy", framework="triton")
def linear_cross_entropy(x, weight, target, *, bias=None, **options):
    """cut_cross_entropy.linear_cross_entropy(impl="cce"): a Triton kernel over blocks of rows and classes forms
    each block's logits in float32 and merges its log-sum-exp into the row's (log-add-exp, under a lock), another
    takes the target's logit as x . W_y; the loss is lse - x . W_y in float32."""
    if bias is not None:
        x, weight = _with_bias(x, weight, bias)
    return _loss(x, weight, target, options).detach()


def _grad(x, weight, target, g, bias, options: dict, filter_eps):
    import torch

    if x.dtype not in (torch.bfloat16, torch.float16):
        raise CandidateSkip(f"cut-cross-entropy {version()}'s backward takes bfloat16 and float16 hidden states only")
    h = x.shape[1]
    bias = torch.zeros(weight.shape[0], dtype=weight.dtype) if bias is None else bias
    x, weight = (a.detach().clone().requires_grad_(True) for a in _with_bias(x, weight, bias))
    loss = _loss(x, weight, target, options, filter_eps=filter_eps)
    loss.backward(g.reshape(loss.shape).to(loss.dtype))
    return x.grad[:, :h], weight.grad[:, :h], weight.grad[:, h]


@candidate(
    kind="linear_cross_entropy_grad",
    name="cce.linear_cross_entropy_grad",
    framework="triton",
    conventions={"filter": "auto"},
)
def linear_cross_entropy_grad(x, weight, target, g, *, bias=None, **options):
    """The backward of `cce.linear_cross_entropy` by autograd, filter_eps="auto": a Triton kernel per block of rows
    and classes recomputes the logits, p - q in float32, skips the block where every |p - q| is below the dtype's
    epsilon / 32 (the classes sorted by their mean logit, so that small ones share blocks), and adds dz W and
    dz^T x into dx and dweight, held in the 16-bit dtype, block by block under locks. (dx, dweight, dbias)."""
    return _grad(x, weight, target, g, bias, options, "auto")


@candidate(kind="linear_cross_entropy_grad", name="cce.linear_cross_entropy_grad_unfiltered", framework="triton")
def linear_cross_entropy_grad_unfiltered(x, weight, target, g, *, bias=None, **options):
    """`cce.linear_cross_entropy_grad` with filter_eps=None: every block's gradient added, nothing skipped."""
    return _grad(x, weight, target, g, bias, options, None)
