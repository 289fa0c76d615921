"""PyTorch autograd's backward of softmax, log_softmax, logsumexp, the masking idioms and scaled_dot_product_attention,
as plain functions of numpy arrays (numpy in, numpy out, the same dtype, bit for bit through the bridge).

Not yet marked as candidates: they are wired to the *_grad kinds once the kinds' registry lands. `device` is "cpu"
(default), "cuda" or "cuda:N"; SDPA's flash, efficient and cudnn backends need CUDA.
"""

from __future__ import annotations

from ..adapters._bridge import from_torch, to_torch
from ._need import need
from .torch import _run

need("torch", "torch")

BACKENDS = ("math", "flash", "efficient", "cudnn")


def _vjp(forward, inputs, g, device):
    """The gradients of <g, forward(*inputs)> with respect to the float inputs, by autograd, as numpy arrays."""
    import torch

    tensors = [to_torch(a, device) for a in inputs]
    leaves = [t.requires_grad_() for t in tensors if t.is_floating_point()]
    out = _run(lambda: forward(*tensors))
    grads = _run(lambda: torch.autograd.grad(out, leaves, to_torch(g, device).to(out.dtype)))
    return [from_torch(grad) for grad in grads]


def softmax_grad(x, g, axis=-1, device=None):
    """The backward of torch.softmax(x, dim)."""
    return _vjp(lambda t: t.softmax(axis), [x], g, device)[0]


def log_softmax_grad(x, g, axis=-1, device=None):
    """The backward of torch.log_softmax(x, dim)."""
    return _vjp(lambda t: t.log_softmax(axis), [x], g, device)[0]


def logsumexp_grad(x, g, axis=-1, device=None):
    """The backward of torch.logsumexp(x, dim); g has x's shape without the axis."""
    return _vjp(lambda t: t.logsumexp(axis), [x], g, device)[0]


def masked_fill_neginf_grad(x, mask, g, axis=-1, device=None):
    """The backward of x.masked_fill(~mask, -inf).softmax(dim): NaN on a fully masked row."""
    m = to_torch(mask, device)
    return _vjp(lambda t: t.masked_fill(~m, float("-inf")).softmax(axis), [x], g, device)[0]


def masked_fill_finfo_min_grad(x, mask, g, axis=-1, device=None):
    """The backward of x.masked_fill(~mask, finfo(dtype).min).softmax(dim): a fully masked row is uniform."""
    import torch

    m = to_torch(mask, device)
    return _vjp(lambda t: t.masked_fill(~m, torch.finfo(t.dtype).min).softmax(axis), [x], g, device)[0]


def sdpa_grad(q, k, v, g, mask=None, backend="math", device=None):
    """The backward of scaled_dot_product_attention with a boolean mask, restricted to one backend; q, k, v in
    (..., L, d), taken to (batch, 1 head, L, d) as the fused kernels want. Returns (dq, dk, dv)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    chosen = getattr(SDPBackend, {"math": "MATH", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
                                  "cudnn": "CUDNN_ATTENTION"}[backend])  # fmt: skip
    m = None if mask is None else to_torch(mask, device)

    def forward(q, k, v):
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
        q4, k4, v4 = (a.expand(batch + a.shape[-2:]).reshape((-1, 1) + a.shape[-2:]) for a in (q, k, v))
        kwargs = {} if m is None else {"attn_mask": m.expand(batch + m.shape[-2:]).reshape((-1, 1) + m.shape[-2:])}
        with sdpa_kernel([chosen]):
            out = scaled_dot_product_attention(q4, k4, v4, **kwargs)
        return out.reshape(batch + out.shape[-2:])

    with sdpa_kernel([chosen]):
        return tuple(_vjp(forward, [q, k, v], g, device))
