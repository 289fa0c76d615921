"""A model's attention block and output head compiled with `torch.compile`, audited as the compiled code runs.

    softaudit run examples/compiled_module.py --dtype float16 --dtype bfloat16 --dtype float32

`torch.compile` (TorchInductor) fuses the softmax into generated Triton kernels on the GPU, with its own
reductions and exponentials, so its numerics need not be eager PyTorch's. Three candidates: the head's
log-softmax and log-sum-exp (what a cross-entropy loss calls), and attention written out as a model would
(scores, a -inf masked_fill, softmax, weights @ v). `dynamic=True` keeps one compiled graph across the audit's
shapes. Without a CUDA GPU every row is a `skip` (Inductor's CPU backend would need a C++ compiler and minutes).
"""

from __future__ import annotations

import functools
import math

from _gpu import on_gpu, only

import softaudit

DTYPES = ("float16", "bfloat16", "float32", "float64")


def attention_block(q, k, v, mask):
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=-1) @ v


@functools.cache
def _compiled(name: str):
    import torch

    torch._dynamo.config.cache_size_limit = 64  # every dtype and mask/no-mask is a graph of its own
    functions = {"log_softmax": lambda x: x.log_softmax(-1), "logsumexp": lambda x: x.logsumexp(-1),
                 "attention": attention_block}  # fmt: skip
    return torch.compile(functions[name], dynamic=True)


@softaudit.candidate(kind="log_softmax", name="compiled.log_softmax", framework="torch")
def log_softmax(x, axis=-1):
    """torch.compile(lambda x: x.log_softmax(-1)), Inductor on the GPU."""
    only(x.dtype, DTYPES, "not a dtype this model uses")
    (x,) = on_gpu(x.movedim(axis, -1))
    return _compiled("log_softmax")(x).movedim(-1, axis)


@softaudit.candidate(kind="logsumexp", name="compiled.logsumexp", framework="torch")
def logsumexp(x, axis=-1):
    """torch.compile(lambda x: x.logsumexp(-1)), Inductor on the GPU."""
    only(x.dtype, DTYPES, "not a dtype this model uses")
    (x,) = on_gpu(x.movedim(axis, -1))
    return _compiled("logsumexp")(x)


@softaudit.candidate(kind="attention", name="compiled.attention_block", framework="torch")
def attention(q, k, v, mask=None):
    """torch.compile of scores / sqrt(d), masked_fill(-inf), softmax, @ v: attention as models write it."""
    only(q.dtype, DTYPES, "not a dtype this model uses")
    q, k, v, *mask = on_gpu(q, k, v, *(() if mask is None else (mask,)))
    return _compiled("attention")(q, k, v, mask[0] if mask else None)
