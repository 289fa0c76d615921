"""Bug models of linear_cross_entropy and its gradient, f(x, weight, target[, g], *, bias=None, options).

The standard algorithm is best practice's (softaudit.candidates.linear_cross_entropy.f32_logits and its gradient):
the logits, the loss and dz in float32 for a 16-bit dtype. Each model is one built-in with its mistake beside the
built-in without it; both mistakes are 16-bit ones (float32 and float64 are their own working precision).
"""

from __future__ import annotations

from .. import linear_cross_entropy as forward
from .. import linear_cross_entropy_grad as backward
from .._ops import work_dtype
from ._model import Inapplicable, Model, Variant


def _narrow(fn):
    """fn, refusing a dtype that is its own working precision (the mistake cannot be made there)."""

    def call(x, *args, **options):
        if work_dtype(x.dtype) == x.dtype:
            raise Inapplicable("the dtype is its own working precision")
        return fn(x, *args, **options)

    return call


MODELS = [
    Model(
        "logits_in_dtype",
        "linear_cross_entropy",
        "the logits x W^T + b are written out in the 16-bit dtype before the loss (past its largest they are inf)",
        "form the logits in float32 (or fuse the product into the loss) and round only the loss",
        (Variant("float32 loss on the dtype's logits", _narrow(forward.materialised), _narrow(forward.f32_logits)),),
    ),
    Model(
        "logits_in_dtype",
        "linear_cross_entropy_grad",
        "the logits x W^T + b, and dz, are held in the 16-bit dtype before the products with W and x",
        "form the logits and dz in float32 and round only dx, dweight and dbias",
        (Variant("float32 products", _narrow(backward.materialised), _narrow(backward.f32_logits)),),
    ),
    Model(
        "weight_grad_accumulated_in_dtype",
        "linear_cross_entropy_grad",
        "dweight and dbias are summed across chunks of rows in the 16-bit dtype (Liger-Kernel #1391)",
        "accumulate dweight and dbias across chunks in float32 and round once at the end",
        (Variant("chunks of about N H / V rows", _narrow(backward.accumulated_in_dtype), _narrow(backward.chunked)),),
    ),
]
