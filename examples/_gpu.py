"""What the GPU examples share: their tensors move to the GPU and back, and they skip where no GPU is."""

from __future__ import annotations

import softaudit


def on_gpu(*tensors):
    """The tensors on the CUDA GPU, contiguous; a CandidateSkip (a `skip` row) where torch sees none."""
    import torch

    if not torch.cuda.is_available():
        raise softaudit.CandidateSkip("needs a CUDA GPU")
    return [t.to("cuda").contiguous() for t in tensors]


def only(dtype, allowed: tuple[str, ...], why: str):
    """Skip a dtype the kernel was not written for, saying why."""
    name = str(dtype).removeprefix("torch.")
    if name not in allowed:
        raise softaudit.CandidateSkip(f"{name}: {why}")
